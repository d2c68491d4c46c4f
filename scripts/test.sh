#!/usr/bin/env bash
# Quick start, command 2: build everything and run the whole test suite (unit,
# property and integration tests). CI runs exactly this (.ci/run).
source "$(dirname "$0")/common.sh"
build_all
ensure_nvrtc
# The host-run CUDA kernels (plugin-mxfp8/tests/*_host.rs) with their threads jittered, so that
# an ordering bug between lanes or warps shows more often (tests/host/simt.hpp; unset it with
# SIMT_JITTER= to run them plain).
export SIMT_JITTER="${SIMT_JITTER-1}"
echo "==> running tests"
cargo test --release --no-fail-fast --workspace $(printf -- '--exclude %s ' "${GUESTS[@]}") "$@"
