//! Choosing the compute device. `auto` picks CUDA when a CUDA backend is built and a
//! GPU is present, otherwise the CPU; asking for `cuda` where there is none is an
//! error that says why.

use clap::ValueEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Cpu,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
        }
    }
}

/// Why CUDA is not usable by this host build, or `None` when it is.
pub fn cuda_unavailable_reason() -> Option<String> {
    Some("this mxhost build keeps tensors in host memory only (the CUDA device layer is not built yet)".into())
}

pub fn resolve(choice: DeviceChoice) -> anyhow::Result<Device> {
    match choice {
        DeviceChoice::Auto | DeviceChoice::Cpu => Ok(Device::Cpu),
        DeviceChoice::Cuda => match cuda_unavailable_reason() {
            Some(why) => anyhow::bail!("--device cuda was requested but CUDA is not available: {why}. Use --device cpu or auto."),
            None => Ok(Device::Cpu),
        },
    }
}
