#!/usr/bin/env bash
# Fails when a layer includes a header of a layer above it
# (docs/architecture.md, "Layers"): proto/ is the lowest layer (pure
# encode/decode), engine/ may use proto/, daemon/ composes everything, and
# ctl/ is a thin client over proto/ only. Nothing below daemon/ sees libuv or
# SQLite; ctl/ sees neither the engine nor the daemon.
set -u
top=${1:?usage: layering_guard.sh SOURCE_DIR}

# Header basenames of a folder tree, as an alternation for grep -E.
headers_of() {
    (cd "$top" && find "$@" -name '*.h' -printf '%f\n' 2>/dev/null) | sort -u |
        sed 's/\./\\./g' | tr '\n' '|' | sed 's/|$//'
}

daemon_h=$(headers_of daemon)
engine_h=$(headers_of engine)
# libuv and SQLite by any spelling; our own headers only in quotes (so that a
# system header such as <paths.h> is not mistaken for daemon/paths.h).
sys='uv\.h|uv/[^>]*|sqlite3\.h'
base='daemon/[^"]*|\.\./daemon/[^"]*'

# check NAME FORBIDDEN-ALTERNATION DIR...: every #include in DIR... against it.
status=0
check() {
    local what=$1 forbidden=$2
    shift 2
    local pattern="#[[:space:]]*include[[:space:]]*(<(${sys})>|\"(${forbidden})\")"
    local hits
    hits=$(cd "$top" && grep -rnE "$pattern" "$@" --include='*.c' --include='*.h' \
           --include='*.cu' --include='*.cuh' 2>/dev/null || true)
    if [[ -n "$hits" ]]; then
        echo "layering violation: $what"
        echo "$hits"
        status=1
    fi
}

proto_h=$(headers_of proto)
check "err/ (gpt_err, below every layer) must not include proto/, engine/ or daemon/ headers" \
      "${base}|engine/[^\"]*|${proto_h}|${engine_h}|${daemon_h}" err
check "proto/ must not include libuv, SQLite, engine/ or daemon/ headers" \
      "${base}|engine/[^\"]*|${engine_h}|${daemon_h}" proto
check "engine/ must not include libuv, SQLite or daemon/ headers" "${base}|${daemon_h}" engine
check "ctl/ must not include libuv, SQLite, engine/ or daemon/ headers" \
      "${base}|engine/[^\"]*|${engine_h}|${daemon_h}" ctl

# The guard guards itself: a forbidden include planted in a scratch copy of
# each layer must be caught.
if [[ -z "${LAYERING_GUARD_SELFTEST:-}" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    for layer in proto engine ctl; do
        mkdir -p "$tmp/$layer" "$tmp/daemon" "$tmp/engine"
        : > "$tmp/daemon/jobs.h"
        : > "$tmp/engine/model.h"
        case $layer in
        proto | ctl) bad='#include "model.h"' ;;
        engine) bad='#include "jobs.h"' ;;
        esac
        printf '%s\n' "$bad" > "$tmp/$layer/planted.c"
        if LAYERING_GUARD_SELFTEST=1 "$0" "$tmp" >/dev/null; then
            echo "layering guard missed a planted include in $layer/"
            status=1
        fi
        rm -f "$tmp/$layer/planted.c"
    done
fi
[[ $status -eq 0 ]] && echo "layering ok"
exit $status
