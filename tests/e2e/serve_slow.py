#!/usr/bin/env python3
"""Slow and stalled HTTP clients for serve_slow.sh, on loopback only.

  serve_slow.py hold PORT --sources 127.0.0.10,127.0.0.11 --per-source 20 --data HEAD
                     --ready FILE --stop FILE --max-s 30
      opens per-source connections from each source address (Linux routes all
      of 127.0.0.0/8 to loopback, so each is a different client address to
      the server), sends DATA on each and never more; writes FILE (--ready)
      once all are open and --settle seconds have passed; then watches until
      every socket was closed by the server, the --stop file appears, or
      --max-s seconds have passed. Prints one JSON object: how many were
      opened, and for each one the server closed, after how many seconds.

  serve_slow.py dribble PORT --source 127.0.0.1 --prefix P --data D --interval 0.25 --max-s 10
      sends P at once, then D one byte per interval; prints after how many
      seconds (from the end of P) the server closed the connection.

Every run is bounded by --max-s; nothing is sent off this machine.
"""
import argparse
import json
import os
import selectors
import socket
import sys
import time


def connect(source, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    return s


def closed_by_peer(s):
    """True when the peer closed (EOF or reset); data it sent is read and dropped."""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def hold(a):
    sel = selectors.DefaultSelector()
    start = {}
    failed = 0
    t0 = time.monotonic()
    for src in a.sources.split(","):
        for _ in range(a.per_source):
            try:
                s = connect(src, a.port)
                s.send(a.data.encode())
            except OSError:
                failed += 1
                continue
            start[s] = time.monotonic()
            sel.register(s, selectors.EVENT_READ)
    opened = len(start)
    closed = []
    ready_at = time.monotonic() + a.settle
    ready = False
    deadline = t0 + a.max_s
    while start and time.monotonic() < deadline:
        if not ready and time.monotonic() >= ready_at:
            with open(a.ready, "w") as f:
                f.write("%d\n" % len(start))
            ready = True
        if a.stop and os.path.exists(a.stop):
            break
        for key, _ in sel.select(timeout=0.05):
            s = key.fileobj
            if closed_by_peer(s):
                closed.append(round(time.monotonic() - start.pop(s), 3))
                sel.unregister(s)
                s.close()
    if not ready:
        with open(a.ready, "w") as f:
            f.write("%d\n" % len(start))
    for s in start:
        s.close()
    json.dump({"opened": opened, "connect_failed": failed, "closed": len(closed),
               "close_s": sorted(closed), "open_at_end": len(start)}, sys.stdout)
    print()


def dribble(a):
    s = connect(a.source, a.port)
    s.setblocking(True)
    s.settimeout(a.interval)
    s.sendall(a.prefix.encode())
    t0 = time.monotonic()
    sent = 0
    after = None
    data = a.data.encode()
    while time.monotonic() - t0 < a.max_s:
        try:
            b = s.recv(65536)
            if not b:
                after = time.monotonic() - t0
                break
            continue  # a reply: read on until the close
        except socket.timeout:
            pass
        except OSError:
            after = time.monotonic() - t0
            break
        if sent < len(data):
            try:
                s.send(data[sent:sent + 1])
                sent += 1
            except OSError:
                after = time.monotonic() - t0
                break
    s.close()
    json.dump({"closed_after_s": None if after is None else round(after, 3), "sent": sent},
              sys.stdout)
    print()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["hold", "dribble"])
    p.add_argument("port", type=int)
    p.add_argument("--sources", default="127.0.0.1")
    p.add_argument("--source", default="127.0.0.1")
    p.add_argument("--per-source", type=int, default=1)
    p.add_argument("--prefix", default="")
    p.add_argument("--data", default="")
    p.add_argument("--interval", type=float, default=0.25)
    p.add_argument("--settle", type=float, default=1.2)
    p.add_argument("--ready", default=os.devnull)
    p.add_argument("--stop", default="")
    p.add_argument("--max-s", type=float, default=30)
    a = p.parse_args()
    a.data = a.data.replace("\\r\\n", "\r\n")
    a.prefix = a.prefix.replace("\\r\\n", "\r\n")
    (hold if a.mode == "hold" else dribble)(a)


if __name__ == "__main__":
    main()
