//! Sandbox limits: what a guest may consume, with defaults and the accounting of
//! host-side tensor memory (which the Wasm store's memory limit does not see).

use crate::error::{ErrorKind, OpError, OpResult};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest linear memory a guest may grow to.
    pub guest_memory_bytes: usize,
    /// Wall-clock deadline of one call into a guest (`run`, `route`, `check`).
    pub call_timeout: Duration,
    /// Total bytes of host tensors a guest may hold at once.
    pub tensor_bytes: u64,
    /// Number of tensor handles a guest may hold at once.
    pub tensor_handles: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            guest_memory_bytes: 1 << 30,
            call_timeout: Duration::from_secs(600),
            tensor_bytes: 16 << 30,
            tensor_handles: 100_000,
        }
    }
}

/// Live usage against [`Limits`].
#[derive(Debug, Default)]
pub struct Usage {
    pub tensor_bytes: u64,
    pub tensor_handles: u64,
}

impl Usage {
    /// Reserve room for one more handle of `bytes`, or say which limit it would break.
    pub fn reserve(&mut self, limits: &Limits, bytes: u64) -> OpResult<()> {
        if self.tensor_handles + 1 > limits.tensor_handles {
            return Err(OpError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "tensor handle limit reached: {} handles (--max-tensors)",
                    limits.tensor_handles
                ),
            ));
        }
        let total = self.tensor_bytes.saturating_add(bytes);
        if total > limits.tensor_bytes {
            return Err(OpError::new(
                ErrorKind::LimitExceeded,
                format!(
                    "tensor memory limit exceeded: {} bytes held + {bytes} requested > {} (--max-tensor-mib)",
                    self.tensor_bytes, limits.tensor_bytes
                ),
            ));
        }
        self.tensor_handles += 1;
        self.tensor_bytes = total;
        Ok(())
    }

    pub fn release(&mut self, bytes: u64) {
        self.tensor_handles = self.tensor_handles.saturating_sub(1);
        self.tensor_bytes = self.tensor_bytes.saturating_sub(bytes);
    }
}
