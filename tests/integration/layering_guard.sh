#!/usr/bin/env bash
# Fails when a layer includes a header of a layer above it or beside it
# (docs/architecture.md, "Layers and arrows"): err/ and the engine's plain config types
# (engine/config, library gptconfig) are the lowest layer and include nothing
# of ours; base/ (the atomic file, the clock, HOST:PORT) includes err/
# only; proto/ (pure encode/decode) may use err/ and engine/config only;
# engine/ may use err/, base/ and its own headers, never proto/; daemon/ composes
# everything, and ctl/ is a thin client over proto/ only. Nothing below
# daemon/ sees libuv or SQLite; ctl/ sees neither the engine nor the daemon.
# Inside daemon/, each subsystem folder includes only the folders its
# "allow" line below names (the arrows point down; none comes back up).
# It also fails when gptengine (or the gptconfig/gpterr it links) names
# gptproto or jansson on its link line in CMakeLists.txt, and, given a build
# folder, when the engine-only test program's link command names them.
set -u
top=${1:?usage: layering_guard.sh SOURCE_DIR [BUILD_DIR]}
build=${2:-}

# Header basenames of a folder tree, as an alternation for grep -E.
headers_of() {
    (cd "$top" && find "$@" -name '*.h' -printf '%f\n' 2>/dev/null) | sort -u |
        sed 's/\./\\./g' | tr '\n' '|' | sed 's/|$//'
}

daemon_h=$(headers_of daemon)
engine_h=$(headers_of engine)
config_h=$(headers_of engine/config)
# The engine's headers a lower layer may not include: all but engine/config.
engine_above_h=$( (cd "$top" && find engine -path engine/config -prune -o -name '*.h' -printf '%f\n' \
                   2>/dev/null) | sort -u | sed 's/\./\\./g' | tr '\n' '|' | sed 's/|$//')
# libuv and SQLite by any spelling; our own headers only in quotes (so that a
# system header such as <paths.h> is not mistaken for daemon/node/include/paths.h).
sys='uv\.h|uv/[^>]*|sqlite3\.h'
base='daemon/[^"]*|\.\./daemon/[^"]*'

# check NAME FORBIDDEN-ALTERNATION DIR...: every #include in DIR... against it.
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

status=0
# Between daemon/'s folders, each a library of its own (daemon/CMakeLists.txt),
# the allowed arrows: "allow FOLDER: FOLDERS it may include". root is the
# composition root (daemon/*.c, daemon/*.h: daemon.c and the control
# handlers). A folder missing here, or an include of a header another
# daemon folder owns along an arrow missing here, fails. docs/architecture.md
# lists the same arrows; tests/tools/arch_stats.py reads them from here.
arrows='
allow base:
allow store: base
allow node: store base
allow cluster: node store base
allow control: base
allow jobs: cluster control node store base
allow http: jobs cluster control node store base
allow cli: cluster node store base
allow root: cli http jobs control cluster node store base
'
# daemon_folder FILE: the folder a daemon source belongs to (root directly).
daemon_folder() {
    local rel=${1#daemon/}
    if [[ $rel == */* ]]; then echo "${rel%%/*}"; else echo root; fi
}
# Every header of daemon/, by basename: the folder that owns it.
declare -A owner=()
while IFS= read -r h; do
    b=${h##*/}
    f=$(daemon_folder "$h")
    if [[ -n "${owner[$b]:-}" && "${owner[$b]}" != "$f" ]]; then
        echo "layering violation: daemon header $b exists in both ${owner[$b]} and $f"
        status=1
    fi
    owner[$b]=$f
done < <(cd "$top" && find daemon -name '*.h' 2>/dev/null | sort)
declare -A allowed=()
while read -r word from rest; do
    [[ $word == allow ]] || continue
    allowed[${from%:}]=" $rest "
done <<<"$arrows"
while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"${line#*:}")
    from=$(daemon_folder "$file")
    to=${owner[${inc##*/}]:-}
    [[ -z "$to" || "$to" == "$from" ]] && continue
    if [[ -z "${allowed[$from]+x}" ]]; then
        echo "layering violation: daemon folder '$from' is not in layering_guard's list of arrows: $file"
        status=1
    elif [[ "${allowed[$from]}" != *" $to "* ]]; then
        echo "layering violation: daemon/$from may not include daemon/$to's $inc: $line"
        status=1
    fi
done < <(cd "$top" && grep -rnE '#[[:space:]]*include[[:space:]]*"[^"]+"' daemon \
         --include='*.c' --include='*.h' 2>/dev/null)

proto_h=$(headers_of proto)
check "err/ and base/ (below every layer) must not include proto/, engine/ or daemon/ headers" \
      "${base}|engine/[^\"]*|${proto_h}|${engine_h}|${daemon_h}" err base
check "engine/config (gptconfig, below every layer) must include no header of ours" \
      '[^"]*' engine/config
check "proto/ must not include libuv, SQLite, engine/ (but engine/config) or daemon/ headers" \
      "${base}|engine/[^\"]*|${engine_above_h}|${daemon_h}" proto
check "engine/ must not include libuv, SQLite, proto/ or daemon/ headers" \
      "${base}|proto/[^\"]*|${proto_h}|${daemon_h}" engine
check "ctl/ must not include libuv, SQLite, engine/ or daemon/ headers" \
      "${base}|engine/[^\"]*|${engine_h}|${daemon_h}" ctl
: "${config_h}" # (listed for the record: what proto may take from the engine)

# link_line TARGET: the arguments of every target_link_libraries(TARGET ...)
# in CMakeLists.txt and cmake/*.cmake, comments dropped, one line each.
link_line() {
    (cd "$top" && cat CMakeLists.txt cmake/*.cmake 2>/dev/null) | sed 's/#.*//' | tr '\n' ' ' |
        grep -oE "target_link_libraries\([[:space:]]*$1[[:space:]][^)]*\)" || true
}
for t in gptengine gptconfig gpterr; do
    line=$(link_line "$t")
    if [[ $t == gptengine && -z "$line" ]]; then
        echo "layering guard: no target_link_libraries(gptengine ...) found in CMakeLists.txt"
        status=1
    fi
    if grep -qiE 'gptproto|jansson' <<<"$line"; then
        echo "layering violation: $t must not link gptproto or jansson (the engine stands alone)"
        echo "$line"
        status=1
    fi
done
# The built link command of the engine-only program (tests/cmake/guard.cmake).
if [[ -n "$build" ]]; then
    linktxt="$build/tests/CMakeFiles/test_engine_alone.dir/link.txt"
    if [[ -f "$linktxt" ]] && grep -qiE 'gptproto|jansson' "$linktxt"; then
        echo "layering violation: test_engine_alone (gptengine only) links gptproto or jansson"
        cat "$linktxt"
        status=1
    fi
fi

# The guard guards itself, in two runs over a scratch tree (each run costs
# seconds on a loaded machine): a clean tree whose proto/ includes
# engine/config and whose daemon/jobs includes daemon/store (an allowed
# arrow) must pass; the same tree with a forbidden include planted in
# each layer, an upward include between two daemon folders (store -> jobs),
# a daemon folder missing from the list of arrows, gptengine and gptconfig linking jansson and gptproto (in a
# second call, across lines), and gptproto on the engine-only program's link
# command must fail, naming every one of them.
if [[ -z "${LAYERING_GUARD_SELFTEST:-}" ]]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/daemon/jobs/include" "$tmp/daemon/store/include" "$tmp/daemon/extra" \
             "$tmp/engine/config" "$tmp/proto" "$tmp/err" "$tmp/ctl" \
             "$tmp/build/tests/CMakeFiles/test_engine_alone.dir"
    : > "$tmp/daemon/jobs/include/jobs.h"
    : > "$tmp/daemon/store/include/store_client.h"
    printf '#include "jobs.h"\n#include "store_client.h"\n' > "$tmp/daemon/jobs/jobs.c"
    : > "$tmp/engine/model.h"
    : > "$tmp/engine/config/gpt_config.h"
    : > "$tmp/proto/jobspec.h"
    printf '#include "gpt_config.h"\n' > "$tmp/proto/jobspec.c"
    printf 'target_link_libraries(gptengine PUBLIC gptconfig gpterr m)\n' > "$tmp/CMakeLists.txt"
    printf 'cc x.o -o test_engine_alone ../libgptengine.a ../libgpterr.a -lm\n' \
        > "$tmp/build/tests/CMakeFiles/test_engine_alone.dir/link.txt"
    if ! out=$(LAYERING_GUARD_SELFTEST=1 "$0" "$tmp" "$tmp/build"); then
        echo "layering guard refused a clean tree (proto/ including engine/config):"
        echo "$out"
        status=1
    fi
    mkdir -p "$tmp/base"
    printf '#include "model.h"\n' | tee "$tmp/err/planted.c" "$tmp/proto/planted.c" \
        "$tmp/base/planted.c" > "$tmp/ctl/planted.c"
    printf '#include "jobspec.h"\n' > "$tmp/engine/planted.c"
    printf '#include "jobs.h"\n' > "$tmp/engine/planted_daemon.c"
    printf '#include "gpt_err.h"\n' > "$tmp/engine/config/planted.c"
    printf '#include "jobs.h"\n' | tee "$tmp/daemon/store/planted.c" > "$tmp/daemon/extra/planted.c"
    printf 'target_link_libraries(gptengine PRIVATE PkgConfig::JANSSON)\n' >> "$tmp/CMakeLists.txt"
    printf 'target_link_libraries(gptconfig INTERFACE # below all\n  gptproto)\n' \
        >> "$tmp/CMakeLists.txt"
    printf 'cc x.o -o test_engine_alone ../libgptengine.a ../libgptproto.a\n' \
        > "$tmp/build/tests/CMakeFiles/test_engine_alone.dir/link.txt"
    out=$(LAYERING_GUARD_SELFTEST=1 "$0" "$tmp" "$tmp/build") && {
        echo "layering guard passed a tree with planted violations"
        status=1
    }
    for want in err/planted.c base/planted.c proto/planted.c ctl/planted.c engine/planted.c \
                engine/planted_daemon.c engine/config/planted.c "gptengine must not link" \
                "daemon/store may not include daemon/jobs's jobs.h: daemon/store/planted.c" \
                "daemon folder 'extra' is not in layering_guard's list" \
                "gptconfig must not link" "test_engine_alone (gptengine only)"; do
        if ! grep -qF "$want" <<<"$out"; then
            echo "layering guard missed a planted violation: $want"
            status=1
        fi
    done
fi
[[ $status -eq 0 ]] && echo "layering ok"
exit $status
