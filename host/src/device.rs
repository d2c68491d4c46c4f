//! Choosing the compute device. `auto` picks CUDA when this build has the CUDA device
//! layer (feature `cuda`, on by default), the driver library loads and a device exists;
//! otherwise the CPU. Asking for `cuda` where there is none is an error that says why.
//!
//! The chosen device is process-wide ([`set_current`] / [`current`]): tensors a guest
//! creates (and every op output) live there. Plugins see it in each `TensorView`
//! (`device`, `device_ordinal`) and dispatch to their backend for it.

use clap::ValueEnum;
use std::sync::atomic::{AtomicI32, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    /// CUDA when a GPU and its driver are there, the CPU otherwise.
    Auto,
    /// The CPU backends (exact references; slow on the anchor shapes).
    Cpu,
    /// The first CUDA GPU; an error when there is none.
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA device, by ordinal.
    Cuda(i32),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(i) => {
                write!(f, "cuda:{i}")?;
                #[cfg(feature = "cuda")]
                if let Ok(d) = crate::cuda::probe() {
                    write!(f, " ({})", d.name)?;
                }
                Ok(())
            }
        }
    }
}

/// Why CUDA is not usable by this host, or `None` when it is.
pub fn cuda_unavailable_reason() -> Option<String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe().err()
    }
    #[cfg(not(feature = "cuda"))]
    {
        Some("this mxhost build has no CUDA device layer (built without the `cuda` feature)".into())
    }
}

/// The CUDA device when usable.
pub fn cuda_device() -> Result<Device, String> {
    #[cfg(feature = "cuda")]
    {
        crate::cuda::probe().map(|d| Device::Cuda(d.ordinal))
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(cuda_unavailable_reason().unwrap_or_default())
    }
}

pub fn resolve(choice: DeviceChoice) -> anyhow::Result<Device> {
    match choice {
        DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Auto => Ok(cuda_device().unwrap_or(Device::Cpu)),
        DeviceChoice::Cuda => match cuda_device() {
            Ok(d) => Ok(d),
            Err(why) => anyhow::bail!("--device cuda was requested but CUDA is not available: {why}. Use --device cpu or auto."),
        },
    }
}

/// -1 = CPU, else the CUDA ordinal.
static CURRENT: AtomicI32 = AtomicI32::new(-1);

/// Make `device` the one new tensors are created on.
/// Wait until every operation queued on `device`'s stream is done (no-op on the CPU).
pub fn synchronize(device: Device) -> crate::error::OpResult<()> {
    match device {
        Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => crate::cuda::device()?.synchronize(),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(crate::error::OpError::unsupported(
            "this build has no CUDA device layer",
        )),
    }
}

pub fn set_current(device: Device) {
    CURRENT.store(
        match device {
            Device::Cpu => -1,
            Device::Cuda(i) => i,
        },
        Ordering::SeqCst,
    );
}

/// The device new tensors are created on (CPU unless [`set_current`] chose another).
pub fn current() -> Device {
    match CURRENT.load(Ordering::SeqCst) {
        i if i < 0 => Device::Cpu,
        i => Device::Cuda(i),
    }
}
