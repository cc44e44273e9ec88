#!/usr/bin/env python3
"""Throughput and first-token latency of `lares serve --parallel N` (issue 20).

  bench/serve_parallel.py LARES_BINARY MODEL [--streams "1 4 8"] [--tokens 64]
                          [--reps 3] [--threads 2] [--long 1536]
                          [--engine lares|llama-server] [--ctx 512]
                          [--limit 3.0G] [--no-ttft] [--lookup N] [--prompt P]
                          [--temperature T] [--sequential]
                          [--client evented|threads]

--engine llama-server runs the reference engine's server instead (the first
argument is then its llama-server binary, started with `-np S -c CTX*S`, its
continuous batching on by default) for the same figures side by side. Each
stream has --ctx positions (lares: `-c CTX`, a context per sequence).

--launcher PATH starts each lares server through PATH (a program that execs
lares, e.g. a device of the emulated home, tests/cluster/testbed.sh) and
--extra "ARGS" adds ARGS to its command line (--ring ring.json ...:
bench/ring_parallel.sh).

--limit runs each lares server in a fresh memory cgroup of that size (decimal
G/M, as bench/mem_stream.sh; root), from a cold page cache: weights that do not
fit beside the streams' caches stream from disk, read once a step for all.
--lookup N serves with prompt lookup (`lares serve --lookup N`); with it or a
draft model (--extra "--draft D.gguf"), each figure also gives the tokens
drafted and accepted during its runs (the server's /metrics).

For each S in --streams: starts `lares serve --parallel S` (S = 1: without
--parallel, the one-request-at-a-time server) and sends S streamed
completions at once, each a different short prompt and --tokens tokens
(`max_tokens`), --reps times; the figure is the aggregate generated tokens per
second between the first token of the last stream to start and the end of the
last to finish (the prompts are not counted; the "tgNxS" of `lares bench`),
and the median over the reps. The servers of every S are up together and the
reps alternate (rep 1 of each S, then rep 2 of each, ...), so that a host
whose speed drifts moves every S alike; "over_one" is the ratio of the
medians, "over_one_paired" the median of each rep's ratio to the one-stream
run of the same rep. --sequential (and --limit, --launcher, whose servers
must run alone) runs one server after another, each S's reps together.

Then the first-token latency of a short request (streamed, 1 token) on a
server with --parallel 2: idle (median of --reps), and while another request's
prompt of --long tokens is being read (the short one sent 0.3 s after it).

--client: the S streams are read by one thread's event loop (the default, as
a Node.js client reads them), or by a thread each (Python's http.client). On a
2-core host the client shares the cores with the server: bursts of 8 streams
against one server, the clients alternating (docs/performance.md, session 30),
ran at 161.0, 165.4, 162.9 t/s with a thread each (964-1036 context switches
a second on the host) and 165.6, 169.4, 168.6 from the event loop (860-908).

--temperature T samples at T (default 0: greedy), with the API's other
sampling fields left out (an OpenAI client's defaults: no top-k, top-p 1).

Prints one JSON object; exits 1 when a reply is malformed or the server fails.
"""
import argparse
import http.client
import json
import os
import re
import selectors
import socket
import statistics
import subprocess
import sys
import threading
import time


def sig(x, digits=4):
    """x to `digits` significant digits (a 7B ring's 0.2 tok/s keeps its precision)"""
    return float(f"{x:.{digits}g}")


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def start_reference(binary, model, parallel, threads, ctx, extra=""):
    """llama-server on a free port, ready when /health answers 200."""
    port = free_port()
    # no chat template and no parsing of the output for thoughts: newer
    # builds answered plain completions of a random-weights model with a 500
    # ("Failed to parse input") mid-stream
    args = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads),
            "-c", str(ctx), "-np", str(parallel), "--no-jinja", "--reasoning-format", "none"
            ] + extra.split()
    srv = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while time.time() - t0 < 120 and srv.poll() is None:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return srv, port
        except OSError:
            pass
        time.sleep(0.2)
    srv.kill()
    sys.exit("serve_parallel: llama-server did not start: " + " ".join(args))


def in_cgroup(args, limit):
    """args run in a fresh memory cgroup of `limit` bytes (v1, else v2), from
    a cold page cache; the cgroup is removed when the process has ended."""
    rel = ""
    v1 = os.path.isdir("/sys/fs/cgroup/memory")
    for line in open("/proc/self/cgroup"):
        ident, ctrl, path = line.rstrip("\n").split(":", 2)
        if (v1 and "memory" in ctrl.split(",")) or (not v1 and ident == "0"):
            rel = path.rstrip("/")
    base = ("/sys/fs/cgroup/memory" if v1 else "/sys/fs/cgroup") + rel
    cg = f"{base}/lares-serve-bench-{os.getpid()}-{len(CGROUPS)}"
    os.mkdir(cg)
    with open(f"{cg}/{'memory.limit_in_bytes' if v1 else 'memory.max'}", "w") as f:
        f.write(str(limit))
    CGROUPS.append(cg)
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    return ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh", cg] + args


CGROUPS = []


def size_bytes(text):
    """3.0G -> 3000000000 (decimal, as bench/mem_stream.sh)"""
    unit = {"G": 1e9, "M": 1e6}.get(text[-1:], 1)
    return int(float(text.rstrip("GM")) * unit)


def start(lares, model, parallel, threads, ctx, engine="lares", limit=None, lookup=0,
          launcher=None, extra=""):
    if engine == "llama-server":
        return start_reference(lares, model, parallel, threads, ctx * max(parallel, 1), extra)
    # lares's context is each sequence's; llama-server splits its own among the slots
    args = [launcher or lares, "serve", "-m", model, "--port", "0", "-t", str(threads),
            "-c", str(ctx)] + extra.split()
    if parallel > 1:
        args += ["--parallel", str(parallel)]
    if lookup:
        args += ["--lookup", str(lookup)]
    if limit:
        args = in_cgroup(args, size_bytes(limit))
    srv = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    log = []
    while time.time() - t0 < 120:
        line = srv.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r" on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()
            return srv, int(m.group(1))
    srv.kill()
    sys.exit("serve_parallel: the server did not start: " + "".join(log))


TEMPERATURE = 0.0  # --temperature


def stream(port, prompt, max_tokens, out):
    """One streamed completion; out gets (t_sent, t_first, t_end, tokens)."""
    body = json.dumps({"model": "lares", "prompt": prompt, "max_tokens": max_tokens,
                       "stream": True, "temperature": TEMPERATURE})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t_sent = time.time()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out.append(("error", r.status, r.read()[:200]))
        return
    first = None
    n = 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        o = json.loads(data)
        if "error" in o:
            out.append(("error", r.status, data[:200]))
            return
        # a token is a chunk with text, or one not yet finished (a token whose
        # text is empty, as a copying model's <s>); llama-server ends with a
        # chunk of timings and no choices
        ch = o.get("choices")
        if ch and (ch[0].get("text") or ch[0].get("finish_reason") is None):
            n += 1
            if first is None:
                first = time.time()
    c.close()
    out.append((t_sent, first, time.time(), n))


PROMPT = "Story {rep} number {i}: once upon a time"


class EventedStream:
    """One streamed completion read by the caller's event loop: the bytes of
    the HTTP/1.1 reply (chunked, or to the end) fed as they come."""

    def __init__(self, port, prompt, max_tokens):
        body = json.dumps({"model": "lares", "prompt": prompt, "max_tokens": max_tokens,
                           "stream": True, "temperature": TEMPERATURE}).encode()
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.t_sent = time.time()
        self.sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body)
        self.sock.setblocking(False)
        self.raw, self.body = b"", b""
        self.status, self.chunked, self.length = None, False, None
        self.first, self.end, self.n, self.error = None, None, 0, None

    def feed(self, data):
        """False once the reply is over (its end, an error, or the peer closing)."""
        if not data:
            self.end = self.end or time.time()
            return False
        self.raw += data
        if self.status is None:
            i = self.raw.find(b"\r\n\r\n")
            if i < 0:
                return True
            head = self.raw[:i].decode("latin-1").split("\r\n")
            self.raw = self.raw[i + 4:]
            self.status = int(head[0].split()[1])
            fields = dict(h.lower().replace(" ", "").split(":", 1) for h in head[1:] if ":" in h)
            self.chunked = fields.get("transfer-encoding") == "chunked"
            self.length = int(fields["content-length"]) if "content-length" in fields else None
        if not self.chunked:  # to Content-Length, else to the close
            part, self.raw = self.raw, b""
            self.body += part
            if self.length is not None:
                self.length -= len(part)
            more = self.events()
            return more and (self.length is None or self.length > 0)
        while True:
            i = self.raw.find(b"\r\n")
            if i < 0:
                return True
            size = int(self.raw[:i].split(b";")[0], 16)
            if len(self.raw) < i + 2 + size + 2:
                return True
            self.body += self.raw[i + 2:i + 2 + size]
            self.raw = self.raw[i + 4 + size:]
            if not self.events() or size == 0:
                self.end = self.end or time.time()
                return False

    def events(self):
        if self.status != 200:
            self.error = ("error", self.status, self.body[:200])
            return True  # the rest of the body comes with the close
        while True:
            i = self.body.find(b"\n\n")
            if i < 0:
                return True
            line = self.body[:i].decode().strip()
            self.body = self.body[i + 2:]
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                self.end = time.time()
                return False
            o = json.loads(data)
            if "error" in o:
                self.error = ("error", self.status, data[:200])
                return False
            ch = o.get("choices")  # as stream() counts them
            if ch and (ch[0].get("text") or ch[0].get("finish_reason") is None):
                self.n += 1
                if self.first is None:
                    self.first = time.time()


def streams_evented(port, prompts, max_tokens):
    """The completions of prompts at once, read by one thread from one event
    loop (as a Node.js client does), each as stream()'s tuple."""
    sel = selectors.DefaultSelector()
    conns = [EventedStream(port, p, max_tokens) for p in prompts]
    for c in conns:
        sel.register(c.sock, selectors.EVENT_READ, c)
    left, deadline = len(conns), time.time() + 600
    while left > 0 and time.time() < deadline:
        for key, _ in sel.select(timeout=5):
            c = key.data
            try:
                data = c.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            if not c.feed(data):
                sel.unregister(c.sock)
                c.sock.close()
                left -= 1
    out = []
    for c in conns:
        if left > 0 and c.end is None:
            c.error = c.error or ("error", c.status, b"no end within 600 s")
        out.append(c.error if c.error else (c.t_sent, c.first, c.end, c.n))
    sel.close()
    return out


CLIENT = "evented"  # --client


LAST_COUNTS = {}  # tokens each stream of the last run of a stream count got


def throughput(port, s, tokens, rep):
    prompts = [PROMPT.format(rep=rep, i=i) for i in range(s)]
    if CLIENT == "evented":
        res = streams_evented(port, prompts, tokens)
    else:
        outs = [[] for _ in range(s)]
        th = [threading.Thread(target=stream, args=(port, prompts[i], tokens, outs[i]))
              for i in range(s)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        res = [o[0] for o in outs]
    for r in res:
        if r[0] == "error" or r[1] is None:
            sys.exit(f"serve_parallel: a stream failed: {r}")
    LAST_COUNTS[s] = [r[3] for r in res]
    begin = max(r[1] for r in res)
    end = max(r[2] for r in res)
    # tokens after every stream's first token: each stream's tokens past the
    # moment the last one started, estimated by its own rate
    after = 0.0
    for (t_sent, t_first, t_end, n) in res:
        if n > 1 and t_end > t_first:
            after += (n - 1) * max(0.0, t_end - max(begin, t_first)) / (t_end - t_first)
    return after / (end - begin) if end > begin else 0.0


def drafts(port):
    """(drafted, accepted) tokens so far, from the server's /metrics."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    got = {}
    for name in ("lares_drafted_tokens_total", "lares_accepted_tokens_total"):
        m = re.search(r"^" + name + r" (\d+)$", text, re.M)
        got[name] = int(m.group(1)) if m else 0
    return got["lares_drafted_tokens_total"], got["lares_accepted_tokens_total"]


def ttft(port, prompt):
    out = []
    stream(port, prompt, 1, out)
    r = out[0]
    if r[0] == "error" or r[1] is None:
        sys.exit(f"serve_parallel: a request failed: {r}")
    return r[1] - r[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lares")
    ap.add_argument("model")
    ap.add_argument("--streams", default="1 4 8")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long", type=int, default=1536)
    ap.add_argument("--engine", choices=["lares", "llama-server"], default="lares")
    ap.add_argument("--ctx", type=int, default=512, help="positions for each stream")
    ap.add_argument("--limit", help="lares in a memory cgroup of this size (3.0G), cold")
    ap.add_argument("--no-ttft", action="store_true", help="throughput only")
    ap.add_argument("--lookup", type=int, default=0, help="lares serve --lookup N")
    ap.add_argument("--launcher", help="start lares through this program (a testbed device)")
    ap.add_argument("--extra", default="",
                    help="more server arguments (lares: --ring ..., --draft D; llama-server: -md D)")
    ap.add_argument("--sequential", action="store_true",
                    help="one server at a time, each stream count's reps together (the "
                         "default alternates the counts rep by rep)")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="sample at this temperature (default 0: greedy)")
    ap.add_argument("--client", choices=["evented", "threads"], default="evented",
                    help="the streams read by one thread's event loop (default), or a "
                         "thread each")
    ap.add_argument("--prompt", default=PROMPT,
                    help="the streams' prompts, {rep} and {i} filled in (default: %(default)s)")
    a = ap.parse_args()
    globals()["PROMPT"] = a.prompt
    globals()["TEMPERATURE"] = a.temperature
    globals()["CLIENT"] = a.client
    if a.limit and a.engine != "lares":
        sys.exit("serve_parallel: --limit is for lares (bench/mem_stream.sh runs the reference)")
    result = {"engine": a.engine, "model": a.model, "tokens": a.tokens, "threads": a.threads,
              "limit": a.limit, "lookup": a.lookup, "temperature": a.temperature, "client": a.client, "streams": {}}
    try:
        run(a, result)
    finally:
        for cg in CGROUPS:
            if os.path.isdir(cg):
                os.rmdir(cg)
    print(json.dumps(result))


def run(a, result):
    counts = [int(x) for x in a.streams.split()]
    # Alternating (the default): one server per stream count, all up at once,
    # each rep runs every count in turn, so a host whose speed drifts (a
    # neighbour, the VM's memory) moves all counts alike; each rep's ratio to
    # the one-stream run beside it is kept too. A server in a memory cgroup
    # (--limit: each from a cold page cache) or on a testbed device
    # (--launcher) runs alone, the counts one after another.
    alone = a.sequential or a.limit or a.launcher
    groups = [[s] for s in counts] if alone else [counts]
    figs = {}
    for group in groups:
        servers = {}
        try:
            for s in group:
                servers[s] = start(a.lares, a.model, s, a.threads, a.ctx, a.engine, a.limit,
                                   a.lookup, a.launcher, a.extra)
            for s in group:
                throughput(servers[s][1], s, 8, -1)  # warm-up
            drafts0 = {s: drafts(servers[s][1]) if a.engine == "lares" else None for s in group}
            for rep in range(a.reps):
                for s in group:
                    figs.setdefault(s, []).append(throughput(servers[s][1], s, a.tokens, rep))
            drafts1 = {s: drafts(servers[s][1]) if a.engine == "lares" else None for s in group}
        finally:
            for srv, _ in servers.values():
                srv.terminate()
                srv.wait(timeout=60)
        for s in group:
            result["streams"][str(s)] = {"aggregate_tps": sig(statistics.median(figs[s])),
                                         "runs": [sig(f) for f in figs[s]],
                                         "last_tokens": LAST_COUNTS[s]}
            if drafts0[s] and drafts1[s] and drafts1[s][0] > drafts0[s][0]:
                d, acc = drafts1[s][0] - drafts0[s][0], drafts1[s][1] - drafts0[s][1]
                result["streams"][str(s)].update({"drafted": d, "accepted": acc,
                                                  "acceptance": round(acc / d, 3)})
    result["alternated"] = not alone
    one = result["streams"].get("1", {}).get("aggregate_tps")
    if one:
        for k, v in result["streams"].items():
            v["over_one"] = round(v["aggregate_tps"] / one, 3)
            if not alone:  # the median of each rep's ratio to its own one-stream run
                v["over_one_paired"] = round(statistics.median(
                    f / g for f, g in zip(figs[int(k)], figs[1]) if g > 0), 3)
    if a.no_ttft:
        return
    # first token of a short request: idle, and while a long prompt is read
    srv, port = start(a.lares, a.model, 2, a.threads, 2048, a.engine, a.limit, 0, a.launcher,
                      a.extra)
    try:
        ttft(port, "warm up")
        idle = statistics.median(ttft(port, f"Hello number {i}") for i in range(a.reps))
        long_prompt = " ".join(["the quick brown fox jumps over the lazy dog"] * (a.long // 9))
        busy = []
        for i in range(a.reps):
            out = []
            t = threading.Thread(target=stream, args=(port, f"{i} {long_prompt}", 4, out))
            t.start()
            time.sleep(0.3)
            busy.append(ttft(port, f"Hello again {i}"))
            t.join()
            if out[0][0] == "error":
                sys.exit(f"serve_parallel: the long request failed: {out[0]}")
        result["ttft_busy_runs"] = [round(b, 4) for b in busy]
        result["ttft_idle_s"] = round(idle, 4)
        result["ttft_during_long_prompt_s"] = round(statistics.median(busy), 4)
        result["ttft_ratio"] = round(statistics.median(busy) / idle, 2)
    finally:
        srv.terminate()
        srv.wait(timeout=60)


if __name__ == "__main__":
    main()
