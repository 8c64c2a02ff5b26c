// ioredis 6 runs MULTI/EXEC against cellserver with redis.multi(): a
// transaction of CL.THROTTLE on two keys, one with a queueing error, and
// one whose watched key another client charged. Prints what ioredis
// decoded as JSON. Run by TestTxIORedis (../tx_test.go):
//
//   node tx.js '{"host":"127.0.0.1","port":7000,"a":"k1","b":"k2","bad":"k3","watched":"k4"}'
"use strict";

const Redis = require("ioredis");

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const opts = { host: cfg.host, port: cfg.port, maxRetriesPerRequest: 1 };
  const redis = new Redis(opts);
  const other = new Redis(opts);
  const errors = [];
  redis.on("error", (err) => errors.push(String(err)));
  other.on("error", (err) => errors.push(String(err)));
  const out = { errors };
  try {
    const th = (k) => ["CL.THROTTLE", k, 15, 30, 60];
    // exec resolves to [[err, reply], ...].
    out.exec = await redis.multi().call(...th(cfg.a)).call(...th(cfg.b)).call(...th(cfg.a)).exec();

    try {
      await redis.multi().call(...th(cfg.bad)).call("NOPE").exec();
      out.abort = "no error";
    } catch (err) {
      out.abort = String(err && err.message);
    }
    out.badExists = await redis.exists(cfg.bad);

    await redis.watch(cfg.watched);
    await other.call(...th(cfg.watched));
    // A transaction whose watched key changed resolves to null.
    out.watch = await redis.multi().call(...th(cfg.watched)).exec();
    out.watchedAfter = await other.call(...th(cfg.watched));
  } catch (err) {
    errors.push(String(err && err.stack || err));
  } finally {
    redis.disconnect();
    other.disconnect();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err && err.stack || err)] }));
  process.exitCode = 1;
});
