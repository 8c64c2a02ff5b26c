// Sends CL.THROTTLE through an ioredis Cluster and prints the replies as JSON.
// Run by TestClusterIORedis (../cluster_test.go):
//
//   node throttle.js '{"nodes":[{"host":"127.0.0.1","port":7000}],
//                      "keys":["a","b"],"calls":3,"mode":"call",
//                      "burst":15,"count":30,"period":60}'
//
// mode "call":   cluster.call('CL.THROTTLE', key, ...), the obvious way.
//                ioredis finds a command's keys in its built-in command table
//                (@ioredis/commands). CL.THROTTLE is not in it, so
//                Command.getSlot() is null and Cluster.sendCommand sends the
//                command to a random master, which answers MOVED unless it
//                owns the key: an extra round trip for most calls.
// mode "routed": the fix. Give the Command its slot before sending it:
//                Command.getSlot() returns this.slot when it is set, so the
//                cluster routes the command to the slot's owner like any keyed
//                command. MOVED handling is unchanged: Cluster.sendCommand
//                installs it for every command sent without an explicit node.
//                (Command is marked @ignore in ioredis's docs and slot is a
//                private field in its typings: checked with ioredis 6.0.0.)
"use strict";

const Redis = require("ioredis");
const calculateSlot = require("cluster-key-slot"); // the CRC16 ioredis itself uses

// throttleRouted is the fix: CL.THROTTLE routed by its key's slot.
function throttleRouted(cluster, key, burst, count, period) {
  const cmd = new Redis.Command("CL.THROTTLE", [key, burst, count, period], {
    replyEncoding: "utf8",
  });
  cmd.slot = calculateSlot(key);
  return cluster.sendCommand(cmd);
}

// throttleCall is the naive way: ioredis does not know where the key is.
function throttleCall(cluster, key, burst, count, period) {
  return cluster.call("CL.THROTTLE", key, burst, count, period);
}

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const send = { call: throttleCall, routed: throttleRouted }[cfg.mode];
  if (!send) throw new Error(`unknown mode ${cfg.mode}`);

  const cluster = new Redis.Cluster(cfg.nodes, {
    redisOptions: { connectTimeout: 5000, maxRetriesPerRequest: 2 },
    slotsRefreshTimeout: 5000,
    clusterRetryStrategy: () => null, // fail fast: the test wants the error
  });
  const errors = [];
  cluster.on("error", (e) => errors.push(`cluster error: ${e.message}`));
  await new Promise((resolve, reject) => {
    cluster.once("ready", resolve);
    cluster.once("end", () => reject(new Error("cluster connection ended before ready")));
  });

  const results = {};
  const started = Date.now();
  // Keys run concurrently; the calls of one key run in order.
  await Promise.all(
    cfg.keys.map(async (key) => {
      results[key] = [];
      for (let i = 0; i < cfg.calls; i++) {
        try {
          results[key].push(await send(cluster, key, cfg.burst, cfg.count, cfg.period));
        } catch (e) {
          errors.push(`${key} call ${i}: ${e.message}`);
          return;
        }
      }
    }),
  );
  const out = {
    mode: cfg.mode,
    masters: cluster.nodes("master").length,
    ms: Date.now() - started,
    results,
    errors,
  };
  await cluster.quit();
  process.stdout.write(JSON.stringify(out) + "\n");
}

setTimeout(() => {
  process.stderr.write("throttle.js: timed out after 30s\n");
  process.exit(3);
}, 30000).unref();

main().catch((e) => {
  process.stderr.write(`throttle.js: ${e.stack || e}\n`);
  process.exit(1);
});
