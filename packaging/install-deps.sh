#!/usr/bin/env bash
# Installs every Debian package that building gptd, running the demo and
# running the test suite need. Idempotent and non-interactive: packages that
# are already installed are skipped, so a second run does no work.
#
#   packaging/install-deps.sh            build, demo and tests
#   packaging/install-deps.sh --reference  also python3-torch (regenerating
#                                          the PyTorch golden file, benchmarks)
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
)
if [[ "${1:-}" == "--reference" ]]; then
    pkgs+=(python3 python3-torch python3-numpy)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all ${#pkgs[@]} packages present"
    exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
    sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-o DPkg::Lock::Timeout=900 -y -q --no-install-recommends)
$sudo apt-get "${apt_opts[@]}" update >/dev/null || $sudo apt-get "${apt_opts[@]}" update
$sudo apt-get "${apt_opts[@]}" install "${missing[@]}"
