//! What a guest may touch outside its sandbox. Nothing by default; `--allow-dir` and
//! `--allow-env` grant a host directory (read-only unless `:rw`) or an environment
//! variable to the experiment guest only (guards and routers never get any).

use anyhow::{bail, Context};
use std::path::PathBuf;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirGrant {
    pub host: PathBuf,
    pub guest: String,
    pub writable: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub dirs: Vec<DirGrant>,
    pub env: Vec<(String, String)>,
}

impl DirGrant {
    /// `HOST[:GUEST][:ro|:rw]`; GUEST defaults to HOST's path, access to read-only.
    pub fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut parts: Vec<&str> = spec.split(':').collect();
        let mut writable = false;
        if let Some(last) = parts.last() {
            if *last == "ro" || *last == "rw" {
                writable = *last == "rw";
                parts.pop();
            }
        }
        let (host, guest) = match parts.as_slice() {
            [host] => (*host, *host),
            [host, guest] => (*host, *guest),
            _ => bail!("--allow-dir expects HOST[:GUEST][:ro|rw], got `{spec}`"),
        };
        if host.is_empty() || guest.is_empty() {
            bail!("--allow-dir expects HOST[:GUEST][:ro|rw], got `{spec}`");
        }
        let host = PathBuf::from(host);
        if !host.is_dir() {
            bail!("--allow-dir: {} is not a directory", host.display());
        }
        Ok(DirGrant {
            host,
            guest: guest.to_string(),
            writable,
        })
    }
}

/// `NAME` (value taken from mxhost's environment) or `NAME=VALUE`.
pub fn parse_env(spec: &str) -> anyhow::Result<(String, String)> {
    match spec.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        Some(_) => bail!("--allow-env expects NAME or NAME=VALUE, got `{spec}`"),
        None => {
            let v = std::env::var(spec)
                .with_context(|| format!("--allow-env {spec}: not set in mxhost's environment"))?;
            Ok((spec.to_string(), v))
        }
    }
}

impl Capabilities {
    pub fn from_cli(dirs: &[String], env: &[String]) -> anyhow::Result<Self> {
        Ok(Capabilities {
            dirs: dirs
                .iter()
                .map(|d| DirGrant::parse(d))
                .collect::<anyhow::Result<_>>()?,
            env: env
                .iter()
                .map(|e| parse_env(e))
                .collect::<anyhow::Result<_>>()?,
        })
    }

    /// Apply the grants to a WASI context builder (stdout/stderr are always inherited).
    pub fn apply(&self, builder: &mut WasiCtxBuilder) -> anyhow::Result<()> {
        for d in &self.dirs {
            let perms = if d.writable {
                FsPerms::ReadWrite
            } else {
                FsPerms::ReadOnly
            };
            builder
                .preopened_dir(&d.host, &d.guest, perms)
                .map_err(anyhow::Error::from)
                .with_context(|| format!("granting {}", d.host.display()))?;
        }
        for (k, v) in &self.env {
            builder.env(k, v);
        }
        Ok(())
    }
}

/// Clock resolution guests see: enough to time a training step, too coarse for
/// timing side channels on the host's native code.
pub const CLOCK_RESOLUTION: std::time::Duration = std::time::Duration::from_millis(1);

/// Wall clock rounded down to [`CLOCK_RESOLUTION`].
pub struct CoarseWallClock;

impl wasmtime_wasi::HostWallClock for CoarseWallClock {
    fn resolution(&self) -> std::time::Duration {
        CLOCK_RESOLUTION
    }
    fn now(&self) -> std::time::Duration {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let step = CLOCK_RESOLUTION.as_nanos();
        std::time::Duration::from_nanos(((t.as_nanos() / step) * step) as u64)
    }
}

/// Monotonic clock (nanoseconds since the guest started) rounded down to
/// [`CLOCK_RESOLUTION`].
pub struct CoarseMonotonicClock(std::time::Instant);

impl CoarseMonotonicClock {
    pub fn new() -> Self {
        CoarseMonotonicClock(std::time::Instant::now())
    }
}

impl Default for CoarseMonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl wasmtime_wasi::HostMonotonicClock for CoarseMonotonicClock {
    fn resolution(&self) -> u64 {
        CLOCK_RESOLUTION.as_nanos() as u64
    }
    fn now(&self) -> u64 {
        let step = CLOCK_RESOLUTION.as_nanos();
        ((self.0.elapsed().as_nanos() / step) * step) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_specs() {
        let tmp = std::env::temp_dir();
        let t = tmp.to_str().unwrap();
        assert_eq!(
            DirGrant::parse(t).unwrap(),
            DirGrant {
                host: tmp.clone(),
                guest: t.into(),
                writable: false
            }
        );
        let g = DirGrant::parse(&format!("{t}:/data:rw")).unwrap();
        assert_eq!((g.guest.as_str(), g.writable), ("/data", true));
        assert!(DirGrant::parse("/definitely/not/here").is_err());
        assert!(DirGrant::parse(&format!("{t}:a:b:c")).is_err());
        assert_eq!(parse_env("A=b=c").unwrap(), ("A".into(), "b=c".into()));
        assert!(parse_env("=x").is_err());
    }
}
