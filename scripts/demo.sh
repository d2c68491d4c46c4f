#!/usr/bin/env bash
# Quick start, command 1: build everything and run the main demo on the default device
# (CUDA when present, else the CPU). Extra arguments go to `mxhost run`.
source "$(dirname "$0")/common.sh"
build_all
echo "==> running hello-gemm"
exec target/release/mxhost run target/wasm32-wasip2/release/hello-gemm.wasm --out out/hello-gemm "$@"
