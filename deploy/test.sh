#!/usr/bin/env bash
# Runs Herald's whole test suite: unit tests, in-process integration tests against a real
# gateway, and the CLI tests. Extra arguments are passed to `cargo test`.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cargo test --workspace "$@"
