//! `mxhost run`: run an experiment guest with a plugin, guards, a router and limits.

use crate::capabilities::Capabilities;
use crate::device::{self, DeviceChoice};
use crate::limits::Limits;
use crate::metrics::MetricsSink;
use crate::plugin::registry::{search_dirs, PluginRegistry};
use crate::runtime::run::{run_experiment, RunConfig, RunOutcome};
use crate::runtime::state::Shared;
use anyhow::Context;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The experiment component (world `experiment`), e.g. target/wasm32-wasip2/release/hello-gemm.wasm,
    /// or a Python script (`.py`, built with componentize-py and cached).
    pub guest: PathBuf,
    /// Initial precision plugin: a name (`mxfp8`, `bf16`) or a path to a plugin library.
    #[arg(long, default_value = "mxfp8")]
    pub plugin: String,
    /// Where tensors live and kernels run.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    pub device: DeviceChoice,
    /// A guard component (world `guard`) run before every dispatch; repeatable, in order.
    #[arg(long = "guard")]
    pub guards: Vec<PathBuf>,
    /// A router component (world `router`) serving `routing.route`; default: built-in top-k.
    #[arg(long)]
    pub router: Option<PathBuf>,
    /// Directory for metrics.csv and one PNG plot per metric prefix (created if missing).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Wall-clock limit of one call into a guest.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Watchdog on each plugin call that computes on the CPU (0 = off). Native code cannot
    /// be interrupted: a call past the limit fails for the guest and runs on detached.
    #[arg(long, default_value_t = 300.0)]
    pub plugin_timeout_s: f64,
    /// Largest linear memory a guest may use.
    #[arg(long, default_value_t = 1024)]
    pub max_memory_mib: u64,
    /// Host tensor memory a guest may hold at once.
    #[arg(long, default_value_t = 16384)]
    pub max_tensor_mib: u64,
    /// Tensor handles a guest may hold at once.
    #[arg(long, default_value_t = 100_000)]
    pub max_tensors: u64,
    /// Grant the experiment a host directory: HOST[:GUEST][:ro|rw] (read-only by default). Repeatable.
    #[arg(long = "allow-dir")]
    pub allow_dirs: Vec<String>,
    /// Grant the experiment an environment variable: NAME (its value here) or NAME=VALUE. Repeatable.
    #[arg(long = "allow-env")]
    pub allow_env: Vec<String>,
    /// Arguments passed to the guest's `run`.
    #[arg(last = true)]
    pub guest_args: Vec<String>,
}

/// Runs the guest; returns the process exit code (0 ok, 1 guest error, 2 trap).
pub fn main(args: RunArgs) -> anyhow::Result<i32> {
    if !(args.timeout_s.is_finite() && args.timeout_s > 0.0) {
        anyhow::bail!("--timeout-s must be a positive number of seconds");
    }
    if !(args.plugin_timeout_s.is_finite() && args.plugin_timeout_s >= 0.0) {
        anyhow::bail!("--plugin-timeout-s must be a number of seconds ≥ 0");
    }
    crate::plugin::call::set_watchdog(
        (args.plugin_timeout_s > 0.0).then(|| Duration::from_secs_f64(args.plugin_timeout_s)),
    );
    let device = device::resolve(args.device)?;
    device::set_current(device);
    let plugins = Arc::new(PluginRegistry::open(&search_dirs(), &args.plugin)?);
    for skipped in &plugins.skipped {
        eprintln!("mxhost: warning: skipped a plugin: {skipped}");
    }
    let active = plugins.active();
    eprintln!(
        "mxhost: device {device}, plugin `{}` ({}) from {}",
        active.name,
        active.precision,
        active.path.display()
    );
    let limits = Limits {
        guest_memory_bytes: usize::try_from(args.max_memory_mib.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX),
        call_timeout: Duration::from_secs_f64(args.timeout_s),
        tensor_bytes: args.max_tensor_mib.saturating_mul(1 << 20),
        tensor_handles: args.max_tensors,
    };
    let metrics = Arc::new(Mutex::new(MetricsSink::new(
        std::io::stderr().is_terminal(),
    )));
    let shared = Arc::new(Shared {
        plugins,
        metrics: metrics.clone(),
    });
    let engine = crate::runtime::engine::new_engine()?;
    let cfg = RunConfig {
        guest: crate::python::guest_component(&args.guest)?,
        guards: args.guards.clone(),
        router: args.router.clone(),
        limits,
        capabilities: Capabilities::from_cli(&args.allow_dirs, &args.allow_env)?,
        args: args.guest_args.clone(),
    };
    let started = std::time::Instant::now();
    let outcome = run_experiment(&engine, shared, &cfg)?;
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("metrics.csv");
        let sink = metrics.lock().unwrap_or_else(|e| e.into_inner());
        sink.write_csv(&path)?;
        eprintln!("mxhost: wrote {}", path.display());
        for png in crate::plot::write_plots(&sink.points, dir)? {
            eprintln!("mxhost: wrote {}", png.display());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(match outcome {
        RunOutcome::Completed(summary) => {
            if !summary.is_empty() {
                println!("{summary}");
            }
            eprintln!("mxhost: {} finished in {secs:.2} s", args.guest.display());
            0
        }
        RunOutcome::Failed(message) => {
            eprintln!("mxhost: experiment failed: {message}");
            1
        }
        RunOutcome::Trapped(message) => {
            eprintln!("mxhost: {message}");
            2
        }
    })
}
