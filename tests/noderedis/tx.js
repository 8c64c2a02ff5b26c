// node-redis 6 (default options: RESP3) runs MULTI/EXEC against cellserver
// with client.multi(): a transaction of CL.THROTTLE on two keys, one with a
// queueing error, and one whose watched key another client charged. Prints
// what node-redis decoded as JSON. Run by TestTxNodeRedis (../tx_test.go):
//
//   node tx.js '{"url":"redis://127.0.0.1:7000","a":"k1","b":"k2","bad":"k3","watched":"k4"}'
"use strict";

const { createClient } = require("redis");

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const client = createClient({ url: cfg.url });
  const other = createClient({ url: cfg.url });
  const errors = [];
  client.on("error", (err) => errors.push(String(err)));
  other.on("error", (err) => errors.push(String(err)));
  await client.connect();
  await other.connect();
  const out = { errors };
  try {
    const th = (k) => ["CL.THROTTLE", k, "15", "30", "60"];
    out.exec = await client.multi().addCommand(th(cfg.a)).addCommand(th(cfg.b)).addCommand(th(cfg.a)).exec();

    try {
      await client.multi().addCommand(th(cfg.bad)).addCommand(["NOPE"]).exec();
      out.abort = "no error";
    } catch (err) {
      out.abort = String(err && err.message);
    }
    out.badExists = await client.exists(cfg.bad);

    await client.watch(cfg.watched);
    await other.sendCommand(th(cfg.watched));
    try {
      await client.multi().addCommand(th(cfg.watched)).exec();
      out.watch = "no error";
    } catch (err) {
      out.watch = err && err.constructor && err.constructor.name;
    }
    out.watchedAfter = await other.sendCommand(th(cfg.watched));
  } catch (err) {
    errors.push(String(err && err.stack || err));
  } finally {
    await client.quit();
    await other.quit();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err && err.stack || err)] }));
  process.exitCode = 1;
});
