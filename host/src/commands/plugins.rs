//! `mxhost plugins`: what plugins and devices this host can use.

use crate::plugin::registry::{load_all, search_dirs};

pub fn main() -> anyhow::Result<()> {
    let dirs = search_dirs();
    println!(
        "plugin search path: {}",
        dirs.iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":")
    );
    let (plugins, skipped) = load_all(&dirs);
    if plugins.is_empty() {
        println!(
            "no plugins found: build them with `cargo build --release`, or set MXHOST_PLUGIN_PATH"
        );
    } else {
        println!(
            "{:<8} {:<36} {:<8} {:<6} {:<50} path",
            "name", "precision", "version", "abi", "capabilities"
        );
        for p in &plugins {
            println!(
                "{:<8} {:<36} {:<8} {:<6} {:<50} {}",
                p.name,
                p.precision,
                p.version,
                format!("{}.{}", mxhost_plugin_abi::ABI_MAJOR, p.abi_minor),
                p.capability_names().join(","),
                p.path.display()
            );
        }
    }
    for e in &skipped {
        println!("skipped: {e}");
    }
    println!("devices: cpu (always)");
    #[cfg(feature = "cuda")]
    match crate::cuda::probe() {
        Ok(d) => println!(
            "         cuda:{} {} (sm_{}{}, {} SMs, {:.1} GiB, driver {}.{})",
            d.ordinal,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sms,
            d.total_mem as f64 / (1u64 << 30) as f64,
            d.driver_version / 1000,
            (d.driver_version % 1000) / 10
        ),
        Err(why) => println!("         cuda unavailable: {why}"),
    }
    #[cfg(not(feature = "cuda"))]
    if let Some(why) = crate::device::cuda_unavailable_reason() {
        println!("         cuda unavailable: {why}");
    }
    Ok(())
}
