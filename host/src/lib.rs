//! mxhost: a Wasm component host for sandboxed low-precision MoE experiments.
//!
//! Guests (WebAssembly components of the worlds in `wit/`) hold handles to host-owned
//! tensors and call MX quantization and grouped GEMM imports; the host validates every
//! request and dispatches it to the active native precision plugin (see
//! `mxhost-plugin-abi`). The binary's subcommands live in [`commands`]; embedding hosts
//! and tests use [`runtime::run`].

pub mod capabilities;
pub mod commands;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod limits;
pub mod metrics;
pub mod ops;
pub mod plot;
pub mod plugin;
pub mod python;
pub mod routing;
pub mod runtime;
pub mod tensor;
pub mod train_ops;
pub mod validate;
