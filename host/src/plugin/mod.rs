//! Native precision plugins behind the versioned C ABI (`mxhost-plugin-abi`).
pub mod call;
pub mod loader;
pub mod registry;

pub use loader::LoadedPlugin;
pub use registry::PluginRegistry;
