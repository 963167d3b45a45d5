#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (unit, property and
# end-to-end tests in network namespaces). Needs root.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo test --workspace --locked "$@"
