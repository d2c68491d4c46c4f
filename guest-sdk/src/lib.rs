//! Rust SDK for mxhost guests.
//!
//! Enable the feature of the world your guest implements (`experiment`, the default;
//! `router`; `guard`) and export your implementation with the matching macro:
//!
//! ```ignore
//! use mxhost_guest::prelude::*;
//! struct Hello;
//! impl Experiment for Hello {
//!     fn run(args: Vec<String>) -> Result<String, String> {
//!         let x = Tensor::randn(&[128, 256], 1)?;
//!         Ok(format!("{:?}", x.shape()))
//!     }
//! }
//! mxhost_guest::export_experiment!(Hello);
//! ```
//!
//! [`args::flag`] parses a guest's command-line flags. The [`reference`] module (plain
//! Rust, no host calls) holds FP64 reference grouped
//! GEMMs and SNR helpers for checking results inside a guest; [`topk`] the top-k
//! routing algorithm, a plan checker and the router-softmax backward.
//!
//! For training (world `experiment`): [`ops`] wraps the host's dense `tensor-ops`, and
//! [`nn`] has `GroupedLinear`, `MoeLayer` and the `Sgd`/`AdamW` optimizers.

pub mod args;
pub mod reference;
/// Top-k routing (the `mxhost-routing` crate, shared with the host's built-in router).
pub use mxhost_routing as topk;

#[cfg(feature = "experiment")]
pub mod bindings {
    wit_bindgen::generate!({
        world: "experiment",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_experiment_bindings",
        default_bindings_module: "mxhost_guest::bindings",
    });
}

#[cfg(feature = "experiment")]
mod experiment;
#[cfg(feature = "experiment")]
pub use experiment::*;
#[cfg(feature = "experiment")]
pub mod nn;
#[cfg(feature = "experiment")]
pub mod ops;

#[cfg(feature = "router")]
pub mod router_bindings {
    wit_bindgen::generate!({
        world: "router",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_router",
        default_bindings_module: "mxhost_guest::router_bindings",
    });
}

#[cfg(feature = "guard")]
pub mod guard_bindings {
    wit_bindgen::generate!({
        world: "guard",
        path: "../wit",
        pub_export_macro: true,
        export_macro_name: "export_guard",
        default_bindings_module: "mxhost_guest::guard_bindings",
    });
}

/// Export an experiment: `export_experiment!(MyType)` where `MyType: Experiment`.
#[cfg(feature = "experiment")]
#[macro_export]
macro_rules! export_experiment {
    ($ty:ident) => {
        $crate::bindings::export_experiment_bindings!($ty with_types_in $crate::bindings);
    };
}
