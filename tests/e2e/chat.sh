#!/usr/bin/env bash
# lares chat: two turns from a stdin script keep the conversation in the KV
# cache (the second turn evaluates only what the cache lacks, and its greedy
# answer is the continuation of the whole conversation), Ctrl-C through a
# pseudo-terminal stops an answer and keeps the session, Ctrl-D quits, a full
# context gets a clear message, bad options fail clearly.
. "$(dirname "$0")/lib.sh"
need python3
M=$(model stories260K.gguf)
L1="Once upon a time, there was a dog named Max."
L2="What did Max do?"

# ---- two turns: the cache is kept ----
# answers may hold newlines: turn 1 alone gives answer 1 (stdout = answer + newline),
# and the two-turn run's stdout starts with it
printf '%s\n' "$L1" | "$LARES" chat -m "$M" --temp 0 -n 30 -t 1 -q >"$TMP/out1" 2>/dev/null
printf '%s\n%s\n' "$L1" "$L2" | "$LARES" chat -m "$M" --temp 0 -n 30 -t 1 -v >"$TMP/out" 2>"$TMP/err" \
  || fail "chat exited non-zero: $(cat "$TMP/err")"
grep -q "has no chat template; using the plain format" "$TMP/err" && ok \
  || fail "no warning about the missing template: $(cat "$TMP/err")"
n_out1=$(stat -c %s "$TMP/out1")
[ "$n_out1" -gt 1 ] && cmp -s -n "$n_out1" "$TMP/out1" "$TMP/out" && ok || fail "turn 1 differs between runs"
head -c $((n_out1 - 1)) "$TMP/out1" >"$TMP/a1"
tail -c +$((n_out1 + 1)) "$TMP/out" >"$TMP/a2nl" # answer 2 and its newline
t1=$(grep "turn 1:" "$TMP/err")
t2=$(grep "turn 2:" "$TMP/err")
ctx1=$(sed -n 's/.*context \([0-9]*\) of.*/\1/p' <<<"$t1")
eval1=$(sed -n 's/.*turn 1: \([0-9]*\) prompt tokens evaluated.*/\1/p' <<<"$t1")
eval2=$(sed -n 's/.*turn 2: \([0-9]*\) prompt tokens evaluated.*/\1/p' <<<"$t2")
reused2=$(sed -n 's/.*evaluated, \([0-9]*\) reused.*/\1/p' <<<"$t2")
[ -n "$ctx1" ] && [ -n "$eval2" ] && [ -n "$reused2" ] && ok || fail "turn figures missing: $(cat "$TMP/err")"
# the plain format (docs/chat.md), written out here independently
printf 'user: %s\nassistant:' "$L1" >"$TMP/p1"
{ cat "$TMP/p1" "$TMP/a1"; printf '\nuser: %s\nassistant:' "$L2"; } >"$TMP/full"
n1=$("$LARES" tokenize -m "$M" --ids <"$TMP/p1" | jq length)
nfull=$("$LARES" tokenize -m "$M" --ids <"$TMP/full" | jq length)
[ "$eval1" = "$n1" ] && ok || fail "turn 1 evaluated $eval1 tokens, its prompt has $n1"
# turn 2 reuses the whole cache (prompt 1 and the answer but its last token) ...
[ "$reused2" = "$ctx1" ] && ok || fail "turn 2 reused $reused2 tokens, the cache held $ctx1"
# ... and evaluates only the rest of the conversation
[ $((reused2 + eval2)) = "$nfull" ] && [ "$eval2" -lt $((nfull / 2)) ] && ok \
  || fail "turn 2: $reused2 reused + $eval2 evaluated, the conversation has $nfull tokens"
# the second answer is the greedy continuation of the whole conversation ...
"$LARES" run -m "$M" -f "$TMP/full" --temp 0 -n 30 -t 1 --no-echo -q >"$TMP/want2nl"
cmp -s "$TMP/a2nl" "$TMP/want2nl" && ok \
  || fail "turn 2 answer [$(cat "$TMP/a2nl")], continuation of the conversation [$(cat "$TMP/want2nl")]"
# ... which differs from the answer to the second message alone
printf '%s\n' "$L2" | "$LARES" chat -m "$M" --temp 0 -n 30 -t 1 -q >"$TMP/alone" 2>/dev/null
! cmp -s "$TMP/alone" "$TMP/a2nl" && ok || fail "the second answer does not depend on the first turn"

# ---- /reset starts over: nothing reused ----
printf '%s\n/reset\n%s\n' "$L1" "$L2" | "$LARES" chat -m "$M" --temp 0 -n 10 -t 1 -v >/dev/null 2>"$TMP/err"
grep -q "turn 2: [0-9]* prompt tokens evaluated, 0 reused" "$TMP/err" && ok || fail "/reset: $(cat "$TMP/err")"

# ---- a system prompt and a named template ----
printf 'Hi\n' | "$LARES" chat -m "$M" --template chatml --system "Be brief." --temp 0 -n 5 -t 1 -v \
  >/dev/null 2>"$TMP/err" && grep -q "chat template chatml" "$TMP/err" && ok || fail "--template chatml: $(cat "$TMP/err")"

# ---- Ctrl-C stops the answer, the session goes on; Ctrl-D quits ----
cat >"$TMP/drive_pty.py" <<'EOF'
import os, pty, sys, time, select
lares, model = sys.argv[1], sys.argv[2]
pid, fd = pty.fork()
if pid == 0:
    os.execv(lares, [lares, "chat", "-m", model, "--temp", "0", "-c", "2048", "-t", "1", "-v"])
buf = b""
def read_until(pred, timeout):
    global buf
    end = time.time() + timeout
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                return pred(buf)
            if not chunk:
                return pred(buf)
            buf += chunk
            if pred(buf):
                return True
    return pred(buf)
def say(s):
    os.write(fd, s)
steps = []
steps.append(read_until(lambda b: b"> " in b, 30))
say(b"Once upon a time, there was a dog named Max.\n")
# wait for 200 bytes of streamed answer after the echoed line, then interrupt
# while it is still generating (greedy, this model runs to the full context)
mark = b"dog named Max.\r\n"
steps.append(read_until(lambda b: mark in b and len(b) - b.index(mark) > 200, 30))
say(b"\x03")
steps.append(read_until(lambda b: b"[stopped]" in b and b"turn 1:" in b and b.rstrip().endswith(b">"), 60))
say(b"What did Max do?\n")
mark2 = b"What did Max do?\r\n"
steps.append(read_until(lambda b: mark2 in b and len(b) - b.index(mark2) > 100, 60))
say(b"\x03")  # stops the second answer (or lands at the prompt if it already ended)
steps.append(read_until(lambda b: b"turn 2:" in b, 120))
say(b"\x03")  # Ctrl-C at an idle prompt: the chat goes on
ok = all(steps)
say(b"\x04")  # Ctrl-D
_, status = os.waitpid(pid, 0)
sys.stdout.write(buf.decode("utf-8", "replace"))
sys.stdout.write("\nsteps: %s\n" % steps)
sys.exit(0 if ok and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 else 1)
EOF
if timeout 300 python3 "$TMP/drive_pty.py" "$LARES" "$M" >"$TMP/pty.out" 2>&1; then ok; else fail "pty session: $(tail -c 2000 "$TMP/pty.out")"; fi
grep -q "\[stopped\]" "$TMP/pty.out" && ok || fail "no [stopped] after Ctrl-C"
t1=$(grep -a "turn 1:" "$TMP/pty.out")
gen1=$(sed -n 's/.*reused from the cache, \([0-9]*\) generated.*/\1/p' <<<"$t1")
[ -n "$gen1" ] && [ "$gen1" -lt 2000 ] && ok || fail "Ctrl-C did not stop turn 1 early: $t1"
grep -a "turn 2:" "$TMP/pty.out" | grep -qv " 0 reused" && ok || fail "turn 2 after Ctrl-C did not reuse the cache"

# ---- a context too small: clear messages, no crash ----
long="Once upon a time, there was a little girl named Lily who loved to play outside in the park."
printf '%s\n%s\n%s\n' "$long" "$long" "$long $long $long" \
  | "$LARES" chat -m "$M" --temp 0 -c 48 -t 1 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && ok || fail "small context: exit $rc: $(cat "$TMP/err")"
grep -q "context of 48 tokens is full\|no longer fits the context of 48" "$TMP/err" && ok \
  || fail "no context-full message: $(cat "$TMP/err")"
grep -q "the context holds 48 (raise -c)" "$TMP/err" && ok || fail "no too-long message: $(cat "$TMP/err")"

# ---- bad options ----
"$LARES" chat -m "$M" --template nope </dev/null >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "unknown chat template 'nope'" "$TMP/err" && ok || fail "--template nope: $(cat "$TMP/err")"
"$LARES" chat </dev/null >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "no model given" "$TMP/err" && ok || fail "no -m: $(cat "$TMP/err")"
"$LARES" chat -m "$MODELS/missing.gguf" </dev/null >/dev/null 2>"$TMP/err"
[ $? -eq 1 ] && grep -q "missing.gguf" "$TMP/err" && ok || fail "missing model: $(cat "$TMP/err")"
finish
