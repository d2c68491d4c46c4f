//! The `mxhost` subcommands.
pub mod bench;
pub mod plugins;
pub mod quantize;
pub mod run;
pub mod selftest;
