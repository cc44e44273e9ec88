#!/usr/bin/env python3
"""Mixed load on lares serve: every API at once, with cancellations.

  bench/serve_mixed_load.py LARES_BINARY MODEL [--requests 200] [--clients 16] [--queue 16]

Starts `lares serve` on a free loopback port and sends REQUESTS requests from
CLIENTS threads, cycling through OpenAI chat and completions (streamed and
not), embeddings, structured output (json_schema), a forced tool call,
Anthropic messages (streamed and not) and Ollama chat and generate (NDJSON
streamed and not). A third of the streamed requests are cancelled: the client
reads the first event and closes the connection. The server's resident memory is
sampled every 0.1 s against the number of requests finished, after a warm-up
(each kind once, then one request from every client at once) that is not
counted.

Checks, each a failure (exit 1) when broken: every reply is well-formed for its
API (status 200 with the reply's shape, or a 503 with Retry-After and an error
object when the queue is full; a stream is whole up to its end marker unless
cancelled), the server stays up and exits 0 on SIGTERM, and the median of
lares's own heap (the lares_heap_bytes gauge of /metrics, sampled every 0.5 s)
and the median RSS of the last quarter of the requests are each within 5 % of
the first quarter's (--rss-bound 0: RSS reported, not judged: under a
sanitizer it measures the sanitizer's allocator and its per-thread state, and
the server makes a thread per connection). Prints one JSON object with the
figures.
"""
import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                           "n": {"type": "integer"}}, "required": ["name", "n"]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string", "maxLength": 8}}, "required": ["q"]}}}]


N_CTX = 2048


class Bad(Exception):
    pass


def need(cond, what):
    if not cond:
        raise Bad(what)


def chat_body(i, **extra):
    return dict({"model": "lares", "messages": [{"role": "user", "content": f"Tell me about cat {i}."}],
                 "max_tokens": 24, "seed": i}, **extra)


# (name, method, path, body(i), streamed, check(obj) for a whole reply)
def kinds():
    def openai_chat(o):
        need(o["object"] == "chat.completion" and isinstance(o["choices"][0]["message"]["content"], str)
             and o["usage"]["completion_tokens"] > 0, "chat reply")

    def completion(o):
        need(o["object"] == "text_completion" and isinstance(o["choices"][0]["text"], str), "completion reply")

    def embeddings(o):
        need(len(o["data"]) == 2 and all(len(d["embedding"]) > 0 for d in o["data"]), "embeddings reply")

    def structured(o):
        v = json.loads(o["choices"][0]["message"]["content"])
        need(isinstance(v["name"], str) and len(v["name"]) <= 10 and isinstance(v["n"], int)
             and set(v) == {"name", "n"}, "json_schema reply validates")

    def tool_call(o):
        c = o["choices"][0]
        call = c["message"]["tool_calls"][0]
        need(c["finish_reason"] == "tool_calls" and call["function"]["name"] == "lookup"
             and isinstance(json.loads(call["function"]["arguments"])["q"], str), "tool call reply")

    def anthropic(o):
        need(o["type"] == "message" and o["content"][0]["type"] == "text" and o["stop_reason"], "messages reply")

    def ollama_chat(o):
        need(o["done"] is True and isinstance(o["message"]["content"], str), "ollama chat reply")

    def ollama_generate(o):
        need(o["done"] is True and isinstance(o["response"], str), "ollama generate reply")

    return [
        ("openai_chat", "/v1/chat/completions", lambda i: chat_body(i), "", openai_chat),
        ("openai_chat_stream", "/v1/chat/completions", lambda i: chat_body(i, stream=True), "sse", None),
        ("openai_completion", "/v1/completions",
         lambda i: {"model": "lares", "prompt": f"Once upon a time {i}", "max_tokens": 24, "seed": i}, "", completion),
        ("openai_completion_stream", "/v1/completions",
         lambda i: {"model": "lares", "prompt": f"Once upon a time {i}", "max_tokens": 24, "stream": True}, "sse", None),
        ("embeddings", "/v1/embeddings", lambda i: {"model": "lares", "input": [f"cat {i}", "a dog"]}, "", embeddings),
        ("json_schema", "/v1/chat/completions", lambda i: chat_body(
            i, max_tokens=40, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}),
         "", structured),
        ("tool_call", "/v1/chat/completions", lambda i: chat_body(i, max_tokens=40, tools=TOOLS, tool_choice="required"),
         "", tool_call),
        ("anthropic", "/v1/messages", lambda i: {"model": "lares", "max_tokens": 24,
                                                  "messages": [{"role": "user", "content": f"Hi {i}"}]}, "", anthropic),
        ("anthropic_stream", "/v1/messages", lambda i: {"model": "lares", "max_tokens": 24, "stream": True,
                                                         "messages": [{"role": "user", "content": f"Hi {i}"}]},
         "anthropic", None),
        ("ollama_chat", "/api/chat", lambda i: {"model": "lares", "stream": False, "options": {"num_predict": 24},
                                                "messages": [{"role": "user", "content": f"Hi {i}"}]}, "", ollama_chat),
        ("ollama_chat_stream", "/api/chat", lambda i: {"model": "lares", "options": {"num_predict": 24},
                                                       "messages": [{"role": "user", "content": f"Hi {i}"}]},
         "ndjson", None),
        ("ollama_generate", "/api/generate", lambda i: {"model": "lares", "prompt": f"Hi {i}", "stream": False,
                                                        "options": {"num_predict": 24}}, "", ollama_generate),
    ]


def check_stream(style, resp, cancel):
    """Reads a streamed reply; returns 'cancelled' or 'ok'; raises Bad."""
    if style == "ndjson":
        last = None
        while True:
            line = resp.readline()
            if not line:
                break
            o = json.loads(line)
            need("error" not in o, f"ollama stream error {o}")
            last = o
            if cancel:
                return "cancelled"
        need(last is not None and last["done"] is True, "ollama stream ends with done")
        return "ok"
    events = []  # (event name, data)
    name = None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
            events.append((name, data))
            if data != "[DONE]":
                o = json.loads(data)
                need("error" not in o, f"stream error {o}")
            if cancel:
                return "cancelled"
    if style == "sse":
        need(events and events[-1][1] == "[DONE]", "OpenAI stream ends with [DONE]")
        chunks = [json.loads(d) for _, d in events[:-1]]
        need(all(c["object"] in ("chat.completion.chunk", "text_completion") for c in chunks), "chunk objects")
        need(any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks), "a finish_reason")
    else:
        names = [n for n, _ in events]
        need(names[:2] == ["message_start", "content_block_start"] and names[-1] == "message_stop",
             f"Anthropic events {names[:3]}..{names[-2:]}")
    return "ok"


def one(port, kind, i, cancel):
    name, path, body, style, check = kind
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", path, json.dumps(body(i)), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status == 503:
            err = json.loads(resp.read())
            need(resp.getheader("Retry-After") is not None and "error" in err, "503 without Retry-After/error")
            return "busy"
        if resp.status != 200:
            raise Bad(f"status {resp.status}: {resp.read()[:200]!r}")
        if style:
            return check_stream(style, resp, cancel)
        check(json.loads(resp.read()))
        return "ok"
    finally:
        conn.close()


def fill_context(port, n_ctx):
    """One completion whose prompt nearly fills the context, so every page of
    the KV cache has been written before memory is counted: pages a session
    first reaches at a later, longer conversation are its cache filling, not
    growth (with -c 2048 on stories260K they are 2.6 MB, half the bound)."""
    words, target, got = 64, n_ctx - 16, 0
    for _ in range(4):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        try:
            body = {"model": "lares", "prompt": "Once upon a time, " * words, "max_tokens": 1}
            conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status != 200:
                raise Bad(f"filling the context: status {resp.status}: {raw[:200]!r}")
            got = json.loads(raw)["usage"]["prompt_tokens"]
        finally:
            conn.close()
        if got >= target - 32:
            return got
        words = max(1, words * target // got)
    raise Bad(f"filling the context: {got} of {target} prompt tokens after 4 tries")


def heap_bytes(port):
    """lares's own allocations now (the lares_heap_bytes gauge of /metrics)"""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/metrics")
        m = re.search(r"^lares_heap_bytes (\d+)", conn.getresponse().read().decode(), re.M)
        return int(m.group(1)) if m else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            m = re.search(r"^VmRSS:\s+(\d+)", f.read(), re.M)
            return int(m.group(1)) if m else None
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lares")
    ap.add_argument("model")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--queue", type=int, default=16)
    ap.add_argument("--rss-bound", type=float, default=0.05)
    ap.add_argument("--heap-bound", type=float, default=0.05)
    ap.add_argument("--deadline", type=float, default=float(os.environ.get("SERVE_LOAD_DEADLINE_S", "600")))
    a = ap.parse_args()

    srv = subprocess.Popen([a.lares, "serve", "-m", a.model, "--port", "0", "-t", "1", "-c", str(N_CTX),
                            "--queue", str(a.queue), "--max-connections", "64"],
                           stderr=subprocess.PIPE, text=True)
    port = None
    t0 = time.time()
    log = []
    while port is None and time.time() - t0 < 60:
        line = srv.stderr.readline()
        if not line:
            break
        log.append(line)
        m = re.search(r" on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        srv.kill()
        sys.exit(f"serve_mixed_load: the server did not start: {''.join(log)}")
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()  # drain

    ks = kinds()
    lock = threading.Lock()
    done = [0]
    results = {}
    failures = []
    samples = []  # (requests finished, rss KiB)
    stop = threading.Event()

    heap = []  # (requests finished, lares_heap_bytes from /metrics)

    def sampler():
        k = 0
        while not stop.is_set():
            r = rss_kib(srv.pid)
            if r is not None:
                with lock:
                    samples.append((done[0], r))
            if k % 5 == 0:
                h = heap_bytes(port)
                if h is not None:
                    with lock:
                        heap.append((done[0], h))
            k += 1
            time.sleep(0.1)

    def client(c, first=0, end=a.requests, counted=True):
        for i in range(first + c, end, a.clients):
            kind = ks[i % len(ks)]
            cancel = bool(kind[3]) and (i // len(ks)) % 3 == 1  # a third of the streams
            try:
                out = one(port, kind, i, cancel)
            except Exception as e:  # noqa: BLE001 - every kind of failure is reported
                out = "bad"
                with lock:
                    failures.append(f"{kind[0]} #{i}: {type(e).__name__}: {e}")
            if not counted:
                continue
            with lock:
                results.setdefault(kind[0], {}).setdefault(out, 0)
                results[kind[0]][out] += 1
                done[0] += 1

    # warm-up, not counted: each kind once, then a burst from every client, so
    # that first touches (KV cache pages, connection threads' stacks, the
    # tokens' bytes of structured output) are not read as growth
    warm_fail = []
    try:
        fill_context(port, N_CTX)
    except Exception as e:  # noqa: BLE001
        warm_fail.append(f"warm-up: {e}")
    for k, kind in enumerate(ks):
        try:
            one(port, kind, 10000 + k, False)
        except Exception as e:  # noqa: BLE001
            warm_fail.append(f"warm-up {kind[0]}: {e}")
    burst = [threading.Thread(target=lambda j=j: one(port, ks[j % len(ks)], 20000 + j, False))
             for j in range(a.clients)]
    for t in burst:
        t.start()
    for t in burst:
        t.join()
    # a quarter of the run in its own pattern (ids past the run's): the server's
    # allocator and connection threads settle here, not in the first quarter
    warm = [threading.Thread(target=client, args=(c, 40000, 40000 + a.requests // 4, False))
            for c in range(a.clients)]
    for t in warm:
        t.start()
    for t in warm:
        t.join()
    failures.extend(warm_fail)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    start = time.time()
    clients = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(max(1.0, a.deadline - (time.time() - start)))
    wall = time.time() - start
    alive = srv.poll() is None
    time.sleep(0.3)
    stop.set()
    th.join()
    srv.send_signal(signal.SIGTERM)
    try:
        rc = srv.wait(60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rc = -9

    q = a.requests // 4
    first = [r for n, r in samples if n < q]
    last = [r for n, r in samples if n >= a.requests - q]
    m1 = statistics.median(first) if first else 0
    m4 = statistics.median(last) if last else 0
    growth = (m4 - m1) / m1 if m1 else None
    h1 = statistics.median([h for n, h in heap if n < q] or [0])
    h4 = statistics.median([h for n, h in heap if n >= a.requests - q] or [0])
    totals = {}
    for per in results.values():
        for k, v in per.items():
            totals[k] = totals.get(k, 0) + v
    out = {
        "requests": a.requests, "clients": a.clients, "queue": a.queue, "finished": done[0],
        "ok": totals.get("ok", 0), "cancelled": totals.get("cancelled", 0), "busy_503": totals.get("busy", 0),
        "bad": totals.get("bad", 0), "by_kind": results, "wall_s": round(wall, 2),
        "rss_kib_first_quarter_median": m1, "rss_kib_last_quarter_median": m4,
        "rss_kib_max": max((r for _, r in samples), default=0),
        "rss_growth": None if growth is None else round(growth, 4),
        "heap_bytes_first_quarter_median": h1, "heap_bytes_last_quarter_median": h4,
        "heap_growth": round((h4 - h1) / h1, 4) if h1 else None,
        "server_alive_at_end": alive, "server_exit": rc, "failures": failures[:10],
    }
    print(json.dumps(out, indent=1))
    heap_growth = out["heap_growth"]
    good = (done[0] == a.requests and not failures and alive and rc == 0 and growth is not None
            and (a.rss_bound <= 0 or abs(growth) <= a.rss_bound)
            and heap_growth is not None and abs(heap_growth) <= a.heap_bound)
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
