//! Loading a native precision plugin: `dlopen`, find the entry symbol, check the magic
//! number, ABI version and table size, and read its identity.
//!
//! Every failure is a [`LoadError`] naming the file and what was wrong; nothing here
//! can crash the host on a bad file (except a library whose own initialisers crash,
//! which no loader can prevent). Libraries are never unloaded: a plugin may have
//! registered CUDA kernels or thread-local destructors (see the toolchain notes).

use mxhost_plugin_abi::{
    caps, PluginApi, PluginEntryFn, ABI_MAJOR, ABI_MINOR, ENTRY_SYMBOL, PLUGIN_MAGIC,
};
use std::ffi::CStr;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin file {0} does not exist")]
    NotFound(PathBuf),
    #[error("{path} is not a loadable library: {reason}")]
    NotALibrary { path: PathBuf, reason: String },
    #[error(
        "{path} does not export the entry symbol `mxhost_plugin_entry`: is it an mxhost plugin?"
    )]
    MissingEntry { path: PathBuf },
    #[error("{path}: the entry symbol returned a null table")]
    NullTable { path: PathBuf },
    #[error(
        "{path}: bad magic number {found:#x} (expected {expected:#x}): not an mxhost plugin table"
    )]
    BadMagic {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error("{path}: incompatible plugin ABI {found_major}.{found_minor}; this host speaks {expected}.x (minor ≤ {ABI_MINOR} understood)")]
    IncompatibleAbi {
        path: PathBuf,
        expected: u32,
        found_major: u32,
        found_minor: u32,
    },
    #[error("{path}: plugin table is {found} bytes, smaller than the {expected} bytes ABI {ABI_MAJOR}.0 requires")]
    TableTooSmall {
        path: PathBuf,
        expected: usize,
        found: usize,
    },
    #[error("{path}: plugin name is missing or not UTF-8")]
    BadName { path: PathBuf },
}

/// A loaded plugin: its table and identity. Cheap to share (`Arc<LoadedPlugin>`).
pub struct LoadedPlugin {
    pub name: String,
    pub precision: String,
    pub version: String,
    pub capabilities: u64,
    pub path: PathBuf,
    pub abi_minor: u32,
    /// ABI 1.3's `annex_words`, when the table has it and it is set.
    pub annex_words: Option<mxhost_plugin_abi::AnnexWordsFn>,
    /// ABI 1.7's `fill_bytes`, when the table has it and it is set.
    pub fill_bytes: Option<mxhost_plugin_abi::EntryFn<mxhost_plugin_abi::FillBytesDesc>>,
    api: &'static PluginApi,
}

impl LoadedPlugin {
    pub fn api(&self) -> &'static PluginApi {
        self.api
    }
    pub fn has(&self, cap: u64) -> bool {
        self.capabilities & cap == cap
    }
    /// Capability names for display and for the guest's `plugin-info`.
    pub fn capability_names(&self) -> Vec<String> {
        let table = [
            (caps::QUANTIZE, "quantize"),
            (caps::GROUPED_GEMM, "grouped-gemm"),
            (caps::MX_OPERANDS, "mx-operands"),
            (caps::DENSE_OPERANDS, "dense-operands"),
            (caps::CHAINED_GEMM, "chained-gemm"),
            (caps::DEVICE_CPU, "cpu"),
            (caps::DEVICE_CUDA, "cuda"),
            (caps::DEVICE_HIP, "hip"),
        ];
        table
            .iter()
            .filter(|(c, _)| self.has(*c))
            .map(|(_, n)| n.to_string())
            .collect()
    }
}

fn c_string(ptr: *const std::ffi::c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the ABI requires NUL-terminated static strings; null was excluded above.
    unsafe { CStr::from_ptr(ptr) }
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Load and check one plugin library.
pub fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    if !path.exists() {
        return Err(LoadError::NotFound(path.to_path_buf()));
    }
    // SAFETY: loading a library runs its initialisers; the user chose this file as a
    // plugin. Everything after this point is checked before it is trusted.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| LoadError::NotALibrary {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    // Never unload (see the module docs): the library lives as long as the process.
    let lib: &'static libloading::Library = Box::leak(Box::new(lib));
    // SAFETY: the symbol's type is fixed by the ABI; a library exporting the name with
    // another type is not an mxhost plugin and breaks the contract it claims.
    let entry: libloading::Symbol<PluginEntryFn> =
        unsafe { lib.get(ENTRY_SYMBOL) }.map_err(|_| LoadError::MissingEntry {
            path: path.to_path_buf(),
        })?;
    // SAFETY: calling the entry is the ABI's only way in; it takes no arguments.
    let table = unsafe { entry() };
    if table.is_null() {
        return Err(LoadError::NullTable {
            path: path.to_path_buf(),
        });
    }
    // Read the header fields one by one before trusting the table's size.
    // SAFETY: every table version starts with magic, major, minor, struct_size.
    let (magic, major, minor, size) = unsafe {
        let header = table as *const u8;
        (
            std::ptr::read_unaligned(header as *const u64),
            std::ptr::read_unaligned(header.add(8) as *const u32),
            std::ptr::read_unaligned(header.add(12) as *const u32),
            std::ptr::read_unaligned(header.add(16) as *const usize),
        )
    };
    let path_buf = path.to_path_buf();
    if magic != PLUGIN_MAGIC {
        return Err(LoadError::BadMagic {
            path: path_buf,
            expected: PLUGIN_MAGIC,
            found: magic,
        });
    }
    if major != ABI_MAJOR {
        return Err(LoadError::IncompatibleAbi {
            path: path_buf,
            expected: ABI_MAJOR,
            found_major: major,
            found_minor: minor,
        });
    }
    // Tables grow by appending (ABI 1.3 added `annex_words`): the 1.0 layout is the least.
    let expected = mxhost_plugin_abi::PLUGIN_API_SIZE_1_0;
    if size < expected {
        return Err(LoadError::TableTooSmall {
            path: path_buf,
            expected,
            found: size,
        });
    }
    // A 1.0-1.2 table ends before `annex_words` (1.3-1.6 before `fill_bytes`): copy what the table has into a zeroed
    // one of today's layout (a missing function pointer reads as None) and keep that.
    let n = size.min(std::mem::size_of::<PluginApi>());
    let mut grown = std::mem::MaybeUninit::<PluginApi>::zeroed();
    // SAFETY: magic, major version and size checked: the library's static table has `size`
    // ≥ `n` readable bytes; a zeroed PluginApi is valid (null pointers, None entries are
    // overwritten by the copy for every field the table has, and the three mandatory
    // entries are inside the 1.0 layout).
    let api: &'static PluginApi = unsafe {
        std::ptr::copy_nonoverlapping(table as *const u8, grown.as_mut_ptr() as *mut u8, n);
        Box::leak(Box::new(grown.assume_init()))
    };
    let annex_words = if minor >= 3 { api.annex_words } else { None };
    let fill_bytes = if minor >= 7 { api.fill_bytes } else { None };
    let name = c_string(api.name)
        .filter(|n| !n.is_empty())
        .ok_or(LoadError::BadName {
            path: path_buf.clone(),
        })?;
    Ok(LoadedPlugin {
        name,
        precision: c_string(api.precision).unwrap_or_default(),
        version: c_string(api.version).unwrap_or_default(),
        capabilities: api.capabilities,
        path: path_buf,
        abi_minor: minor,
        annex_words,
        fill_bytes,
        api,
    })
}
