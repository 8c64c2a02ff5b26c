// Connects to a cellserver cluster with node-redis 6's createCluster and its
// default options (RESP3), sends CL.THROTTLE for each key with the key as
// sendCommand's firstKey (node-redis routes raw commands by it and by
// nothing else), and prints what it decoded as JSON. Run by
// TestNodeRedisCluster (../clusterclients_test.go):
//
//   node cluster.js '{"url":"redis://127.0.0.1:7000","keys":["a","b"],"calls":3}'
"use strict";

const { createCluster } = require("redis");

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const cluster = createCluster({ rootNodes: [{ url: cfg.url }] });
  const errors = [];
  cluster.on("error", (err) => errors.push(String(err)));
  await cluster.connect();
  const out = { masters: cluster.masters.length, results: {}, get: {}, errors };
  try {
    for (const key of cfg.keys) {
      out.results[key] = [];
      for (let i = 0; i < cfg.calls; i++) {
        out.results[key].push(await cluster.sendCommand(key, false, ["CL.THROTTLE", key, "15", "30", "60"]));
      }
      out.get[key] = await cluster.get(key);
    }
  } catch (err) {
    errors.push(String(err));
  } finally {
    await cluster.close();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err && err.stack || err)] }));
  process.exitCode = 1;
});
