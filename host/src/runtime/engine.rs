//! The wasmtime engine: Cranelift with compiled-code caching, epoch interruption
//! driven by a ticker thread (so every call into a guest has a wall-clock deadline),
//! and component loading with readable errors.

use anyhow::Context;
use std::path::Path;
use std::time::Duration;
use wasmtime::component::Component;
use wasmtime::{Config, Engine, Store};

/// One epoch tick. Deadlines are rounded up to whole ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

pub fn new_engine() -> anyhow::Result<Engine> {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    // Copy-on-write memory images put each guest's initial heap in a sealed memfd.
    // Some sandboxed kernels refuse the seals now and then ("cannot add seals to the
    // memfd"), which failed an instantiation at random. A guest is instantiated once
    // per run, so copying its data segments instead costs milliseconds, not a trap.
    config.memory_init_cow(false);
    // Cache compiled guests on disk so the second run of a guest starts at once. A
    // cache that cannot be set up (read-only home, say) only costs compile time.
    if let Ok(cache) = wasmtime::Cache::from_file(None) {
        config.cache(Some(cache));
    }
    let engine = Engine::new(&config).map_err(anyhow::Error::from)?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("mxhost-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .context("starting the epoch ticker thread")?;
    Ok(engine)
}

pub fn load_component(engine: &Engine, path: &Path, what: &str) -> anyhow::Result<Component> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))?;
    Component::new(engine, &bytes)
        .map_err(anyhow::Error::from)
        .with_context(|| {
            format!(
                "{} is not a valid WebAssembly component ({what})",
                path.display()
            )
        })
}

/// Arm the deadline of the next call into `store`'s guest.
pub fn arm_deadline<T>(store: &mut Store<T>, timeout: Duration) {
    let ticks = timeout.as_nanos().div_ceil(EPOCH_TICK.as_nanos()).max(1) as u64;
    store.set_epoch_deadline(ticks);
}
