#!/usr/bin/env bash
# Package what a GPU run needs into dist/ (git-ignored): the stripped mxhost binary,
# the plugin libraries next to it (mxhost finds plugins beside itself) and the guests.
# The GPU machine has no Rust toolchain: build here, copy dist/ there, run
#   dist/mxhost selftest --device cuda
#   dist/mxhost run dist/hello-gemm.wasm --device cuda
#   python3 dist/bench_peers.py --shapes a,b,c,d --warmup 1500 --rep 500 && \
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
# The anchors' main-loop microbenchmark, for plugin-mxfp8/cuda/bench/anchor_clock.sh.
if [ -f ../shared/anchors/mx_mainloop_overlap.cu ]; then cp ../shared/anchors/mx_mainloop_overlap.cu dist/; fi
strip dist/mxhost dist/*.so
# The kernel harness library (plugin-mxfp8/cuda/bench), prebuilt when this machine has
# nvcc from the CUDA 13.0 wheels in .venv-cuda (scripts/common.sh installs NVRTC there;
# nvcc with nvvm, crt and runtime pinned to 13.0 too, ../shared/notes/toolchain.md): saves ~40 s of nvcc on the GPU
# machine; run.sh uses dist/libmxbench.so when it is there.
cu13="$(ls -d .venv-cuda/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -1 || true)"
if [ -n "$cu13" ] && [ -x "$cu13/bin/nvcc" ]; then
    (cd plugin-mxfp8/cuda/bench && PATH="$PWD/../../../$cu13/bin:$PATH" nvcc -shared -Xcompiler -fPIC \
        -gencode arch=compute_90a,code=sm_90a -O3 -I../include -L"$PWD/../../../$cu13/lib" -Xptxas -v \
        -o ../../../dist/libmxbench.so launch.cu > ../../../dist/libmxbench.ptxas.log 2>&1) \
        || { echo "harness library build failed: dist/libmxbench.ptxas.log"; rm -f dist/libmxbench.so; }
fi
du -sh dist
ls -l dist
