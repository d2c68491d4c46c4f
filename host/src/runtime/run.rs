//! Running one experiment guest: instantiate it with the sandbox, call `run(args)`
//! under a deadline, and report how it ended. The store (and with it every tensor the
//! guest still holds) is dropped when this returns, whatever happened.

use super::bindings::experiment::{Experiment, ExperimentPre};
use super::engine::{arm_deadline, load_component};
use super::guards::GuardChain;
use super::router::RouterInstance;
use super::state::{HostState, Shared};
use crate::capabilities::Capabilities;
use crate::limits::Limits;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Engine, Store};

/// How a guest run ended.
#[derive(Debug)]
pub enum RunOutcome {
    /// `run` returned `ok(summary)`.
    Completed(String),
    /// `run` returned `err(message)`.
    Failed(String),
    /// The guest trapped, ran out of time or memory; the message says which.
    Trapped(String),
}

pub struct RunConfig {
    pub guest: PathBuf,
    pub guards: Vec<PathBuf>,
    pub router: Option<PathBuf>,
    pub limits: Limits,
    /// Directories and environment granted to the experiment (none by default).
    pub capabilities: Capabilities,
    pub args: Vec<String>,
}

/// Prepare an experiment component: compile and link once, instantiate per run.
pub fn prepare(engine: &Engine, guest: &Path) -> anyhow::Result<ExperimentPre<HostState>> {
    let component = load_component(engine, guest, "experiment")?;
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(anyhow::Error::from)?;
    Experiment::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(anyhow::Error::from)?;
    let pre = linker.instantiate_pre(&component).map_err(|e| {
        anyhow::anyhow!("{} cannot be linked as an experiment: {e}", guest.display())
    })?;
    ExperimentPre::new(pre).map_err(|e| {
        anyhow::anyhow!(
            "{} is not an experiment component (world `experiment`): {e}",
            guest.display()
        )
    })
}

pub fn run_experiment(
    engine: &Engine,
    shared: Arc<Shared>,
    cfg: &RunConfig,
) -> anyhow::Result<RunOutcome> {
    let pre = prepare(engine, &cfg.guest)?;
    let guards = GuardChain::load(engine, &cfg.guards, &cfg.limits)?;
    let router = match &cfg.router {
        Some(p) => Some(RouterInstance::load(
            engine,
            p,
            &cfg.limits,
            shared.metrics.clone(),
        )?),
        None => None,
    };
    let wasi = super::state::wasi_with(&cfg.capabilities)?;
    let state = HostState::new(cfg.limits.clone(), shared.clone(), guards, router, wasi);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.store_limits);
    arm_deadline(&mut store, cfg.limits.call_timeout);
    let outcome = match pre.instantiate(&mut store) {
        Err(e) => RunOutcome::Trapped(describe_trap(&e, &cfg.limits)),
        Ok(bindings) => match bindings.call_run(&mut store, &cfg.args) {
            Ok(Ok(summary)) => RunOutcome::Completed(summary),
            Ok(Err(message)) => RunOutcome::Failed(message),
            Err(e) => RunOutcome::Trapped(describe_trap(&e, &cfg.limits)),
        },
    };
    // The guest's tensors, instance and memories go with the store.
    drop(store);
    release_freed_memory();
    shared
        .metrics
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    Ok(outcome)
}

/// Hands the memory a finished run freed back to the OS. glibc raises its mmap threshold
/// after the first large free, so later multi-MiB tensors come from heap arenas whose freed
/// pages stay resident: without a trim, a host that runs many guests keeps the peak of
/// whichever run hoarded most (tests/soak.rs saw 97 → 264 MiB across identical rounds).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the OS; it touches no live
    // allocation and is thread-safe (it takes each arena's lock).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Name the limit behind a trap when there is one.
fn describe_trap(e: &wasmtime::Error, limits: &Limits) -> String {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => format!(
            "guest exceeded its deadline of {:.1} s (--timeout-s) and was stopped",
            limits.call_timeout.as_secs_f64()
        ),
        Some(wasmtime::Trap::OutOfFuel) => "guest ran out of fuel".into(),
        _ => {
            let text = format!("{e:?}");
            if text.contains("memory") && text.contains("limit")
                || text.contains("forcing trap when growing memory")
            {
                format!(
                    "guest exceeded its memory limit of {} MiB (--max-memory-mib): {e:#}",
                    limits.guest_memory_bytes >> 20
                )
            } else {
                format!("guest trapped: {text}")
            }
        }
    }
}
