"""redis-py (Debian's python3-redis) runs MULTI/EXEC against cellserver
with its default pipeline(), which is a transaction: CL.THROTTLE on two
keys, a transaction with a queueing error (nothing of it may run), and one
whose watched key another client charged. Prints what redis-py decoded as
JSON. Run by TestTxRedisPy (../tx_test.go):

    python3 tx.py '{"host":"127.0.0.1","port":7000,"a":"k1","b":"k2","bad":"k3","watched":"k4"}'
"""
import json
import sys

import redis


def main():
    cfg = json.loads(sys.argv[1])
    r = redis.Redis(host=cfg["host"], port=cfg["port"])
    other = redis.Redis(host=cfg["host"], port=cfg["port"])
    out = {"version": redis.__version__}

    def th(p, k):
        return p.execute_command("CL.THROTTLE", k, 15, 30, 60)

    p = r.pipeline()
    th(p, cfg["a"])
    th(p, cfg["b"])
    th(p, cfg["a"])
    out["exec"] = p.execute()

    p = r.pipeline()
    th(p, cfg["bad"])
    p.execute_command("NOPE")
    try:
        p.execute()
        out["abort"] = "no error"
    except redis.exceptions.ResponseError as e:
        out["abort"] = type(e).__name__ + ": " + str(e)
    out["badExists"] = r.exists(cfg["bad"])

    with r.pipeline() as p:
        p.watch(cfg["watched"])
        th(other, cfg["watched"])
        p.multi()
        th(p, cfg["watched"])
        try:
            p.execute()
            out["watch"] = "no error"
        except redis.exceptions.WatchError as e:
            out["watch"] = type(e).__name__
    out["watchedAfter"] = th(other, cfg["watched"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
