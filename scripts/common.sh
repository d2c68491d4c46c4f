# Shared set-up for the Quick-start scripts: the wasm target and the release build of
# host, plugins and guests. Sourced, not run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GUESTS=(hello-gemm fixtures)

ensure_wasm_target() {
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
        echo "==> installing the wasm32-wasip2 target"
        rustup target add wasm32-wasip2
    fi
}

build_all() {
    ensure_wasm_target
    echo "==> building guests (wasm32-wasip2)"
    cargo build --release --target wasm32-wasip2 $(printf -- '-p %s ' "${GUESTS[@]}")
    echo "==> building mxhost and plugins"
    cargo build --release
}
