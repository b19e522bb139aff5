#!/usr/bin/env bash
# Fails when engine/ or proto/ reach up into the daemon's world: libuv,
# SQLite or any header under daemon/ (DESIGN.md, "Layout and layering").
set -u
top=${1:?usage: layering_guard.sh SOURCE_DIR}
daemon_headers=$(cd "$top/daemon" 2>/dev/null && ls *.h 2>/dev/null | tr '\n' '|' | sed 's/|$//')
pattern='#[[:space:]]*include[[:space:]]*[<"](uv\.h|uv/|sqlite3\.h|daemon/|\.\./daemon/'
if [[ -n "$daemon_headers" ]]; then
    pattern="$pattern|(${daemon_headers//./\\.})"
fi
pattern="$pattern)"
hits=$(grep -rnE "$pattern" "$top/engine" "$top/proto" --include='*.c' --include='*.h' \
       --include='*.cu' --include='*.cuh' || true)
if [[ -n "$hits" ]]; then
    echo "layering violation: engine/ and proto/ must not include libuv, SQLite or daemon/ headers:"
    echo "$hits"
    exit 1
fi
echo "layering ok"
