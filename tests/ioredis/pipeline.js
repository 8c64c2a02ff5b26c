// Sends CL.THROTTLE through an ioredis Cluster's pipeline() and prints the
// replies as JSON. Run by TestClusterIORedisPipeline
// (../clusterclients_test.go):
//
//   node pipeline.js '{"nodes":[{"host":"127.0.0.1","port":7000}],
//                      "keys":["{t}a","{t}b"],"calls":3,"mode":"keys"}'
//
// A cluster pipeline is sent to the node of its commands' keys, and ioredis
// takes those from Command.getKeys(), not from Command.slot: for a command
// it does not know (CL.THROTTLE) getKeys() is empty, so the pipeline goes to
// a random master and comes back MOVED.
// mode "slot": only cmd.slot set (what routes a single command).
// mode "keys": cmd.keys = [key] as well: the pipeline goes to the owner.
"use strict";

const Redis = require("ioredis");
const calculateSlot = require("cluster-key-slot");

function throttleCmd(key, mode) {
  const cmd = new Redis.Command("CL.THROTTLE", [key, 15, 30, 60], { replyEncoding: "utf8" });
  cmd.slot = calculateSlot(key);
  if (mode === "keys") cmd.keys = [key];
  return cmd;
}

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const cluster = new Redis.Cluster(cfg.nodes, {
    redisOptions: { connectTimeout: 5000, maxRetriesPerRequest: 2 },
    slotsRefreshTimeout: 5000,
    clusterRetryStrategy: () => null,
  });
  const errors = [];
  cluster.on("error", (e) => errors.push(`cluster error: ${e.message}`));
  await new Promise((resolve, reject) => {
    cluster.once("ready", resolve);
    cluster.once("end", () => reject(new Error("cluster connection ended before ready")));
  });
  const results = {};
  try {
    for (let i = 0; i < cfg.calls; i++) {
      const p = cluster.pipeline();
      for (const key of cfg.keys) p.sendCommand(throttleCmd(key, cfg.mode));
      const replies = await p.exec();
      replies.forEach(([err, r], j) => {
        if (err) errors.push(`${cfg.keys[j]}: ${err.message}`);
        (results[cfg.keys[j]] ||= []).push(r);
      });
    }
  } catch (e) {
    errors.push(String(e));
  }
  cluster.disconnect();
  process.stdout.write(JSON.stringify({ results, errors }));
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ errors: [String(err && err.stack || err)] }));
  process.exitCode = 1;
});
