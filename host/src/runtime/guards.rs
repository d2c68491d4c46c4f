//! Dispatch guards: untrusted guest components (world `guard`) that accept or reject
//! each quantize/GEMM request before the host calls a plugin. Each guard runs in its
//! own sandboxed store with the same limits as experiments and a deadline per check.
//! A guard that traps or times out rejects the call (fail closed) and is reinstantiated.

use super::bindings::dispatch::DispatchRequest;
use super::bindings::guard::{Guard, GuardPre};
use super::engine::{arm_deadline, load_component};
use super::state::{sandboxed_wasi, store_limits};
use crate::limits::Limits;
use std::path::Path;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimits};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub struct GuardState {
    table: ResourceTable,
    wasi: WasiCtx,
    limits: StoreLimits,
}

impl WasiView for GuardState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn new_store(engine: &Engine, limits: &Limits) -> Store<GuardState> {
    let mut store = Store::new(
        engine,
        GuardState {
            table: ResourceTable::new(),
            wasi: sandboxed_wasi(),
            limits: store_limits(limits),
        },
    );
    store.limiter(|s| &mut s.limits);
    // A fresh store's epoch deadline has already passed: arm it before anything
    // (instantiation included) runs guest code.
    arm_deadline(&mut store, limits.call_timeout);
    store
}

struct GuardInstance {
    name: String,
    pre: GuardPre<GuardState>,
    store: Store<GuardState>,
    bindings: Guard,
}

/// The configured guards, run in order; the first rejection wins.
#[derive(Default)]
pub struct GuardChain {
    guards: Vec<GuardInstance>,
    limits: Limits,
}

impl GuardChain {
    pub fn load(
        engine: &Engine,
        paths: &[impl AsRef<Path>],
        limits: &Limits,
    ) -> anyhow::Result<Self> {
        let mut guards = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let component = load_component(engine, path, "guard")?;
            let mut linker: Linker<GuardState> = Linker::new(engine);
            wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(anyhow::Error::from)?;
            let pre = GuardPre::new(linker.instantiate_pre(&component).map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a guard component (world `guard`): {e}",
                    path.display()
                )
            })?)
            .map_err(|e| {
                anyhow::anyhow!(
                    "{} is not a guard component (world `guard`): {e}",
                    path.display()
                )
            })?;
            let mut store = new_store(engine, limits);
            let bindings = pre.instantiate(&mut store).map_err(anyhow::Error::from)?;
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("guard")
                .to_string();
            guards.push(GuardInstance {
                name,
                pre,
                store,
                bindings,
            });
        }
        Ok(GuardChain {
            guards,
            limits: limits.clone(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// `Err(message)` when a guard rejects (or fails), naming the guard.
    pub fn check(&mut self, request: &DispatchRequest) -> Result<(), String> {
        let timeout = self
            .limits
            .call_timeout
            .min(std::time::Duration::from_secs(10));
        for g in &mut self.guards {
            arm_deadline(&mut g.store, timeout);
            match g.bindings.call_check(&mut g.store, request) {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => {
                    return Err(format!("guard `{}` rejected the call: {reason}", g.name))
                }
                Err(trap) => {
                    // The instance is unusable after a trap: start a fresh one.
                    let engine = g.store.engine().clone();
                    g.store = new_store(&engine, &self.limits);
                    if let Ok(b) = g.pre.instantiate(&mut g.store) {
                        g.bindings = b;
                    }
                    return Err(format!(
                        "guard `{}` failed, so the call is rejected: {trap:#}",
                        g.name
                    ));
                }
            }
        }
        Ok(())
    }
}
