//! `mxhost quantize`: quantize every floating-point tensor of a safetensors file with
//! an MX recipe, so anyone can check our numerics with their own tools. Data is stored
//! as F8_E4M3 / F8_E5M2 with the input's shape under the input's name, scales as U8
//! E8M0 bytes under `<name>.scales`; the recipe is recorded in the file's metadata.

use crate::ops;
use crate::plugin::registry::{search_dirs, PluginRegistry};
use crate::tensor::{CpuBuffer, Storage, Tensor};
use anyhow::{bail, Context};
use clap::ValueEnum;
use mxhost_plugin_abi::{BlockLayout, DType, MxFormat, ScaleMode};
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::HashMap;
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    E4m3,
    E5m2,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    Rceil,
    Floor,
    Even,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BlockArg {
    /// 1×32 vectors along --axis.
    #[value(name = "1x32")]
    Vector,
    /// 32×32 tiles over the last two axes.
    #[value(name = "32x32")]
    Tile,
}

#[derive(Debug, clap::Args)]
pub struct QuantizeArgs {
    #[arg(long)]
    pub input: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    /// Axis the 1×32 blocks run along (negative counts from the end).
    #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
    pub axis: i64,
    #[arg(long, value_enum, default_value_t = FormatArg::E4m3)]
    pub format: FormatArg,
    #[arg(long, value_enum, default_value_t = ModeArg::Rceil)]
    pub mode: ModeArg,
    #[arg(long, value_enum, default_value_t = BlockArg::Vector)]
    pub block: BlockArg,
    /// Plugin that quantizes.
    #[arg(long, default_value = "mxfp8")]
    pub plugin: String,
}

pub fn main(args: QuantizeArgs) -> anyhow::Result<()> {
    let registry = PluginRegistry::open(&search_dirs(), &args.plugin)?;
    let plugin = registry
        .quantizer_for(&registry.active())
        .context("no loaded plugin can quantize")?;
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .with_context(|| format!("{} is not a safetensors file", args.input.display()))?;
    let (format, mode) = (
        match args.format {
            FormatArg::E4m3 => MxFormat::E4m3,
            FormatArg::E5m2 => MxFormat::E5m2,
        },
        match args.mode {
            ModeArg::Rceil => ScaleMode::Rceil,
            ModeArg::Floor => ScaleMode::Floor,
            ModeArg::Even => ScaleMode::Even,
        },
    );
    let mut outputs: Vec<(String, StDtype, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_owned).collect();
    names.sort();
    for name in names {
        let view = st.tensor(&name)?;
        let dtype = match view.dtype() {
            StDtype::F32 => DType::F32,
            StDtype::BF16 => DType::Bf16,
            other => {
                eprintln!("mxhost: skipping `{name}` ({other:?}: only F32 and BF16 tensors are quantized)");
                continue;
            }
        };
        let shape: Vec<u64> = view.shape().iter().map(|&d| d as u64).collect();
        if shape.is_empty() {
            eprintln!("mxhost: skipping scalar `{name}`");
            continue;
        }
        let rank = shape.len() as i64;
        let block = match args.block {
            BlockArg::Tile => BlockLayout::tile(),
            BlockArg::Vector => {
                let axis = if args.axis < 0 {
                    rank + args.axis
                } else {
                    args.axis
                };
                if axis < 0 || axis >= rank {
                    bail!(
                        "--axis {} is out of range for `{name}` of rank {rank}",
                        args.axis
                    );
                }
                BlockLayout::vector(axis as u32)
            }
        };
        let mut buf = CpuBuffer::zeroed(view.data().len());
        buf.as_bytes_mut().copy_from_slice(view.data());
        let input = Tensor::new(shape, dtype, Storage::Cpu(buf));
        let q = ops::quantize(&plugin, &input, format, mode, block)
            .map_err(|e| anyhow::anyhow!("`{name}`: {e}"))?;
        let to_usize = |s: &[u64]| s.iter().map(|&d| d as usize).collect::<Vec<_>>();
        let fp8 = if format == MxFormat::E4m3 {
            StDtype::F8_E4M3
        } else {
            StDtype::F8_E5M2
        };
        outputs.push((
            name.clone(),
            fp8,
            to_usize(&q.data.shape),
            q.data.cpu_bytes().unwrap().to_vec(),
        ));
        outputs.push((
            format!("{name}.scales"),
            StDtype::U8,
            to_usize(&q.scales.shape),
            q.scales.cpu_bytes().unwrap().to_vec(),
        ));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = outputs
        .iter()
        .map(|(n, d, s, b)| {
            Ok((
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b)?,
            ))
        })
        .collect::<Result<_, safetensors::SafeTensorError>>()?;
    let mut meta = HashMap::new();
    meta.insert(
        "mx.format".to_string(),
        format!("{:?}", args.format).to_lowercase(),
    );
    meta.insert(
        "mx.mode".to_string(),
        format!("{:?}", args.mode).to_lowercase(),
    );
    meta.insert(
        "mx.block".to_string(),
        match args.block {
            BlockArg::Tile => "32x32".to_string(),
            BlockArg::Vector => format!("1x32 axis {}", args.axis),
        },
    );
    meta.insert(
        "mx.scales".to_string(),
        "E8M0 bytes: 2^(b-127), 0xFF = NaN; `<name>.scales`".to_string(),
    );
    meta.insert("mx.plugin".to_string(), plugin.name.clone());
    safetensors::serialize_to_file(views, Some(meta), &args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!(
        "mxhost: wrote {} tensors to {}",
        outputs.len(),
        args.output.display()
    );
    Ok(())
}
