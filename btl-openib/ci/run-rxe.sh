#!/usr/bin/env bash
# run-rxe.sh - btl-openib over REAL libibverbs on soft-RoCE (rdma_rxe, rxe0) in a
# throw-away qemu VM (ci/rxe/rxe-run.sh; see docs/rxe.md and docs/btl-openib.md).
#
# Builds the example `openib_pingpong` on the host (it dlopen()s libibverbs), ships it in
# the payload, and runs it in the guest: two processes, component init with modex
# wire-up over rxe0 (RoCE v2 GID chosen automatically), eager messages both ways, a 4 MiB
# rendezvous by RDMA read in software + FIN, a read with a wrong rkey reported as
# REM_ACCESS_ERR on that read. rxe has no tag matching: with btl_openib_tm_enable=1 the
# module must warn and fall back to software matching (checked by the example).
#
# Line for ci/test-all.sh:   bash btl-openib/ci/run-rxe.sh
# env: TMPI_RXE_SKIP=1 (skip), RXE_TIMEOUT (default 600), RXE_VERBOSE, RXE_ACCEL, RXE_CACHE
# exit: 0 pass, 1 fail, 124 VM timeout, 125 VM failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
log() { echo "btl-openib/run-rxe: $*" >&2; }

if [ "${TMPI_RXE_SKIP:-0}" = 1 ]; then
    log "skipped (TMPI_RXE_SKIP=1)"
    exit 0
fi
[ "$(uname -m)" = x86_64 ] || { log "only x86_64 hosts can run the rxe VM"; exit 1; }
[ "$(id -u)" = 0 ] || { log "must run as root (apt-get, VM image staging)"; exit 1; }

export CARGO_TERM_COLOR=never
PAY=$(mktemp -d /var/tmp/tmpi-openib-rxe.XXXXXX)
trap 'rm -rf "$PAY"' EXIT
log "building the openib_pingpong example"
cargo build -p tmpi-btl-openib --example openib_pingpong --quiet --message-format=json > "$PAY/build.json"
EXE=$(python3 - "$PAY/build.json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "openib_pingpong":
        print(m["executable"])
PY
)
[ -n "$EXE" ] || { log "example not found in cargo output"; exit 1; }
objcopy --strip-debug "$EXE" "$PAY/openib_pingpong" 2>/dev/null || cp "$EXE" "$PAY/openib_pingpong"
rm -f "$PAY/build.json"
if readelf -d "$PAY/openib_pingpong" 2>/dev/null | grep -q 'NEEDED.*libibverbs'; then
    log "openib_pingpong links libibverbs at build time (must be dlopen()ed)"
    exit 1
fi
cat > "$PAY/guest.sh" <<'GUEST'
export RUST_BACKTRACE=1
ibv_devinfo -d "${RXE_DEV:-rxe0}" 2>&1 | grep -E 'hca_id|state:|link_layer' || true
./openib_pingpong "${RXE_DEV:-rxe0}"
GUEST
export RXE_TIMEOUT=${RXE_TIMEOUT:-600}
log "booting the rxe VM"
bash ci/rxe/rxe-run.sh "$PAY" -- bash guest.sh
