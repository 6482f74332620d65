#!/usr/bin/env bash
# The main job: builds tmpi (release) and runs a multi-rank demo on the
# default local components (btl self + sm): the token ring, the ping-pong
# (latency/bandwidth with checked payloads) and the wildcard server, each
# with 4 ranks under tmpirun. Exits non-zero if any of them fails.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building tmpirun and the tmpi examples (release)"
cargo build --release --quiet -p tmpi-run --bin tmpirun -p tmpi --examples
TD="${CARGO_TARGET_DIR:-target}/release"
RUN=("$TD/tmpirun" -n 4 --timeout 300)

echo
echo "== tmpirun -n 4 ring 100"
"${RUN[@]}" "$TD/examples/ring" 100
echo
echo "== tmpirun -n 4 pingpong (ranks 0 and 1 measure, 2 and 3 wait)"
"${RUN[@]}" "$TD/examples/pingpong"
echo
echo "== tmpirun -n 4 wildcard_server"
"${RUN[@]}" "$TD/examples/wildcard_server"
echo
echo "demo: OK"
