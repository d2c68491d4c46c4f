//! A router guest (world `router`) serving the experiment's `routing.route` import.
//! It runs in its own sandboxed store; a trap fails that one call with a clear error
//! and the router is reinstantiated for the next.

use super::bindings::router::{Router, RouterPre};
use super::bindings::routing_types::{RoutePlan, RouteRequest};
use super::engine::{arm_deadline, load_component};
use super::state::{sandboxed_wasi, store_limits};
use crate::limits::Limits;
use crate::metrics::MetricsSink;
use std::path::Path;
use std::sync::{Arc, Mutex};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store, StoreLimits};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub struct RouterState {
    table: ResourceTable,
    wasi: WasiCtx,
    limits: StoreLimits,
    pub metrics: Arc<Mutex<MetricsSink>>,
}

impl WasiView for RouterState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

pub struct RouterInstance {
    pre: RouterPre<RouterState>,
    store: Store<RouterState>,
    bindings: Router,
    limits: Limits,
}

fn new_store(
    engine: &Engine,
    limits: &Limits,
    metrics: Arc<Mutex<MetricsSink>>,
) -> Store<RouterState> {
    let state = RouterState {
        table: ResourceTable::new(),
        wasi: sandboxed_wasi(),
        limits: store_limits(limits),
        metrics,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limits);
    // A fresh store's epoch deadline has already passed: arm it before anything
    // (instantiation included) runs guest code.
    arm_deadline(&mut store, limits.call_timeout);
    store
}

impl RouterInstance {
    pub fn load(
        engine: &Engine,
        path: &Path,
        limits: &Limits,
        metrics: Arc<Mutex<MetricsSink>>,
    ) -> anyhow::Result<Self> {
        let component = load_component(engine, path, "router")?;
        let mut linker: Linker<RouterState> = Linker::new(engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(anyhow::Error::from)?;
        Router::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(anyhow::Error::from)?;
        let pre = RouterPre::new(linker.instantiate_pre(&component).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a router component (world `router`): {e}",
                path.display()
            )
        })?)
        .map_err(|e| {
            anyhow::anyhow!(
                "{} is not a router component (world `router`): {e}",
                path.display()
            )
        })?;
        let mut store = new_store(engine, limits, metrics);
        let bindings = pre.instantiate(&mut store).map_err(anyhow::Error::from)?;
        Ok(RouterInstance {
            pre,
            store,
            bindings,
            limits: limits.clone(),
        })
    }

    pub fn route(&mut self, request: &RouteRequest) -> Result<RoutePlan, String> {
        arm_deadline(&mut self.store, self.limits.call_timeout);
        match self.bindings.call_route(&mut self.store, request) {
            Ok(result) => result.map_err(|e| format!("router: {e}")),
            Err(trap) => {
                let engine = self.store.engine().clone();
                let metrics = self.store.data().metrics.clone();
                self.store = new_store(&engine, &self.limits, metrics);
                if let Ok(b) = self.pre.instantiate(&mut self.store) {
                    self.bindings = b;
                }
                Err(format!("router trapped: {trap:#}"))
            }
        }
    }
}

impl super::bindings::metrics::Host for RouterState {
    fn record(&mut self, name: String, step: u64, value: f64) -> wasmtime::Result<()> {
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(name, step, value);
        Ok(())
    }
    fn progress(&mut self, done: u64, total: u64, label: String) -> wasmtime::Result<()> {
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .progress(done, total, label);
        Ok(())
    }
    fn log(
        &mut self,
        level: super::bindings::metrics::Level,
        message: String,
    ) -> wasmtime::Result<()> {
        let level = super::host_api::level_name(level);
        self.metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log(level, &message);
        Ok(())
    }
}

impl super::bindings::routing_types::Host for RouterState {}
