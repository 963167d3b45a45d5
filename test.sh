#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (unit, property and
# end-to-end tests in network namespaces). Needs root.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
# Incremental state is a third of a clean test build's size (about 760 MB)
# and buys nothing on a fresh checkout; set CARGO_INCREMENTAL=1 to keep it.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^passed/) p += $(i-1); if ($i ~ /^failed/) f += $(i-1) } }
     END { printf "\nall tests: %d passed, %d failed\n", p, f }' "$log"
exit $status
