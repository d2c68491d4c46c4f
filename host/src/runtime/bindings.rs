//! Host bindings generated from `wit/` for the three worlds. Resources map to the
//! host's own types, and the WIT `error` maps to [`crate::error::OpError`] so host
//! functions can use `?`.

pub mod experiment {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "experiment",
        imports: { default: trappable },
        trappable_error_type: { "mxhost:runtime/types.error" => crate::error::OpError },
        with: {
            "mxhost:runtime/tensors.tensor": crate::tensor::Tensor,
            "mxhost:runtime/mx.mx-tensor": crate::tensor::MxTensor,
        },
    });
}

pub mod router {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "router",
        imports: { default: trappable },
        with: {
            "mxhost:runtime/metrics": super::experiment::mxhost::runtime::metrics,
            "mxhost:runtime/routing-types": super::experiment::mxhost::runtime::routing_types,
        },
    });
}

pub mod guard {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "guard",
        imports: { default: trappable },
        with: {
            "mxhost:runtime/types": super::experiment::mxhost::runtime::types,
        },
    });
}

pub use experiment::mxhost::runtime::{
    grouped_gemm, metrics, mx, plugins, routing, routing_types, tensor_ops, tensors, types,
};
pub use guard::mxhost::runtime::dispatch;
