"""redis-py's RedisCluster (Debian's python3-redis) hammers cellserver
nodes with CL.THROTTLE while slots move, following MOVED, ASK (it sends
ASKING to the node named) and TRYAGAIN by itself. It sends rounds over the
keys until the stop file exists, max_rounds passes were sent or max_seconds
have passed, whichever comes first, then prints as JSON how many calls each
key was allowed (reply[0] == 0), how many replies each key got, and the
errors it met. Run by TestClusterMovesExactUnderLoad (../clustermove_test.go):

    python3 cluster_hammer.py '{"nodes":[{"host":"127.0.0.1","port":7000}],
        "keys":["k1","k2"],"args":[9,10,3600],"stop_file":"/tmp/x",
        "max_rounds":50,"max_seconds":40}'
"""
import json
import os
import sys
import time

import redis
from redis.cluster import ClusterNode, RedisCluster


def main():
    cfg = json.loads(sys.argv[1])
    rc = RedisCluster(
        startup_nodes=[ClusterNode(n["host"], n["port"]) for n in cfg["nodes"]],
        socket_timeout=10,
    )
    keys = cfg["keys"]
    args = cfg["args"]
    allowed = {k: 0 for k in keys}
    replies = {k: 0 for k in keys}
    error_keys = {}
    messages = []
    errors = 0
    rounds = 0
    deadline = time.monotonic() + cfg["max_seconds"]
    stop = cfg["stop_file"]
    while rounds < cfg["max_rounds"] and time.monotonic() < deadline and not os.path.exists(stop):
        for k in keys:
            try:
                r = rc.execute_command("CL.THROTTLE", k, *args)
            except redis.exceptions.RedisError as e:
                errors += 1
                error_keys[k] = error_keys.get(k, 0) + 1
                if len(messages) < 10:
                    messages.append(type(e).__name__ + ": " + str(e))
                continue
            replies[k] += 1
            if r[0] == 0:
                allowed[k] += 1
        rounds += 1
    json.dump({
        "version": redis.__version__,
        "rounds": rounds,
        "allowed": allowed,
        "replies": replies,
        "errors": errors,
        "error_keys": error_keys,
        "messages": messages,
    }, sys.stdout)


if __name__ == "__main__":
    main()
