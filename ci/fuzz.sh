#!/usr/bin/env bash
# CI's short fuzz run: builds every cargo-fuzz target of fuzz/ and runs each
# for a few seconds from its committed seed corpus (fuzz/seeds/<target>),
# with AddressSanitizer, one process at a time. Fails when any target finds
# a crash, a property violation, a leak, a timeout or an out-of-memory;
# reproducers are left in fuzz/artifacts/<target>/ and the command to replay
# them is printed. See docs/fuzzing.md.
#
# Needs only Rust (stable), a C++ compiler (libFuzzer is built from source
# by libfuzzer-sys) and network access to crates.io the first time:
# cargo-fuzz is installed when missing. Stable rustc accepts the nightly
# flags cargo-fuzz passes (-Zsanitizer, sancov) because of RUSTC_BOOTSTRAP=1.
#
# Environment:
#   FUZZ_SECONDS      seconds per target (default 5)
#   FUZZ_TARGETS      space-separated subset of targets (default: all)
#   FUZZ_TARGET_DIR   cargo target dir for the fuzz build (default fuzz/target)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

secs=${FUZZ_SECONDS:-5}
export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz --version '^0.13'
fi

dir_args=()
if [ -n "${FUZZ_TARGET_DIR:-}" ]; then
    dir_args=(--target-dir "$FUZZ_TARGET_DIR")
fi

targets=${FUZZ_TARGETS:-$(cargo fuzz list)}
echo "== fuzz: building $(echo "$targets" | wc -w) targets"
start=$(date +%s)
build_log=$(mktemp)
build() {
    # `cargo fuzz build` takes one target, or none for all of them.
    if [ -z "${FUZZ_TARGETS:-}" ]; then
        cargo fuzz build -O "${dir_args[@]}"
    else
        for t in $targets; do cargo fuzz build -O "${dir_args[@]}" "$t" || return 1; done
    fi
}
if ! build >"$build_log" 2>&1; then
    cat "$build_log" >&2
    echo "fuzz: build failed" >&2
    exit 1
fi
rm -f "$build_log"
echo "   built in $(($(date +%s) - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=()
for t in $targets; do
    mkdir -p "$scratch/$t" "artifacts/$t"
    log=$scratch/$t.log
    # A scratch corpus first (new inputs go there, not into the repository),
    # then the committed seeds.
    if cargo fuzz run -O "${dir_args[@]}" "$t" "$scratch/$t" "seeds/$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
        printf '   %-16s ok   %8s runs in %ss, %s\n' "$t" "${runs:-?}" "$secs" "${cov:-cov: ?}"
    else
        printf '   %-16s FAILED\n' "$t"
        grep -E 'panicked at|ERROR: |SUMMARY|^assertion|left:|right:' "$log" | head -12 | sed 's/^/      /'
        art=$(sed -n "s/.*Test unit written to \(.*\)/\1/p" "$log" | tail -1)
        if [ -n "$art" ]; then
            echo "      reproducer: $art"
            echo "      replay: (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -O $t $art)"
        else
            tail -20 "$log" | sed 's/^/      /'
        fi
        failed+=("$t")
    fi
done

echo "== fuzz: done in $(($(date +%s) - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]}" >&2
    exit 1
fi
