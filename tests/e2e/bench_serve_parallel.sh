#!/usr/bin/env bash
# bench/serve_parallel.py, the throughput benchmark of `lares serve --parallel`
# (issue 20), runs and reads the streams right with both of its clients: one
# thread's event loop (the default, which parses the chunked SSE replies
# itself) and a thread each (Python's http.client). Greedy streams of the same
# prompts get the same number of tokens from either; the JSON carries the
# fields docs/performance.md quotes; the event loop's reader takes a reply cut
# anywhere. A model that does not exist stops the script with the server's
# message. Not timed: the figures are only > 0.
. "$(dirname "$0")/lib.sh"
need jq
need python3
M=$(model derived/TinyStories-656K.f32.llama.gguf)
B="${LARES_SRC:-$(dirname "$0")/../..}/bench/serve_parallel.py"

for c in evented threads; do
  python3 "$B" "$LARES" "$M" --streams "1 3" --tokens 12 --reps 1 --threads 1 --no-ttft \
    --client "$c" >"$TMP/$c.json" 2>"$TMP/$c.err" && ok || fail "$c: $(tail -3 "$TMP/$c.err")"
  jq -e --arg c "$c" '.client == $c and .alternated == true' "$TMP/$c.json" >/dev/null && ok \
    || fail "$c header: $(head -c 300 "$TMP/$c.json")"
  jq -e '[.streams["1"], .streams["3"]] | all(.aggregate_tps > 0 and (.runs | length) == 1)' \
    "$TMP/$c.json" >/dev/null && ok || fail "$c figures: $(head -c 400 "$TMP/$c.json")"
  jq -e '.streams["3"].over_one_paired > 0' "$TMP/$c.json" >/dev/null && ok \
    || fail "$c ratio: $(head -c 400 "$TMP/$c.json")"
  jq -e '.streams["3"].last_tokens | length == 3 and all(. >= 1 and . <= 12)' "$TMP/$c.json" \
    >/dev/null && ok || fail "$c tokens: $(jq -c '.streams["3"].last_tokens' "$TMP/$c.json")"
done
# the same greedy prompts: the same tokens, however the replies were read
for s in 1 3; do
  a=$(jq -c ".streams[\"$s\"].last_tokens" "$TMP/evented.json")
  b=$(jq -c ".streams[\"$s\"].last_tokens" "$TMP/threads.json")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok || fail "$s streams: evented read $a tokens, threads $b"
done

# the event loop's reader alone: a chunked reply cut anywhere, an error
# reply with a Content-Length (ended by its length, not by a close)
python3 - "$(dirname "$B")" >"$TMP/parse" 2>&1 <<'PY' && ok || fail "the reader: $(cat "$TMP/parse")"
import sys
sys.path.insert(0, sys.argv[1])
import serve_parallel as sp

class Fake(sp.EventedStream):
    def __init__(self):  # no socket: the parser alone
        self.raw, self.body = b"", b""
        self.status, self.chunked, self.length = None, False, None
        self.first, self.end, self.n, self.error = None, None, 0, None

def events(*texts):
    return b"".join(b'data: {"choices":[{"text":"%s","finish_reason":null}]}\n\n' % t.encode()
                    for t in texts)

def chunked(body, size):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"

body = events("a", "b", "c") + b"data: [DONE]\n\n"
reply = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, 7)
for step in (1, 3, len(reply)):  # the reply in pieces of 1, 3 and all bytes
    f, more = Fake(), True
    for i in range(0, len(reply), step):
        more = f.feed(reply[i:i + step])
        if not more:
            break
    assert not more and f.n == 3 and f.error is None, (step, f.n, f.error, more)
err = b'{"error":{"message":"no such model"}}'
f = Fake()
more = f.feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n" % len(err) + err[:10])
assert more, "ended before its body"
more = f.feed(err[10:])
assert not more and f.error[1] == 404, (more, f.error)
print("parser: ok")
PY

# a file that is not there: the script stops and says why
python3 "$B" "$LARES" "$TMP/missing.gguf" --streams "1" --tokens 4 --reps 1 --no-ttft \
  >"$TMP/out" 2>"$TMP/err" && fail "a missing model ran: $(cat "$TMP/out")" || ok
grep -q "did not start" "$TMP/err" && grep -q "missing.gguf" "$TMP/err" && ok \
  || fail "missing model: $(cat "$TMP/err")"

finish
