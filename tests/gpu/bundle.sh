#!/bin/bash
# bundle.sh: the acceptance run on a GPU machine that lacks the build
# host's libraries (a lent machine, a cluster node image).
#
#   tests/gpu/bundle.sh pack [BUILD_DIR] [BUNDLE.tgz]
#       on the build host: the GPU programs of BUILD_DIR (default build),
#       stripped of debug info, and the shared libraries they load that are
#       not the C runtime, cuBLAS or NCCL (OpenBLAS, libuv, SQLite, ...;
#       cudart too), into BUNDLE.tgz (default gpu-bundle.tgz, ~25 MB)
#   tests/gpu/bundle.sh run [BUNDLE.tgz] [acceptance.sh options]
#       on the GPU machine, from the repository: unpacks the bundle under
#       /tmp/gptd-bundle, links each bundled library the machine lacks
#       into a folder on LD_LIBRARY_PATH (never one it has: its own stay
#       first), finds CUDA 13's cuBLAS, cuBLASLt and NCCL where ldconfig
#       does not (under /usr/local, /opt, /usr/lib, e.g. a Python
#       environment's nvidia/ folders), then runs tests/gpu/acceptance.sh
#       --build-dir on the unpacked programs with the options given.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROGS="gptd gptctl bench/bench_gpu_train bench/bench_poll_backoff tests/test_gpu_ops tests/test_gpu_train tests/test_gpu_step
       tests/test_gpu_nccl"

pack() {
    local build=${1:-$ROOT/build} out=${2:-gpu-bundle.tgz} tmp
    tmp=$(mktemp -d) || exit 2
    mkdir -p "$tmp/build/bench" "$tmp/build/tests" "$tmp/libs"
    for p in $PROGS; do
        [ -x "$build/$p" ] || { echo "bundle: $build/$p missing (a -DGPTD_CUDA=ON build)" >&2; exit 2; }
        cp "$build/$p" "$tmp/build/$p" && strip --strip-debug "$tmp/build/$p" || exit 2
    done
    (cd "$build" && ldd $PROGS) | awk '/=> \//{print $3}' | sort -u |
        grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcublas|libcublasLt|libnccl)\.so' |
        while read -r lib; do cp -L "$lib" "$tmp/libs/" || exit 2; done || exit 2
    tar -C "$tmp" -czf "$out" . || exit 2
    rm -rf "$tmp"
    echo "bundle: $out ($(du -h "$out" | cut -f1))"
}

# unpack BUNDLE DIR: the programs under DIR/build, the libraries this
# machine lacks linked into DIR/need, which goes first on LD_LIBRARY_PATH;
# fails naming any library a program still cannot find.
unpack() {
    local bundle=$1 dir=$2 p
    rm -rf "$dir" && mkdir -p "$dir/need" && tar -C "$dir" -xzf "$bundle" || exit 2
    for lib in "$dir"/libs/*; do
        ldconfig -p | grep -q "[[:space:]]$(basename "$lib") " || ln -s "$lib" "$dir/need/"
    done
    for name in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        ldconfig -p | grep -q "[[:space:]]$name " && continue
        p=$(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -1)
        [ -n "$p" ] && ln -s "$p" "$dir/need/$name" || echo "bundle: $name not found" >&2
    done
    export LD_LIBRARY_PATH=$dir/need${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "bundle: linked $(ls "$dir/need" | tr '\n' ' ')"
    for p in $PROGS; do
        if ldd "$dir/build/$p" | grep -q "not found"; then
            echo "bundle: $p:" $(ldd "$dir/build/$p" | grep "not found") >&2
            exit 2
        fi
    done
}

run() {
    local bundle=${1:-gpu-bundle.tgz}
    [ $# -gt 0 ] && shift
    unpack "$bundle" /tmp/gptd-bundle
    exec "$ROOT/tests/gpu/acceptance.sh" --build-dir /tmp/gptd-bundle/build "$@"
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
# check BUNDLE DIR: unpack only, and say whether every program would load.
check) shift; unpack "${1:?bundle}" "${2:?folder}" && echo "bundle: every program loads" ;;
# selftest BUILD_DIR (ctest gpu_bundle): pack, then check, in a scratch folder.
selftest)
    tmp=$(mktemp -d) || exit 2
    trap 'rm -rf "$tmp"' EXIT
    (pack "${2:?build folder}" "$tmp/b.tgz") && (unpack "$tmp/b.tgz" "$tmp/u") &&
        echo "bundle: every program loads"
    ;;
*)
    echo "usage: $0 pack [BUILD_DIR] [BUNDLE.tgz] | run [BUNDLE.tgz] [acceptance options]" \
        "| check BUNDLE DIR" >&2
    exit 2
    ;;
esac
