#!/usr/bin/env bash
# run-verbs-tests.sh - runs tmpi-verbs against REAL libibverbs on a soft-RoCE
# device (rdma_rxe, rxe0) inside a throw-away qemu VM (the host kernel has no RDMA).
#
# What it does (idempotent, fresh Debian 12 machine with Rust, gcc, python3):
#   1. builds, on the host, the ibv_smoke example, every test binary of the
#      tmpi-verbs package (lib unit tests + tests/*.rs integration tests) and tmpi_info;
#   2. boots Debian's stock kernel under qemu via ci/rxe/rxe-run.sh, which installs
#      what it needs from Debian packages on first use (qemu-system-x86,
#      busybox-static, libibverbs1, ibverbs-providers, ibverbs-utils, the kernel
#      package into a cache dir) and creates rxe0;
#   3. in the guest, with TMPI_VERBS_TEST_DEVICE=rxe0: ibv_devinfo, ibv_smoke,
#      tmpi_info (must list rxe0 from libibverbs with TM absent, and tmsoft0),
#      the lib's `ibv::` unit tests, and the conformance suite (tests/conformance.rs);
#   4. exits non-zero if anything failed (124 timeout, 125 VM failure).
#
# env: TMPI_RXE_TEST_FILTER  regex on integration-test binary names (default ^conformance$:
#                             the soft-NIC-only tests run on the host, not here)
#      TMPI_RXE_SKIP=1       skip the whole run (prints why; exit 0)
#      RXE_TIMEOUT           whole-VM bound in seconds (default here: 900)
#      RXE_CACHE, RXE_ACCEL, RXE_VERBOSE: see rxe-run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
log() { echo "run-verbs-tests: $*" >&2; }

if [ "${TMPI_RXE_SKIP:-0}" = 1 ]; then
    log "skipped (TMPI_RXE_SKIP=1)"
    exit 0
fi
[ "$(uname -m)" = x86_64 ] || { log "only x86_64 hosts can run the rxe VM"; exit 1; }
[ "$(id -u)" = 0 ] || { log "must run as root (apt-get, VM image staging)"; exit 1; }

export CARGO_TERM_COLOR=never
log "building tmpi-verbs test binaries"
PAY=$(mktemp -d /var/tmp/tmpi-rxe-payload.XXXXXX)
trap 'rm -rf "$PAY"' EXIT
mkdir -p "$PAY/tests"
# executables are taken from cargo's JSON messages (works with any CARGO_TARGET_DIR)
cargo build -p tmpi-verbs --example ibv_smoke --quiet --message-format=json > "$PAY/build.json"
cargo test -p tmpi-verbs --no-run --quiet --message-format=json >> "$PAY/build.json"
# tmpi_info must list rxe0 with its (absent) TM caps from real libibverbs (issue 5)
cargo build -p tmpi-run --bin tmpi_info --quiet --message-format=json >> "$PAY/build.json"

# debug info stripped: the payload travels in the initramfs (guest RAM)
strip_copy() { objcopy --strip-debug "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
python3 - "$PAY/build.json" "${TMPI_RXE_TEST_FILTER-^conformance$}" > "$PAY/list" <<'EOF'
import json, re, sys
flt = re.compile(sys.argv[2]) if sys.argv[2] else None
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if m["target"]["name"] == "tmpi_info" and "bin" in m["target"]["kind"]:
        print("info", m["executable"])
        continue
    pid = m["package_id"]
    if "tmpi-verbs" not in pid and not pid.split("#")[0].endswith("/verbs"):
        continue
    kinds = m["target"]["kind"]
    name = m["target"]["name"]
    if "example" in kinds and name == "ibv_smoke":
        print("example", m["executable"])
    elif "lib" in kinds:
        print("lib", m["executable"])
    elif "test" in kinds and (flt is None or flt.search(name)):
        print("test", m["executable"], name)
EOF
while read -r kind exe name; do
    case $kind in
        example) strip_copy "$exe" "$PAY/ibv_smoke" ;;
        lib) strip_copy "$exe" "$PAY/lib-tests" ;;
        info) strip_copy "$exe" "$PAY/tmpi_info" ;;
        test) strip_copy "$exe" "$PAY/tests/$name" ;;
    esac
done < "$PAY/list"
[ -f "$PAY/lib-tests" ] && [ -f "$PAY/ibv_smoke" ] && [ -f "$PAY/tmpi_info" ] || { log "test binaries not found in cargo output"; exit 1; }
rm -f "$PAY/build.json" "$PAY/list"
# libibverbs must be dlopen()ed, never a link-time dependency (binaries start without rdma-core)
if readelf -d "$PAY/ibv_smoke" "$PAY/lib-tests" "$PAY/tmpi_info" 2>/dev/null | grep -q 'NEEDED.*libibverbs'; then
    log "a tmpi-verbs binary links libibverbs at build time (must be dlopen()ed)"
    exit 1
fi
log "payload: ibv_smoke, lib-tests, $(ls "$PAY/tests" | wc -l) integration test binaries ($(du -sh "$PAY" | cut -f1))"

cat > "$PAY/guest.sh" <<'EOF'
# runs inside the VM (cwd /payload)
export TMPI_VERBS_TEST_DEVICE=${RXE_DEV:-rxe0} RUST_BACKTRACE=1 RUST_TEST_THREADS=1
pass=0 fail=0 failed=""
run() {
    local name=$1; shift
    echo "=== $name"
    if "$@"; then pass=$((pass + 1)); echo "=== $name: PASS"
    else fail=$((fail + 1)); failed="$failed $name"; echo "=== $name: FAIL"; fi
}
ibv_devinfo -v -d "$TMPI_VERBS_TEST_DEVICE" 2>&1 | grep -E 'hca_id|transport:|fw_ver|state:|link_layer|max_qp:|tag matching|max_num_tags' || true
run ibv_smoke ./ibv_smoke "$TMPI_VERBS_TEST_DEVICE"
# tmpi_info: the device from real libibverbs, its port, tag matching absent,
# NIC atomics present (rxe reports IB_ATOMIC_HCA; osc rdma relies on them)
info_check() {
    ./tmpi_info > info.txt 2>&1 || { cat info.txt; return 1; }
    sed -n '/^RDMA devices:/,/^$/p' info.txt
    grep -q "^  $TMPI_VERBS_TEST_DEVICE (libibverbs): fw .*, tag matching: no (max_num_tags 0, " info.txt &&
        grep -q '^    port 1: Active, Ethernet, active MTU ' info.txt &&
        grep -q '^  tmsoft0 (soft NIC' info.txt &&
        ! grep -q 'libibverbs not found' info.txt &&
        ./tmpi_info --parsable | grep -qx "rdma:device:$TMPI_VERBS_TEST_DEVICE:tm:max_num_tags:0" &&
        ./tmpi_info --parsable | grep -Eqx "rdma:device:$TMPI_VERBS_TEST_DEVICE:atomics:cap:(hca|glob)"
}
run "tmpi_info lists $TMPI_VERBS_TEST_DEVICE" info_check
run "lib ibv:: unit tests" ./lib-tests ibv::
# Tests named soft_* exercise the soft NIC only (they also return early
# off it): skipped here, so one that forgets its guard cannot fail on rxe.
for t in tests/*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "./$t" --skip soft_
done
echo "rxe summary:${failed:+ failed:$failed}"
echo "rxe: $pass passed, $fail failed"
[ "$fail" = 0 ]
EOF

export RXE_TIMEOUT=${RXE_TIMEOUT:-900}
log "booting the rxe VM"
bash ci/rxe/rxe-run.sh "$PAY" -- bash guest.sh
