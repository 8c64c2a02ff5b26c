// Connects to cellserver with node-redis 6's default options, which speak
// RESP3 (HELLO 3 at connect), sends CL.THROTTLE and a few commands, and
// prints what node-redis decoded as JSON. Run by TestNodeRedisRESP3
// (../resp3_test.go):
//
//   node throttle.js '{"url":"redis://127.0.0.1:7000","key":"k","calls":3}'
"use strict";

const { createClient } = require("redis");

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const client = createClient({ url: cfg.url });
  const errors = [];
  client.on("error", (err) => errors.push(String(err)));
  await client.connect();
  const out = { throttle: [], errors };
  try {
    for (let i = 0; i < cfg.calls; i++) {
      out.throttle.push(await client.sendCommand(["CL.THROTTLE", cfg.key, "15", "30", "60"]));
    }
    out.get = await client.get(cfg.key);
    out.missing = await client.get("missing-" + cfg.key);
    out.pttl = await client.pTTL(cfg.key);
    out.clientInfo = await client.sendCommand(["CLIENT", "INFO"]);
    out.hello = await client.sendCommand(["HELLO"]);
  } catch (err) {
    errors.push(String(err));
  } finally {
    await client.quit();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err && err.stack || err)] }));
  process.exitCode = 1;
});
