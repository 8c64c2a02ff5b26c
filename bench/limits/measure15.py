#!/usr/bin/env python3
# Figures for the per-client limits (connection flood under a low NOFILE
# limit, a 1M/4M-element multibulk, 10 MB of unread COMMAND DOCS, 100 MB
# arguments), measured the same way against any cellserver binary, so a
# build before and after a change can be compared:
#
#   python3 bench/limits/measure15.py ./cellserver 7201 [flood|parse|obuf|bigarg ...]
#
# Loopback only; every step is bounded in count and time. Needs prlimit.
import socket, subprocess, sys, time, os, re, tempfile, shutil
BIN = sys.argv[1]
PORT = int(sys.argv[2])
def start(args, wrap=()):
    d = tempfile.mkdtemp()
    log = open(d + "/log", "w")
    p = subprocess.Popen(list(wrap) + [BIN, "--addr", "127.0.0.1:%d" % PORT, "--data-dir", d + "/data"] + args, stdout=log, stderr=log)
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", PORT), timeout=1); s.close(); break
        except OSError: time.sleep(0.05)
    return p, d
def stop(p, d):
    if p.poll() is None:
        p.terminate()
        try: p.wait(10)
        except subprocess.TimeoutExpired: p.kill(); p.wait()
    out = open(d + "/log").read(); shutil.rmtree(d, ignore_errors=True); return out
def kb(pid, f):
    return int(re.search(f + r":\s+(\d+)", open("/proc/%d/status" % pid).read()).group(1))
def ping():
    try:
        s = socket.create_connection(("127.0.0.1", PORT), timeout=2); s.settimeout(3); s.sendall(b"PING\r\n"); r = s.recv(100); s.close(); return r
    except OSError as e: return repr(e)

which = sys.argv[3:] or ["flood", "parse", "obuf", "bigarg"]
if "flood" in which:
    p, d = start([], wrap=("prlimit", "--nofile=1024:1024"))
    conns = []; pong = refused = other = 0
    for i in range(1100):
        try:
            s = socket.create_connection(("127.0.0.1", PORT), timeout=2); s.settimeout(3)
            s.sendall(b"PING\r\n"); r = s.recv(100); conns.append(s)
            if r == b"+PONG\r\n": pong += 1
            elif r.startswith(b"-ERR max"): refused += 1
            else: other += 1
        except OSError: other += 1
    for s in conns: s.close()
    time.sleep(0.5)
    alive = p.poll() is None
    fresh = ping()
    code = p.poll()
    out = stop(p, d)
    print("flood: pong=%d refused=%d failed=%d alive_after=%s fresh_ping=%r exit=%s log_maxclients=%s" % (pong, refused, other, alive, fresh, code, re.findall(r"maxclients=\d+", out)[-1:] ))
if "parse" in which:
    p, d = start(["--in-memory"] if False else [])
    for n in (1 << 20, 4 << 20):
        req = b"*%d\r\n$6\r\nEXISTS\r\n" % (n + 1) + b"$1\r\nk\r\n" * n
        s = socket.create_connection(("127.0.0.1", PORT)); s.settimeout(120)
        t = time.time(); pt = None
        for i in range(0, len(req), 65536):
            if pt is None and i >= len(req) // 2:
                t0 = time.time(); ping(); pt = time.time() - t0
            s.sendall(req[i:i + 65536])
        r = s.recv(100); took = time.time() - t
        print("parse: EXISTS %dM keys: %.2fs reply=%r ping_mid=%.3fs peakRSS=%dMB" % (n >> 20, took, r, pt, kb(p.pid, "VmHWM") >> 10))
        s.close()
    stop(p, d)
if "obuf" in which:
    p, d = start([])
    base = kb(p.pid, "VmRSS")
    one = b"*2\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n"
    s = socket.create_connection(("127.0.0.1", PORT)); s.settimeout(60)
    t = time.time(); sent = 0; req = one * (10 * 1024 * 1024 // len(one))
    try:
        s.sendall(req); sent = len(req)
    except OSError as e: sent = -1
    # wait until closed or 60 s
    time.sleep(3)
    peak = kb(p.pid, "VmHWM"); rss = kb(p.pid, "VmRSS")
    s.close(); time.sleep(5)
    after = kb(p.pid, "VmRSS")
    print("obuf: 10MB unread COMMAND DOCS: base %dMB peak %dMB rss_while %dMB rss_5s_after_close %dMB alive=%s" % (base >> 10, peak >> 10, rss >> 10, after >> 10, p.poll() is None))
    stop(p, d)
if "bigarg" in which:
    arg = b"0123456789abcdef" * (100 * 1024 * 1024 // 16)
    for name in ("EXISTS", "ECHO", "CL.THROTTLE"):
        p, d = start([])
        ping(); before = kb(p.pid, "VmHWM")
        if name == "CL.THROTTLE":
            req = b"*5\r\n$11\r\nCL.THROTTLE\r\n$%d\r\n%s\r\n$1\r\n5\r\n$2\r\n10\r\n$2\r\n60\r\n" % (len(arg), arg)
        else:
            req = b"*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(name), name.encode(), len(arg), arg)
        s = socket.create_connection(("127.0.0.1", PORT)); s.settimeout(60)
        import threading
        th = threading.Thread(target=lambda: s.sendall(req)); th.start()
        got = b""; first = None
        while True:
            c = s.recv(1 << 20)
            if not c: break
            got += c
            if first is None and b"\r\n" in got: first = got[:got.index(b"\r\n")]
            if got.startswith(b"$"):
                if len(got) >= len(arg) + 14: break
            elif b"\r\n" in got: break
        th.join()
        if p.poll() is not None:
            print("bigarg: %s 100MB: server exited %s: %s" % (name, p.poll(), stop(p, d)[-300:])); continue
        grew = kb(p.pid, "VmHWM") - before
        print("bigarg: %s 100MB: reply %r peak RSS grew %dMB (%.2fx)" % (name, first[:60], grew >> 10, grew * 1024 / len(arg)))
        s.close(); stop(p, d)
