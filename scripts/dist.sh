#!/usr/bin/env bash
# Package what a GPU run needs into dist/ (git-ignored): the stripped mxhost binary,
# the plugin libraries next to it (mxhost finds plugins beside itself) and the guests.
# The GPU machine has no Rust toolchain: build here, copy dist/ there, run
#   dist/mxhost selftest --device cuda
#   dist/mxhost run dist/hello-gemm.wasm --device cuda
#   python3 dist/bench_peers.py --shapes a,b,c,d --budget-s 90 && \
#     dist/mxhost bench --device cuda --peers $OUT/peer_bench.csv --json $OUT/bench.json
# cudarc loads libcuda/libnvrtc at run time, so nothing CUDA is needed to build.
source "$(dirname "$0")/common.sh"
ensure_wasm_target
cargo build --release --target wasm32-wasip2 -p hello-gemm -p toy-moe -p snr
cargo build --release -p mxhost -p mxhost-plugin-mxfp8 -p mxhost-plugin-bf16
rm -rf dist
mkdir -p dist
cp target/release/mxhost target/release/libmxhost_plugin_mxfp8.so target/release/libmxhost_plugin_bf16.so dist/
cp target/wasm32-wasip2/release/{hello-gemm,toy-moe,snr}.wasm dist/
# The peer benchmark, for side-by-side ratios (`mxhost bench --peers`); shared/ does not
# travel with the working tree.
if [ -f ../shared/anchors/bench_peers.py ]; then cp ../shared/anchors/bench_peers.py dist/; fi
strip dist/mxhost dist/*.so
du -sh dist
ls -l dist
