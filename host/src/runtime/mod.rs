//! The Wasm component runtime: bindings, per-guest state, the host implementation of
//! the WIT imports, guards and routers, and running an experiment.
pub mod bindings;
pub mod convert;
pub mod engine;
pub mod guards;
pub mod host_api;
mod host_train;
pub mod router;
pub mod run;
pub mod state;
