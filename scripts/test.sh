#!/usr/bin/env bash
# Quick start, command 2: build everything and run the whole test suite (unit,
# property and integration tests). CI runs exactly this (.ci/run).
source "$(dirname "$0")/common.sh"
build_all
ensure_nvrtc
echo "==> running tests"
cargo test --release --no-fail-fast --workspace $(printf -- '--exclude %s ' "${GUESTS[@]}") "$@"
