//! Per-guest state: the resource table holding tensor handles, the WASI context (no
//! files, network or environment), limits and usage, and what the guest shares with
//! the rest of the host (plugins, metrics, guards, router).

use super::guards::GuardChain;
use super::router::RouterInstance;
use crate::capabilities::Capabilities;
use crate::error::OpResult;
use crate::limits::{Limits, Usage};
use crate::metrics::MetricsSink;
use crate::plugin::LoadedPlugin;
use crate::plugin::PluginRegistry;
use crate::tensor::{MxTensor, Tensor};
use std::sync::{Arc, Mutex};
use wasmtime::component::{Resource, ResourceTable};
use wasmtime::StoreLimits;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// What every guest of one `mxhost` process shares.
pub struct Shared {
    pub plugins: Arc<PluginRegistry>,
    pub metrics: Arc<Mutex<MetricsSink>>,
}

pub struct HostState {
    pub table: ResourceTable,
    pub wasi: WasiCtx,
    pub store_limits: StoreLimits,
    pub limits: Limits,
    pub usage: Usage,
    pub shared: Arc<Shared>,
    pub guards: GuardChain,
    pub router: Option<RouterInstance>,
    /// This guest's active plugin: `select` changes it for this guest only, and each
    /// call takes one snapshot of it, so a result never mixes plugins.
    pub active: Arc<LoadedPlugin>,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// No sockets and no name lookup (WASI's defaults already deny every address; this
/// makes the policy explicit and independent of those defaults), and coarse clocks.
fn restrict(b: &mut wasmtime_wasi::WasiCtxBuilder) {
    // Clocks at 1 ms resolution (see `capabilities::CLOCK_RESOLUTION`).
    b.wall_clock(crate::capabilities::CoarseWallClock)
        .monotonic_clock(crate::capabilities::CoarseMonotonicClock::new());
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
}

/// A WASI context with nothing granted but stdout/stderr (for tables the guest prints).
pub fn sandboxed_wasi() -> WasiCtx {
    let mut b = wasmtime_wasi::WasiCtxBuilder::new();
    restrict(&mut b);
    b.inherit_stdout().inherit_stderr().build()
}

/// The sandboxed context plus the explicit grants of `caps`.
pub fn wasi_with(caps: &Capabilities) -> anyhow::Result<WasiCtx> {
    let mut b = wasmtime_wasi::WasiCtxBuilder::new();
    restrict(&mut b);
    b.inherit_stdout().inherit_stderr();
    caps.apply(&mut b)?;
    Ok(b.build())
}

pub fn store_limits(limits: &Limits) -> StoreLimits {
    wasmtime::StoreLimitsBuilder::new()
        .memory_size(limits.guest_memory_bytes)
        .instances(16)
        .tables(64)
        .memories(16)
        .trap_on_grow_failure(true)
        .build()
}

impl HostState {
    pub fn new(
        limits: Limits,
        shared: Arc<Shared>,
        guards: GuardChain,
        router: Option<RouterInstance>,
        wasi: WasiCtx,
    ) -> Self {
        let active = shared.plugins.active();
        HostState {
            active,
            table: ResourceTable::new(),
            wasi,
            store_limits: store_limits(&limits),
            limits,
            usage: Usage::default(),
            shared,
            guards,
            router,
        }
    }

    /// Check that `bytes` more would fit, without reserving (used before allocating).
    pub fn check_room(&self, bytes: u64) -> OpResult<()> {
        let mut probe = Usage {
            tensor_bytes: self.usage.tensor_bytes,
            tensor_handles: self.usage.tensor_handles,
        };
        probe.reserve(&self.limits, bytes)
    }

    pub fn push_tensor(&mut self, t: Tensor) -> OpResult<Resource<Tensor>> {
        self.usage.reserve(&self.limits, t.byte_len())?;
        let bytes = t.byte_len();
        self.table.push(t).map_err(|e| {
            self.usage.release(bytes);
            crate::error::OpError::new(crate::error::ErrorKind::LimitExceeded, e.to_string())
        })
    }

    pub fn push_mx(&mut self, q: MxTensor) -> OpResult<Resource<MxTensor>> {
        self.usage.reserve(&self.limits, q.byte_len())?;
        let bytes = q.byte_len();
        self.table.push(q).map_err(|e| {
            self.usage.release(bytes);
            crate::error::OpError::new(crate::error::ErrorKind::LimitExceeded, e.to_string())
        })
    }
}
