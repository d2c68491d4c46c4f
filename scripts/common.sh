# Shared set-up for the Quick-start scripts: the wasm target and the release build of
# host, plugins and guests. Sourced, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GUESTS=(hello-gemm fixtures topk-router alto-guard toy-moe snr moe-checks)

ensure_wasm_target() {
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
        echo "==> installing the wasm32-wasip2 target"
        rustup target add wasm32-wasip2
    fi
}

# componentize-py builds Python experiments (`mxhost run app.py`); installed into a
# local venv, .venv-py/ (git-ignored), where mxhost looks for it.
COMPONENTIZE_PY_VERSION=0.25.1
ensure_componentize_py() {
    if [[ -n "${MXHOST_COMPONENTIZE_PY:-}" || -x .venv-py/bin/componentize-py ]]; then
        return
    fi
    echo "==> installing componentize-py $COMPONENTIZE_PY_VERSION into .venv-py/"
    python3 -m venv .venv-py
    .venv-py/bin/pip install --quiet "componentize-py==$COMPONENTIZE_PY_VERSION"
}

# NVRTC from the CUDA 13.0 wheels (no GPU, no CUDA toolkit needed), so that the test
# suite compile-checks every CUDA kernel for sm_90a. Installed into .venv-cuda/
# (git-ignored); when that is impossible (no network) the NVRTC test says it skipped.
ensure_nvrtc() {
    local lib=.venv-cuda/lib/python3*/site-packages/nvidia/cu13/lib
    if ! compgen -G "$lib/libnvrtc.so.13*" >/dev/null; then
        echo "==> installing NVRTC 13.0 (CUDA wheels) into .venv-cuda/"
        python3 -m venv .venv-cuda &&
            .venv-cuda/bin/pip install --quiet "nvidia-cuda-nvrtc==13.0.*" ||
            echo "==> could not install NVRTC: the kernel compile check will be skipped"
    fi
    for d in $lib; do
        if [[ -e "$d/libnvrtc.so.13" ]]; then
            export MXHOST_NVRTC_LIB_DIR="$PWD/$d" MXHOST_REQUIRE_NVRTC=1
        fi
    done
}

build_all() {
    ensure_wasm_target
    ensure_componentize_py
    echo "==> building guests (wasm32-wasip2)"
    cargo build --release --target wasm32-wasip2 $(printf -- '-p %s ' "${GUESTS[@]}")
    echo "==> building mxhost and plugins"
    cargo build --release
}
