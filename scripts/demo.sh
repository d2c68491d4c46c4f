#!/usr/bin/env bash
# Quick start, command 1: build everything and run the main demo on the default device
# (CUDA when present, else the CPU): hello-gemm's SNR table, then the toy-MoE training
# comparison, which writes out/toy-moe/{metrics.csv,loss.png}. Extra arguments go to
# `mxhost run` (e.g. --device cpu).
source "$(dirname "$0")/common.sh"
build_all
echo "==> hello-gemm: SNRs of MXFP8 and BF16 grouped GEMMs"
target/release/mxhost run target/wasm32-wasip2/release/hello-gemm.wasm "$@"
echo "==> toy-moe: the same MoE layer trained with MXFP8 and with BF16 (about 1–2 minutes on 2 CPU cores)"
exec target/release/mxhost run target/wasm32-wasip2/release/toy-moe.wasm --out out/toy-moe "$@"
