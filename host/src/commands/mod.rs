//! The `mxhost` subcommands.
pub mod plugins;
pub mod quantize;
pub mod run;
