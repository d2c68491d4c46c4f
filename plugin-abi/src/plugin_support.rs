//! Helpers for plugin authors: turn a Rust closure into a panic-safe ABI entry, write
//! error messages into the host's [`ErrorBuf`], and read descriptors defensively.
//!
//! A plugin entry typically reads:
//! ```ignore
//! unsafe extern "C" fn grouped_gemm(desc: *const GroupedGemmDesc, err: *mut ErrorBuf) -> u32 {
//!     guard_entry(err, || {
//!         let desc = unsafe { read_desc(desc)? };
//!         my_backend::grouped_gemm(desc)
//!     })
//! }
//! ```

use crate::{ErrorBuf, Status};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An error a plugin returns through the ABI: a status and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    pub status: Status,
    pub message: String,
}

impl PluginError {
    pub fn invalid(message: impl Into<String>) -> Self {
        PluginError {
            status: Status::InvalidArgument,
            message: message.into(),
        }
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        PluginError {
            status: Status::Unsupported,
            message: message.into(),
        }
    }
    pub fn backend(message: impl Into<String>) -> Self {
        PluginError {
            status: Status::BackendError,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message)
    }
}

impl std::error::Error for PluginError {}

pub type PluginResult<T> = Result<T, PluginError>;

/// Write `message` into `err` (truncated at a UTF-8 boundary). A null or malformed
/// buffer is ignored: the status code alone still reaches the host.
///
/// # Safety
/// `err` is null or points to an `ErrorBuf` whose `data` is valid for `capacity` bytes.
pub unsafe fn write_error(err: *mut ErrorBuf, message: &str) {
    if err.is_null() {
        return;
    }
    // SAFETY: non-null by the check above; validity is the caller's precondition.
    let buf = unsafe { &mut *err };
    if buf.struct_size < std::mem::size_of::<ErrorBuf>() || buf.data.is_null() {
        return;
    }
    let mut n = message.len().min(buf.capacity);
    while n > 0 && !message.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: n ≤ capacity, and data is valid for capacity bytes.
    unsafe { std::ptr::copy_nonoverlapping(message.as_ptr(), buf.data, n) };
    buf.len = n;
}

/// Run one plugin entry: catches panics (they must never unwind into the host), maps
/// `Err` to its status and writes the message. Returns the raw status for the ABI.
///
/// `err` is the pointer the host passed to the entry (null or a valid `ErrorBuf`, by
/// the ABI contract); it is written through only as [`write_error`] describes.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn guard_entry(err: *mut ErrorBuf, body: impl FnOnce() -> PluginResult<()>) -> u32 {
    let outcome = catch_unwind(AssertUnwindSafe(body));
    let (status, message) = match outcome {
        Ok(Ok(())) => return Status::Ok as u32,
        Ok(Err(e)) => (e.status, e.message),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".into());
            (Status::Panic, format!("plugin panicked: {what}"))
        }
    };
    // SAFETY: the host passes a valid ErrorBuf or null (ABI contract).
    unsafe { write_error(err, &message) };
    status as u32
}

/// Copy a descriptor out of a raw pointer after checking it is non-null and at least
/// as large as the struct this plugin was built with.
///
/// # Safety
/// `ptr` is null or points to a readable descriptor whose first field is `struct_size`.
pub unsafe fn read_desc<T: Copy>(ptr: *const T) -> PluginResult<T> {
    if ptr.is_null() {
        return Err(PluginError::invalid("null descriptor"));
    }
    // SAFETY: every ABI descriptor starts with `struct_size: usize`.
    let size = unsafe { *(ptr as *const usize) };
    if size < std::mem::size_of::<T>() {
        return Err(PluginError::invalid(format!(
            "descriptor struct_size {size} is smaller than {} (host built against an older ABI minor?)",
            std::mem::size_of::<T>()
        )));
    }
    // SAFETY: size checked; pointer valid by the caller's precondition.
    Ok(unsafe { *ptr })
}

/// Like [`read_desc`] for a descriptor that grew in a minor version: accepts any
/// `struct_size` from `min_size` (the size of the oldest supported minor) up, and
/// zero-fills the fields an older host did not write (zero must mean "absent" for
/// every appended field; see `QuantizeDesc::transposed`).
///
/// # Safety
/// As for [`read_desc`]; `T` must be valid when zero-filled (plain integers, pointers
/// and structs of them).
pub unsafe fn read_desc_grown<T: Copy>(ptr: *const T, min_size: usize) -> PluginResult<T> {
    if ptr.is_null() {
        return Err(PluginError::invalid("null descriptor"));
    }
    // SAFETY: every ABI descriptor starts with `struct_size: usize`.
    let size = unsafe { *(ptr as *const usize) };
    if size < min_size {
        return Err(PluginError::invalid(format!(
            "descriptor struct_size {size} is smaller than the oldest supported layout ({min_size})"
        )));
    }
    let n = size.min(std::mem::size_of::<T>());
    let mut out = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: the host wrote `size` ≥ `n` readable bytes; `out` has room for
    // size_of::<T>() ≥ `n`; a zero-filled T is valid by the caller's precondition.
    unsafe {
        std::ptr::copy_nonoverlapping(ptr as *const u8, out.as_mut_ptr() as *mut u8, n);
        Ok(out.assume_init())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(storage: &mut [u8]) -> ErrorBuf {
        ErrorBuf {
            struct_size: std::mem::size_of::<ErrorBuf>(),
            data: storage.as_mut_ptr(),
            capacity: storage.len(),
            len: 0,
        }
    }

    #[test]
    fn panics_become_status_and_message() {
        let mut storage = [0u8; 64];
        let mut eb = buf(&mut storage);
        let code = guard_entry(&mut eb, || panic!("boom"));
        assert_eq!(code, Status::Panic as u32);
        assert_eq!(&storage[..eb.len], b"plugin panicked: boom");
    }

    #[test]
    fn errors_are_truncated_on_char_boundaries() {
        let mut storage = [0u8; 4];
        let mut eb = buf(&mut storage);
        let code = guard_entry(&mut eb, || Err(PluginError::unsupported("aé€")));
        assert_eq!(code, Status::Unsupported as u32);
        assert_eq!(std::str::from_utf8(&storage[..eb.len]).unwrap(), "aé");
    }
}
