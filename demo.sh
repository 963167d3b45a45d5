#!/usr/bin/env bash
# Sets everything up, builds xvs, and runs the demo: hosts in network
# namespaces talking through xvs over AF_XDP. Needs root.
set -euo pipefail
cd "$(dirname "$0")"
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p xvs
exec ./target/release/xvs demo "$@"
