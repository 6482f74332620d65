#!/usr/bin/env bash
# stress.sh - runs the randomized traffic generators under tmpirun over
# every transport the pml can use, and says which ran, which were skipped
# and why: point-to-point (tests/src/bin/stress.rs) and one-sided
# (tests/src/bin/stress-rma.rs, the runs named rma-*). See docs/stress.md.
#
# usage: bash ci/stress.sh [--short|--soak] [--rxe] [--only NAME] [-- STRESS-ARGS...]
#
#   --short   (default) a few thousand messages per transport, debug build
#             (what ci/test-all.sh runs)
#   --soak    ~10^6 messages per transport, release build (minutes each)
#   --rxe     also run over btl openib on a real soft-RoCE device (rxe0)
#             inside the qemu VM of ci/rxe/rxe-run.sh (root only)
#   --only N  run only transport N (sm, tcp, openib-tm1, openib-tm1-all,
#             openib-tm0, sm-credit, openib-tm1-credit, rxe; one-sided:
#             rma-sm, rma-tcp, rma-openib, rma-openib-rdma)
#   STRESS-ARGS are passed to every run (e.g. --seed 1234 to reproduce;
#             options of one generator only together with --only).
#
# env: STRESS_RANKS (default 3), STRESS_TIMEOUT (seconds per run; default
#      180 short, 900 soak), STRESS_SEED (same seed for every transport),
#      CARGO_TARGET_DIR (default: target), STRESS_SOAK_SECONDS (soak: start
#      no epoch after this many seconds, default 540).
#
# A transport is skipped (not failed) only when MPI init reports that no
# BTL of the selection reaches a peer (the pml does not wire that BTL in
# this build, or the device is missing); any other failure fails the script.
set -uo pipefail
cd "$(dirname "$0")/.."

MODE=short
RXE=0
ONLY=
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
        --short) MODE=short ;;
        --soak) MODE=soak ;;
        --rxe) RXE=1 ;;
        --only) ONLY=$2; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "stress.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done

RANKS=${STRESS_RANKS:-3}
TARGET=${CARGO_TARGET_DIR:-target}
if [ "$MODE" = soak ]; then
    PROFILE=release
    TIMEOUT=${STRESS_TIMEOUT:-900}
    # 500 epochs x ~2000 messages = ~10^6 messages; fewer large ones than
    # the short run so that a soak stays within minutes on 2 cores.
    # --max-seconds: no epoch starts after that (default 540 s per transport).
    ARGS=(--epochs 500 --msgs 2000 --rndv-permille 10 --big-permille 1 --stall-seconds 120
          --max-seconds "${STRESS_SOAK_SECONDS:-540}")
    RMA_ARGS=(--epochs 2000 --ops 96 --stall-seconds 120)
else
    PROFILE=debug
    TIMEOUT=${STRESS_TIMEOUT:-180}
    ARGS=(--epochs 8 --msgs 400 --max-size 4194304 --stall-seconds 60)
    RMA_ARGS=(--epochs 150 --stall-seconds 60)
fi
[ -n "${STRESS_SEED:-}" ] && ARGS+=(--seed "$STRESS_SEED") && RMA_ARGS+=(--seed "$STRESS_SEED")
ARGS+=("${EXTRA[@]}")
RMA_ARGS+=("${EXTRA[@]}")

echo "== stress ($MODE, $RANKS ranks, $PROFILE build)"
CARGO_FLAGS=(-q -p tmpi-run -p tmpi-tests --bin tmpirun --bin stress --bin stress-rma)
[ "$PROFILE" = release ] && CARGO_FLAGS+=(--release)
cargo build "${CARGO_FLAGS[@]}" || { echo "stress.sh: build failed" >&2; exit 1; }
BIN=$TARGET/$PROFILE
TMPIRUN=$BIN/tmpirun
STRESS=$BIN/stress
STRESS_RMA=$BIN/stress-rma

declare -a SUMMARY
FAILED=0
LOGDIR=$(mktemp -d /tmp/tmpi-stress.XXXXXX)

# The generator of the runs below: stress (point-to-point; counts
# "messages") or stress-rma (one-sided; counts "operations").
GEN=stress
# run NAME MCA-ARGS...
run() {
    local name=$1; shift
    if [ -n "$ONLY" ] && [ "$ONLY" != "$name" ]; then
        return
    fi
    local log=$LOGDIR/$name.log
    local prog=$STRESS unit=messages
    local -a args=("${ARGS[@]}")
    if [ "$GEN" = stress-rma ]; then
        prog=$STRESS_RMA unit=operations
        args=("${RMA_ARGS[@]}")
    fi
    echo "-- $name: tmpirun -n $RANKS $* $GEN ${args[*]}"
    local t0 t1 rc
    t0=$(date +%s.%N)
    "$TMPIRUN" -n "$RANKS" --timeout "$TIMEOUT" --mca mpi_yield_when_idle 1 "$@" \
        "$prog" "${args[@]}" > "$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local nic rdma
    nic=$(sed -n 's/^pml_stats .* nic_matches=\([0-9]*\) .*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    # RDMA writes and reads of osc rdma's windows (logged at free with
    # osc_base_verbose >= 1).
    rdma=$(sed -n 's/.*osc rdma window freed: \([0-9]*\) RDMA writes, \([0-9]*\) RDMA reads.*/\1 \2/p' "$log" | awk '{ s += $1 + $2 } END { print s + 0 }')
    # NIC atomics (the accumulate locks of osc rdma's windows).
    local atomics
    atomics=$(sed -n 's/.*osc rdma window freed: .* \([0-9]*\) NIC atomics.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
    if [ $rc -eq 0 ] && grep -q "^$GEN: OK" "$log" && [ "$NEED_RDMA" = 1 ] && { [ "$rdma" -eq 0 ] || [ "$atomics" -eq 0 ] || grep -q 'the window goes to pt2pt\|accumulates go by pt2pt' "$log"; }; then
        grep -E "^$GEN: OK|goes to pt2pt|go by pt2pt" "$log"
        SUMMARY+=("$name: FAILED (osc rdma was selected, but it issued no RDMA operation or NIC atomic, or a window fell back to pt2pt)")
        FAILED=1
    elif [ $rc -eq 0 ] && grep -q "^$GEN: OK" "$log" && { [ "$NEED_NIC" = 0 ] || [ "$nic" -gt 0 ]; }; then
        local count
        count=$(sed -n "s/^$GEN: OK .* $unit \\([0-9]*\\) .*/\\1/p" "$log")
        grep -E "^$GEN: OK|pml_stats" "$log"
        local nictext=", $nic matched by the NIC"
        [ "$GEN" = stress-rma ] && nictext=
        [ "$NEED_RDMA" = 1 ] && nictext=", $rdma RDMA writes and reads and $atomics NIC atomics by osc rdma"
        SUMMARY+=("$name: OK ($count $unit, ${secs} s$nictext)")
    elif [ $rc -eq 0 ] && grep -q "^$GEN: OK" "$log"; then
        grep -E "^$GEN: OK|pml_stats" "$log"
        SUMMARY+=("$name: FAILED (tag matching on, but the NIC matched no receive)")
        FAILED=1
    elif grep -q 'no BTL reaches' "$log"; then
        local why
        why=$(grep -m1 -o 'no BTL reaches.*' "$log")
        SUMMARY+=("$name: SKIPPED (the pml cannot use this selection here: $why)")
        echo "   skipped: $why"
    else
        cat "$log"
        SUMMARY+=("$name: FAILED (exit $rc after ${secs} s; log above; seed in its first line)")
        FAILED=1
    fi
}

NEED_NIC=0
NEED_RDMA=0
run sm --mca btl self,sm
run tcp --mca btl self,tcp
# pml_stats=1: each rank prints how many receives the NIC matched; a run
# with tag matching on fails when the NIC matched none (NEED_NIC=1).
NEED_NIC=1
run openib-tm1 --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca btl_openib_tm_enable 1 --mca pml_stats 1
# Every receive size offloaded (pml_tm_thresh 0): small eager messages in
# bounce buffers, eager messages across one packet (the soft NIC's path MTU
# is 1 KiB: two completions), rendezvous read by the NIC and by software.
run openib-tm1-all --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca btl_openib_tm_enable 1 --mca pml_stats 1 --mca pml_tm_thresh 0
NEED_NIC=0
run openib-tm0 --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca btl_openib_tm_enable 0 --mca pml_stats 1
# A 2 KiB window of unexpected-message credit (pml_ob1_unexpected_limit):
# most eager-sized sends switch to rendezvous; checks that flow control
# never holds a message back (a held send behind unreceived ones hung the
# first design: MPI's progress rule) and keeps order, with and without the
# NIC matching.
run sm-credit --mca btl self,sm --mca pml_ob1_unexpected_limit 2K
NEED_NIC=1
run openib-tm1-credit --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca btl_openib_tm_enable 1 --mca pml_stats 1 --mca pml_ob1_unexpected_limit 2K

# One-sided: stress-rma's windows (over a Vec and shared) under fence,
# locks, lock_all and PSCW; osc's messages travel through the pml, so
# every transport carries them.
GEN=stress-rma
NEED_NIC=0
run rma-sm --mca btl self,sm
run rma-tcp --mca btl self,tcp
# Over openib the windows over a Vec (MPI_Win_create) are served by osc
# rdma (puts and gets as RDMA writes and reads; the run fails when it
# issued none or a window fell back to pt2pt); the allocated and shared
# ones by osc sm (one node).
NEED_RDMA=1
run rma-openib --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca btl_openib_tm_enable 1 --mca osc_base_verbose 1
# sm left out: the MPI_Win_allocate windows go to osc rdma too (the shared
# ones to pt2pt).
run rma-openib-rdma --mca btl self,openib --mca btl_openib_if_include tmsoft0 --mca osc rdma,pt2pt --mca osc_base_verbose 1
NEED_RDMA=0
GEN=stress

if [ "$RXE" = 1 ] && { [ -z "$ONLY" ] || [ "$ONLY" = rxe ]; }; then
    # openib on a real soft-RoCE device inside the VM: the two binaries
    # travel in the payload (their shared libraries are resolved by
    # rxe-run.sh); two ranks, smaller run (the VM has 2 vCPUs, TCG may be slow).
    if [ "$(id -u)" != 0 ]; then
        SUMMARY+=("rxe: SKIPPED (needs root for the qemu VM of ci/rxe/rxe-run.sh)")
    else
        PAY=$(mktemp -d /var/tmp/tmpi-stress-payload.XXXXXX)
        objcopy --strip-debug "$TMPIRUN" "$PAY/tmpirun" 2>/dev/null || cp "$TMPIRUN" "$PAY/tmpirun"
        objcopy --strip-debug "$STRESS" "$PAY/stress" 2>/dev/null || cp "$STRESS" "$PAY/stress"
        objcopy --strip-debug "$STRESS_RMA" "$PAY/stress-rma" 2>/dev/null || cp "$STRESS_RMA" "$PAY/stress-rma"
        log=$LOGDIR/rxe.log
        RXE_TIMEOUT=${RXE_TIMEOUT:-$((TIMEOUT + 300))} bash ci/rxe/rxe-run.sh "$PAY" -- \
            ./tmpirun -n 2 --timeout "$TIMEOUT" --mca mpi_yield_when_idle 1 \
            --mca btl self,openib --mca btl_openib_if_include rxe0 \
            ./stress "${ARGS[@]}" > "$log" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && grep -q '^stress: OK' "$log"; then
            grep '^stress: OK' "$log"
            SUMMARY+=("rxe: OK")
        elif grep -q 'no BTL reaches' "$log"; then
            SUMMARY+=("rxe: SKIPPED ($(grep -m1 -o 'no BTL reaches.*' "$log"))")
        elif [ $rc -eq 125 ]; then
            tail -20 "$log"
            SUMMARY+=("rxe: SKIPPED (the VM could not boot: exit 125, log above)")
        else
            cat "$log"
            SUMMARY+=("rxe: FAILED (exit $rc)")
            FAILED=1
        fi
        # One-sided over real verbs: osc rdma's RDMA writes and reads on
        # rxe0 (every window but the shared ones: --mca osc rdma,pt2pt), 50
        # epochs. Fails when no RDMA operation was issued or a window fell
        # back to pt2pt, as rma-openib-rdma does on the soft NIC.
        if [ $rc -ne 125 ]; then
            log=$LOGDIR/rxe-rma.log
            RXE_TIMEOUT=${RXE_TIMEOUT:-$((TIMEOUT + 300))} bash ci/rxe/rxe-run.sh "$PAY" -- \
                ./tmpirun -n 2 --timeout "$TIMEOUT" --mca mpi_yield_when_idle 1 \
                --mca btl self,openib --mca btl_openib_if_include rxe0 \
                --mca osc rdma,pt2pt --mca osc_base_verbose 1 \
                ./stress-rma --epochs 50 --stall-seconds 60 "${EXTRA[@]}" > "$log" 2>&1
            rc=$?
            rdma=$(sed -n 's/.*osc rdma window freed: \([0-9]*\) RDMA writes, \([0-9]*\) RDMA reads.*/\1 \2/p' "$log" | awk '{ s += $1 + $2 } END { print s + 0 }')
            atomics=$(sed -n 's/.*osc rdma window freed: .* \([0-9]*\) NIC atomics.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
            if [ $rc -eq 0 ] && grep -q '^stress-rma: OK' "$log" && [ "$rdma" -gt 0 ] && [ "$atomics" -gt 0 ] && ! grep -q 'the window goes to pt2pt\|accumulates go by pt2pt' "$log"; then
                grep '^stress-rma: OK' "$log"
                SUMMARY+=("rxe-rma: OK ($rdma RDMA writes and reads and $atomics NIC atomics by osc rdma)")
            elif [ $rc -eq 125 ]; then
                tail -20 "$log"
                SUMMARY+=("rxe-rma: SKIPPED (the VM could not boot: exit 125, log above)")
            else
                cat "$log"
                SUMMARY+=("rxe-rma: FAILED (exit $rc, $rdma RDMA operations, $atomics NIC atomics)")
                FAILED=1
            fi
        fi
        rm -rf "$PAY"
    fi
elif [ -z "$ONLY" ]; then
    SUMMARY+=("rxe: not run (add --rxe; root and qemu needed)")
fi

echo "== stress summary ($MODE)"
for s in "${SUMMARY[@]}"; do
    echo "   $s"
done
if [ $FAILED = 0 ]; then
    rm -rf "$LOGDIR"
else
    echo "logs kept in $LOGDIR"
fi
exit $FAILED
