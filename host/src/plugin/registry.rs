//! The set of loaded plugins and which one is active.
//!
//! Plugins are discovered next to the `mxhost` executable and in `MXHOST_PLUGIN_PATH`
//! (files named `libmxhost_plugin_*.so`), or given by path. Selection is a cheap swap
//! of an `Arc`: each call takes a snapshot of the active plugin when it starts, so a
//! result is always computed by one plugin even if a guest switches concurrently.

use super::loader::{load_plugin, LoadError, LoadedPlugin};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// Environment variable: extra directories (colon-separated) searched for plugins.
pub const PLUGIN_PATH_ENV: &str = "MXHOST_PLUGIN_PATH";

pub struct PluginRegistry {
    plugins: Vec<Arc<LoadedPlugin>>,
    active: RwLock<Arc<LoadedPlugin>>,
    /// Files that looked like plugins but failed to load, with the reason.
    pub skipped: Vec<LoadError>,
}

/// Directories searched for plugins, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(extra) = std::env::var_os(PLUGIN_PATH_ENV) {
        dirs.extend(std::env::split_paths(&extra));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    dirs
}

fn discover(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let prefix = format!("{}mxhost_plugin_", std::env::consts::DLL_PREFIX);
    let mut found = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&prefix) && n.ends_with(std::env::consts::DLL_SUFFIX)
                })
            })
            .collect();
        files.sort();
        found.extend(files);
    }
    found
}

/// Load every plugin found in `dirs`; the first of each name wins (so
/// `MXHOST_PLUGIN_PATH` overrides the defaults). Failures are returned, not fatal.
pub fn load_all(dirs: &[PathBuf]) -> (Vec<Arc<LoadedPlugin>>, Vec<LoadError>) {
    let mut plugins: Vec<Arc<LoadedPlugin>> = Vec::new();
    let mut skipped = Vec::new();
    for path in discover(dirs) {
        match load_plugin(&path) {
            Ok(p) if plugins.iter().any(|q| q.name == p.name) => {}
            Ok(p) => plugins.push(Arc::new(p)),
            Err(e) => skipped.push(e),
        }
    }
    (plugins, skipped)
}

impl PluginRegistry {
    /// Load every plugin found in `dirs` and make `initial` active: a plugin name, or
    /// a path to a library (loaded if not already).
    pub fn open(dirs: &[PathBuf], initial: &str) -> anyhow::Result<Self> {
        let (mut plugins, skipped) = load_all(dirs);
        let looks_like_path =
            initial.contains('/') || initial.ends_with(std::env::consts::DLL_SUFFIX);
        let active = if looks_like_path {
            let p = Arc::new(load_plugin(Path::new(initial))?);
            // A plugin given by path replaces a discovered one of the same name.
            plugins.retain(|q| q.name != p.name);
            plugins.push(p.clone());
            p
        } else {
            plugins.iter().find(|p| p.name == initial).cloned().ok_or_else(|| {
                let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
                anyhow::anyhow!(
                    "no plugin named `{initial}` (found: {}; searched {}). Build them with `cargo build --release`, or pass --plugin PATH.so",
                    if names.is_empty() { "none".to_string() } else { names.join(", ") },
                    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
                )
            })?
        };
        Ok(PluginRegistry {
            plugins,
            active: RwLock::new(active),
            skipped,
        })
    }

    pub fn plugins(&self) -> &[Arc<LoadedPlugin>] {
        &self.plugins
    }

    /// The default plugin new guests start with (`--plugin`).
    pub fn active(&self) -> Arc<LoadedPlugin> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn find(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.plugins.iter().find(|p| p.name == name).cloned()
    }

    /// The plugin called `name`, or a message listing the loaded ones.
    pub fn find_or_explain(&self, name: &str) -> Result<Arc<LoadedPlugin>, String> {
        self.find(name).ok_or_else(|| {
            let names: Vec<&str> = self.plugins.iter().map(|p| p.name.as_str()).collect();
            format!("no plugin named `{name}`; loaded: {}", names.join(", "))
        })
    }

    /// Make `name` the default for guests started from now on. Tensors are untouched:
    /// they belong to the host.
    pub fn select(&self, name: &str) -> Result<(), String> {
        let p = self.find(name).ok_or_else(|| {
            let names: Vec<&str> = self.plugins.iter().map(|p| p.name.as_str()).collect();
            format!("no plugin named `{name}`; loaded: {}", names.join(", "))
        })?;
        *self.active.write().unwrap_or_else(|e| e.into_inner()) = p;
        Ok(())
    }

    /// The plugin that serves quantize/dequantize for a guest whose active plugin is
    /// `active`: that one if it can, otherwise the first loaded plugin that can (so MX
    /// tensors stay available under `bf16`).
    pub fn quantizer_for(&self, active: &Arc<LoadedPlugin>) -> Option<Arc<LoadedPlugin>> {
        let active = active.clone();
        if active.has(mxhost_plugin_abi::caps::QUANTIZE) {
            return Some(active);
        }
        self.plugins
            .iter()
            .find(|p| p.has(mxhost_plugin_abi::caps::QUANTIZE))
            .cloned()
    }
}
