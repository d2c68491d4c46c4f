//! `mxhost`: run sandboxed Wasm experiments against native precision plugins.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "mxhost",
    version,
    about = "Sandboxed low-precision MoE experiments with swappable precision plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment guest.
    Run(mxhost::commands::run::RunArgs),
    /// List the plugins and devices found.
    Plugins,
    /// Quantize a safetensors file with an MX recipe.
    Quantize(mxhost::commands::quantize::QuantizeArgs),
    /// Check the GPU backend against the CPU backend (quantize byte-exact, GEMM SNR).
    Selftest(mxhost::commands::selftest::SelftestArgs),
    /// Time quantize, forward, dgrad, wgrad and a training step on the anchor shapes.
    Bench(mxhost::commands::bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => mxhost::commands::run::main(args),
        Command::Plugins => mxhost::commands::plugins::main().map(|()| 0),
        Command::Quantize(args) => mxhost::commands::quantize::main(args).map(|()| 0),
        Command::Selftest(args) => mxhost::commands::selftest::main(args),
        Command::Bench(args) => mxhost::commands::bench::main(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("mxhost: error: {e:#}");
            std::process::exit(1);
        }
    }
}
