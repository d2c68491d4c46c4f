//! The `mxhost` subcommands.
pub mod plugins;
pub mod quantize;
pub mod run;
pub mod selftest;
