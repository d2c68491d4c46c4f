//! Host operations that go through a plugin: quantize, dequantize and the three
//! grouped GEMM passes. Each one validates, allocates its output in host-owned
//! storage, and calls the plugin with views of the host's buffers.
//!
//! Shared by the guest-facing runtime and the `mxhost quantize` command.

use crate::device::Device;
use crate::error::{OpError, OpResult};
use crate::plugin::call::{self, KeepAlive};
use crate::plugin::LoadedPlugin;
use crate::tensor::{
    BytesOnDemand, KeptPartner, MxAnnex, MxTensor, MxValues, Storage, Tensor, WgradGrid,
};
use crate::validate::{self, MxDesc, OperandDesc};
use mxhost_plugin_abi::{
    caps, BlockLayout, DType, DequantizeDesc, FillBytesDesc, GemmOptions, GemmPass,
    GroupedGemmDesc, MxFormat, Operand, OperandKind, QuantizeDesc, ScaleMode, TensorView,
    WeightLayout,
};
use std::sync::Arc;

/// Allocate a zeroed tensor on the current device ([`crate::device::current`]).
pub fn alloc(shape: &[u64], dtype: DType) -> OpResult<Tensor> {
    alloc_on(crate::device::current(), shape, dtype)
}

/// Allocate a zeroed tensor on `device`.
pub fn alloc_on(device: Device, shape: &[u64], dtype: DType) -> OpResult<Tensor> {
    let bytes = byte_len(shape, dtype)?;
    Ok(Tensor::new(
        shape.to_vec(),
        dtype,
        Storage::zeroed_on(device, bytes)?,
    ))
}

/// Bytes of a `shape` × `dtype` tensor, checked against overflow and this host's `usize`.
fn byte_len(shape: &[u64], dtype: DType) -> OpResult<usize> {
    let (_, bytes) = validate::checked_size(shape, dtype)?;
    usize::try_from(bytes).map_err(|_| OpError::invalid("tensor too large for this host"))
}

/// Storage for a plugin's output. On the CPU it is zeroed. On CUDA it is left
/// uninitialized: the ABI requires a plugin to write every element of its outputs
/// (padding rows and empty experts included), and clearing first is a full extra write
/// pass (~5 % of a GEMM's time, a third of a quantization's). With
/// `MXHOST_POISON_OUTPUTS=1` CUDA outputs are filled with 0xFF bytes first (NaN in every
/// dtype), so a test run shows any element a plugin failed to write.
fn output_on(device: Device, shape: &[u64], dtype: DType) -> OpResult<Tensor> {
    match device {
        Device::Cpu => alloc_on(device, shape, dtype),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => {
            let bytes = byte_len(shape, dtype)?;
            let dev = crate::cuda::device()?;
            let buf = if poison_outputs() {
                dev.filled(bytes, 0xFF)?
            } else {
                dev.alloc(bytes)?
            };
            Ok(Tensor::new(shape.to_vec(), dtype, Storage::Cuda(buf)))
        }
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => alloc_on(device, shape, dtype),
    }
}

#[cfg(feature = "cuda")]
fn poison_outputs() -> bool {
    static POISON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *POISON.get_or_init(|| std::env::var("MXHOST_POISON_OUTPUTS").as_deref() == Ok("1"))
}

/// The backend stream for work on `device` (the host's CUDA stream, or null).
pub fn stream_for(device: Device) -> OpResult<*mut std::ffi::c_void> {
    match device {
        Device::Cpu => Ok(std::ptr::null_mut()),
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => Ok(crate::cuda::device()?.stream_ptr()),
        #[cfg(not(feature = "cuda"))]
        Device::Cuda(_) => Err(OpError::unsupported(
            "this mxhost build has no CUDA support",
        )),
    }
}

/// Whether `plugin` cannot work on `device` directly, so the host stages the call
/// through host memory (inputs copied to the CPU, the output copied back). This keeps
/// CPU-only plugins (e.g. `bf16`) usable on a GPU run, at the cost of the copies.
fn needs_staging(plugin: &LoadedPlugin, device: Device) -> bool {
    matches!(device, Device::Cuda(_)) && !plugin.has(caps::DEVICE_CUDA)
}

/// Quantize `x` with the given recipe.
pub fn quantize(
    plugin: &LoadedPlugin,
    x: &Tensor,
    format: MxFormat,
    mode: ScaleMode,
    block: BlockLayout,
) -> OpResult<MxTensor> {
    Ok(quantize_with(plugin, x, format, mode, block, QuantizeExtras::default())?.0)
}

/// What a quantize call writes besides the MX tensor itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuantizeExtras {
    /// The same MX tensor with its last two axes swapped (see [`quantize_with_transpose`]).
    pub transposed: bool,
    /// Keep the exact MX values in bf16 beside the bytes ([`MxTensor::values`]; shared by
    /// the transposed result): 2 more bytes of device memory per element, written in the
    /// same pass, so that GEMMs on the BF16 tensor cores (the dequantize-to-BF16 path)
    /// skip their expansion pass. Needs a plugin of ABI minor ≥ 2.
    pub keep_values: bool,
    /// The tensor is quantized to be a forward or dgrad operand: the plugin may write its
    /// GEMM form beside it (an annex; mxfp8 on a Hopper GPU: the chained GEMM's stage
    /// re-encoding) so those GEMMs run faster. Results are the same. Told to plugins of ABI
    /// minor ≥ 6; ignored by others and where a plugin has no such form.
    pub for_gemm: bool,
}

/// Quantize `x` and, from the same pass, the same MX tensor with its last two axes
/// swapped (the quantization of `xᵀ`; bytes and scales transposed, nothing re-rounded).
/// A weight quantized this way serves forward (`[E, N, K]`) and dgrad (`[E, K, N]`,
/// weight layout `kn`) without either GEMM re-laying it out. Needs a plugin of ABI
/// minor ≥ 1.
pub fn quantize_with_transpose(
    plugin: &LoadedPlugin,
    x: &Tensor,
    format: MxFormat,
    mode: ScaleMode,
    block: BlockLayout,
) -> OpResult<(MxTensor, MxTensor)> {
    let extras = QuantizeExtras {
        transposed: true,
        ..QuantizeExtras::default()
    };
    let (q, t) = quantize_with(plugin, x, format, mode, block, extras)?;
    Ok((q, t.expect("requested")))
}

/// Quantize `x`, also writing what `extras` asks for; the second result is the
/// transposed copy when `extras.transposed`.
pub fn quantize_with(
    plugin: &LoadedPlugin,
    x: &Tensor,
    format: MxFormat,
    mode: ScaleMode,
    block: BlockLayout,
    extras: QuantizeExtras,
) -> OpResult<(MxTensor, Option<MxTensor>)> {
    let (q, t, _) = quantize_full(plugin, x, (format, mode, block), extras, None, None)?;
    Ok((q, t))
}

/// [`quantize_with`], plus `x`'s *wgrad values* from the same pass where the plugin can:
/// `x` (`[rows, C]`) quantized as wgrad quantizes a dense operand with these offsets (1×32
/// blocks along axis 0 from each expert's first row, `format` and `mode`) and dequantized,
/// in bf16. Passed to wgrad as a dense operand with the same offsets, format and mode,
/// the plugin multiplies them as they are (ABI 1.5, `DenseMxValues`) instead of reading
/// `x` again to quantize it: a training step's X and dY then cross memory once for both
/// of their quantizations. Needs a plugin of ABI minor ≥ 5.
///
/// `weight`: the weight `x` will be multiplied with as forward's or dgrad's `a` operand (W
/// `[E, N, K]` for X, its transposed copy for dY; `[E, cols, C]` with one expert per offset),
/// when the caller knows it. Checked, then passed to a plugin of minor ≥ 9 that wrote the
/// weight's annex (`QuantizeDesc::weight`), which may then write only the part of `x`'s annex
/// that this GEMM reads. Results never depend on it.
pub fn quantize_with_wgrad_values(
    plugin: &LoadedPlugin,
    x: &Tensor,
    (format, mode, block): (MxFormat, ScaleMode, BlockLayout),
    extras: QuantizeExtras,
    offs: &[i32],
    weight: Option<&MxTensor>,
) -> OpResult<(MxTensor, Option<MxTensor>, Tensor)> {
    if x.shape.len() != 2 {
        return Err(OpError::invalid(format!(
            "wgrad values need a tensor [rows, C], got shape {:?}",
            x.shape
        )));
    }
    validate::check_offs(offs, offs.len() as u64, x.shape[0])?;
    if plugin.abi_minor < 5 {
        return Err(OpError::unsupported(format!(
            "plugin `{}` speaks ABI 1.{}: writing wgrad values needs 1.5",
            plugin.name, plugin.abi_minor
        )));
    }
    if let Some(w) = weight {
        check_gemm_weight(w, x, offs.len())?;
    }
    // (only to the plugin that wrote the weight's annex, and that understands the field)
    let weight = weight.filter(|w| {
        plugin.abi_minor >= 9 && w.annex.as_ref().is_some_and(|a| a.plugin == plugin.path)
    });
    let (q, t, v) = quantize_full(plugin, x, (format, mode, block), extras, Some(offs), weight)?;
    Ok((q, t, v.expect("requested")))
}

/// The weight named for `x`'s quantize call ([`quantize_with_wgrad_values`]): `[E, cols, C]`
/// for `x` of `[rows, C]` and `experts` offsets, on `x`'s device.
fn check_gemm_weight(w: &MxTensor, x: &Tensor, experts: usize) -> OpResult<()> {
    let ws = &w.data.shape;
    if ws.len() != 3 || ws[0] != experts as u64 || ws[2] != x.shape[1] {
        return Err(OpError::invalid(format!(
            "the weight named for this quantization has shape {ws:?}; x of shape {:?} with {experts} experts is multiplied with [{experts}, cols, {}]",
            x.shape, x.shape[1]
        )));
    }
    if w.data.location() != x.location() {
        return Err(OpError::invalid(format!(
            "the weight named for this quantization lives on {:?}, x on {:?}",
            w.data.location(),
            x.location()
        )));
    }
    Ok(())
}

/// [`quantize_with`], with the wgrad values for `wgrad_offs` when given (checked by the
/// caller), tagged with their grid, and `weight` passed on (checked by the caller; ABI 1.9).
fn quantize_full(
    plugin: &LoadedPlugin,
    x: &Tensor,
    (format, mode, block): (MxFormat, ScaleMode, BlockLayout),
    extras: QuantizeExtras,
    wgrad_offs: Option<&[i32]>,
    weight: Option<&MxTensor>,
) -> OpResult<(MxTensor, Option<MxTensor>, Option<Tensor>)> {
    let transposed = extras.transposed;
    if !plugin.has(caps::QUANTIZE) {
        return Err(OpError::unsupported(format!(
            "plugin `{}` cannot quantize",
            plugin.name
        )));
    }
    let scales_shape = validate::plan_quantize(&x.shape, x.dtype, block)?;
    let rank = x.shape.len();
    if transposed {
        if rank < 2 {
            return Err(OpError::invalid(format!(
                "quantize with transpose needs a tensor with at least two axes, got shape {:?}",
                x.shape
            )));
        }
        if plugin.abi_minor < 1 {
            return Err(OpError::unsupported(format!(
                "plugin `{}` speaks ABI 1.{}: writing a transposed copy needs 1.1",
                plugin.name, plugin.abi_minor
            )));
        }
    }
    if extras.keep_values && plugin.abi_minor < 2 {
        return Err(OpError::unsupported(format!(
            "plugin `{}` speaks ABI 1.{}: keeping the MX values in bf16 needs 1.2",
            plugin.name, plugin.abi_minor
        )));
    }
    let dev = x.location();
    let grid = wgrad_offs.map(|offs| {
        Arc::new(WgradGrid {
            format,
            mode,
            offs: offs.to_vec(),
        })
    });
    if needs_staging(plugin, dev) {
        let cpu_x = x.to_device(Device::Cpu)?;
        // (the weight's annex is a device plugin's: none to pass on a staged call)
        let (q, t, v) = quantize_full(
            plugin,
            &cpu_x,
            (format, mode, block),
            extras,
            wgrad_offs,
            None,
        )?;
        let t = t.map(|t| t.to_device(dev)).transpose()?;
        let v = match v {
            Some(v) => Some(Tensor {
                wgrad_grid: grid,
                ..v.to_device(dev)?
            }),
            None => None,
        };
        return Ok((q.to_device(dev)?, t, v));
    }
    // The values' writable view is taken while the tensor is unshared; both results
    // then hold it.
    let (values, values_view) = if extras.keep_values {
        let mut v = output_on(dev, &x.shape, DType::Bf16)?;
        let view = v.view_mut().expect("fresh output is unshared");
        (Some(v), view)
    } else {
        (None, TensorView::absent())
    };
    // The wgrad values (ABI 1.5): written through a view taken while unshared, tagged
    // with their grid once the call is done.
    let (wgrad, wgrad_view) = if wgrad_offs.is_some() {
        let mut v = output_on(dev, &x.shape, DType::Bf16)?;
        let view = v.view_mut().expect("fresh output is unshared");
        (Some(v), view)
    } else {
        (None, TensorView::absent())
    };
    let wgrad_offs_owned: Option<Vec<i32>> = wgrad_offs.map(<[i32]>::to_vec);
    let kept = |swapped: bool| {
        values.as_ref().map(|t| MxValues {
            tensor: t.clone(),
            swapped,
        })
    };
    let mut out = MxTensor {
        data: output_on(dev, &x.shape, format.dtype())?,
        scales: output_on(dev, &scales_shape, DType::E8m0)?,
        format,
        mode,
        block,
        values: kept(false),
        annex: None,
    };
    let mut out_t = if transposed {
        let swap = mxhost_plugin_abi::transposed_shape;
        Some(MxTensor {
            data: output_on(dev, &swap(&x.shape), format.dtype())?,
            scales: output_on(dev, &swap(&scales_shape), DType::E8m0)?,
            format,
            mode,
            block: mxhost_plugin_abi::transposed_block(block, rank),
            values: kept(true),
            annex: None,
        })
    } else {
        None
    };
    // ABI 1.4: the two results of a transposing quantize keep each other's data and annex
    // alive (linked after the call), so the plugin's annex of one may refer to the other's
    // bytes and form.
    let partner_kept = out_t.is_some() && plugin.abi_minor >= 4;
    // The plugin's annexes (ABI 1.3), allocated as it asks; their writable views are taken
    // while they are unshared.
    let annex_for = |q: &mut MxTensor| -> OpResult<TensorView> {
        let words = annex_words(plugin, q, extras, partner_kept)?;
        if words == 0 {
            return Ok(TensorView::absent());
        }
        let mut t = output_on(dev, &[words], DType::I32)?;
        let view = t.view_mut().expect("fresh output is unshared");
        q.annex = Some(MxAnnex {
            tensor: t,
            plugin: plugin.path.clone(),
            partner: None,
            bytes_on_demand: None,
        });
        Ok(view)
    };
    let annex = annex_for(&mut out)?;
    let transposed_annex = match &mut out_t {
        Some(t) => annex_for(t)?,
        None => TensorView::absent(),
    };
    // ABI 1.7: this host asks for the bytes before it reads them (`ensure_bytes`), so a
    // plugin with `fill_bytes` may leave out those its annex gives back; 1.8: the scales too
    // (the `scales` accessor asks as `data` does).
    let annexed = out.annex.is_some() || out_t.as_ref().is_some_and(|t| t.annex.is_some());
    let on_demand = plugin
        .fill_bytes
        .filter(|_| plugin.abi_minor >= 7 && annexed);
    if let Some(fill) = on_demand {
        for q in std::iter::once(&mut out).chain(out_t.iter_mut()) {
            if let Some(a) = &mut q.annex {
                a.bytes_on_demand = Some(Arc::new(BytesOnDemand {
                    plugin: plugin.name.clone(),
                    fill,
                    pending: std::sync::Mutex::new(true),
                }));
            }
        }
    }
    let desc = QuantizeDesc {
        struct_size: std::mem::size_of::<QuantizeDesc>(),
        input: x.view(),
        output: out.view_mut().expect("fresh output is unshared"),
        stream: stream_for(dev)?,
        transposed: match &mut out_t {
            Some(t) => t.view_mut().expect("fresh output is unshared"),
            None => mxhost_plugin_abi::MxTensorView::absent(),
        },
        values: values_view,
        annex,
        transposed_annex,
        wgrad_values: wgrad_view,
        wgrad_offs: wgrad_offs_owned
            .as_ref()
            .map_or(std::ptr::null(), |o| o.as_ptr()),
        wgrad_num_groups: wgrad_offs_owned.as_ref().map_or(0, |o| o.len() as u32),
        bytes_on_demand: on_demand.map_or(0, |_| on_demand_promise(plugin.abi_minor)),
        weight: weight.map_or(mxhost_plugin_abi::MxTensorView::absent(), MxTensor::view),
        weight_annex: weight
            .and_then(|w| w.annex.as_ref())
            .map_or(TensorView::absent(), |a| a.tensor.view()),
    };
    let mut keep: Vec<Box<dyn std::any::Any>> = vec![Box::new(x.clone()), Box::new(out.clone())];
    if let Some(t) = &out_t {
        keep.push(Box::new(t.clone()));
    }
    if let Some(v) = &wgrad {
        keep.push(Box::new(v.clone()));
    }
    if let Some(w) = weight {
        keep.push(Box::new(w.clone()));
    }
    // Owned, so that a call the watchdog abandons still reads valid offsets.
    keep.push(Box::new(wgrad_offs_owned));
    call::quantize(plugin, &desc, KeepAlive(keep), dev == Device::Cpu)?;
    if partner_kept {
        if let Some(t) = &mut out_t {
            link_partners(&mut out, t);
        }
    }
    let wgrad = wgrad.map(|v| Tensor {
        wgrad_grid: grid,
        ..v
    });
    Ok((out, out_t, wgrad))
}

/// Each annex of the two results of a transposing quantize keeps the other result's data
/// and annex alive (ABI 1.4, `AnnexQuery::partner_kept`; the annex since 1.7, whose bytes
/// left out an annex reads from its partner's form).
fn link_partners(a: &mut MxTensor, b: &mut MxTensor) {
    let kept = |m: &MxTensor| KeptPartner {
        data: m.data.clone(),
        annex: m.annex.as_ref().map(|x| x.tensor.clone()),
    };
    let (ka, kb) = (kept(a), kept(b));
    if let Some(x) = &mut a.annex {
        x.partner = Some(Box::new(kb));
    }
    if let Some(x) = &mut b.annex {
        x.partner = Some(Box::new(ka));
    }
}

/// How many i32 words of annex `plugin` wants beside `q` (ABI 1.3; 0 for older plugins,
/// plugins without the entry, and tensors it keeps none for).
fn annex_words(
    plugin: &LoadedPlugin,
    q: &MxTensor,
    extras: QuantizeExtras,
    partner_kept: bool,
) -> OpResult<u64> {
    let Some(f) = plugin.annex_words else {
        return Ok(0);
    };
    let dims = &q.data.shape;
    let mut shape = [0u64; mxhost_plugin_abi::MAX_RANK];
    shape[..dims.len()].copy_from_slice(dims);
    let query = mxhost_plugin_abi::AnnexQuery {
        struct_size: std::mem::size_of::<mxhost_plugin_abi::AnnexQuery>(),
        rank: dims.len() as u32,
        shape,
        format: q.format as u32,
        block: q.block,
        device: q.data.device() as u32,
        keeps_values: extras.keep_values as u32,
        partner_kept: partner_kept as u32,
        for_gemm: (extras.for_gemm && plugin.abi_minor >= 6) as u32,
    };
    Ok(call::annex_words(plugin, f, &query)?)
}

/// `q`'s bytes (`scales`: its scale bytes) for a reader outside its plugin (the guest's
/// `mx-tensor.data` and `mx-tensor.scales`): what the plugin left out (ABI 1.7 bytes, 1.8
/// scales) written first.
pub fn filled_part(q: &MxTensor, scales: bool) -> OpResult<Tensor> {
    ensure_bytes(q)?;
    Ok(if scales { &q.scales } else { &q.data }.clone())
}

/// Has the plugin that quantized `q` write the bytes it left out, if it may have (ABI 1.7):
/// before anything but that plugin's GEMMs reads them. Once per tensor; the work is enqueued
/// on the device's stream, ahead of any read.
pub fn ensure_bytes(q: &MxTensor) -> OpResult<()> {
    let Some((annex, b)) = q
        .annex
        .as_ref()
        .and_then(|a| a.bytes_on_demand.as_ref().map(|b| (a, b)))
    else {
        return Ok(());
    };
    let mut pending = b.pending.lock().unwrap_or_else(|e| e.into_inner());
    if !*pending {
        return Ok(());
    }
    let dev = q.data.location();
    let desc = FillBytesDesc {
        struct_size: std::mem::size_of::<FillBytesDesc>(),
        tensor: q.view(),
        annex: annex.tensor.view(),
        stream: stream_for(dev)?,
    };
    let keep = KeepAlive(vec![Box::new(q.clone())]);
    call::fill_bytes(&b.plugin, b.fill, &desc, keep, dev == Device::Cpu)?;
    *pending = false;
    Ok(())
}

/// What a quantize call promises a plugin with `fill_bytes` (`QuantizeDesc::bytes_on_demand`):
/// this host asks before it reads the bytes ([`ensure_bytes`]), and the scales too (the
/// `scales` accessor asks as `data` does), which a plugin of minor ≥ 8 understands.
fn on_demand_promise(abi_minor: u32) -> u32 {
    if abi_minor >= 8 {
        mxhost_plugin_abi::BYTES_ON_DEMAND_WITH_SCALES
    } else {
        mxhost_plugin_abi::BYTES_ON_DEMAND
    }
}

/// Expand an MX tensor to f32.
pub fn dequantize(plugin: &LoadedPlugin, q: &MxTensor) -> OpResult<Tensor> {
    if !plugin.has(caps::QUANTIZE) {
        return Err(OpError::unsupported(format!(
            "plugin `{}` cannot dequantize",
            plugin.name
        )));
    }
    ensure_bytes(q)?;
    let dev = q.data.location();
    if needs_staging(plugin, dev) {
        return dequantize(plugin, &q.to_device(Device::Cpu)?)?.to_device(dev);
    }
    let mut out = output_on(dev, &q.data.shape, DType::F32)?;
    let desc = DequantizeDesc {
        struct_size: std::mem::size_of::<DequantizeDesc>(),
        input: q.view(),
        output: out.view_mut().expect("fresh output is unshared"),
        stream: stream_for(dev)?,
    };
    let keep = KeepAlive(vec![Box::new(q.clone()), Box::new(out.clone())]);
    call::dequantize(plugin, &desc, keep, dev == Device::Cpu)?;
    Ok(out)
}

/// A grouped GEMM operand as the host holds it.
pub enum GemmOperand<'a> {
    Dense(&'a Tensor),
    Mx(&'a MxTensor),
}

impl GemmOperand<'_> {
    pub fn desc(&self) -> OperandDesc {
        match self {
            GemmOperand::Dense(t) => OperandDesc::dense(&t.shape, t.dtype),
            GemmOperand::Mx(q) => OperandDesc {
                shape: q.data.shape.clone(),
                dtype: q.data.dtype,
                mx: Some(MxDesc {
                    format: q.format,
                    block: q.block,
                    scales_shape: q.scales.shape.clone(),
                }),
            },
        }
    }

    /// The ABI operand for `plugin`: kept values go along from ABI 1.2, an annex from 1.3
    /// and only to the plugin that wrote it (an operand has one or the other: a plugin
    /// asks for no annex when the values are kept).
    fn abi(&self, plugin: &LoadedPlugin) -> Operand {
        let minor = plugin.abi_minor;
        let empty_mx = mxhost_plugin_abi::MxTensorView {
            struct_size: std::mem::size_of::<mxhost_plugin_abi::MxTensorView>(),
            data: TensorView::empty(),
            scales: TensorView::empty(),
            format: 0,
            mode: 0,
            block: BlockLayout::vector(0),
        };
        match self {
            GemmOperand::Dense(t) => Operand {
                struct_size: std::mem::size_of::<Operand>(),
                kind: OperandKind::Dense as u32,
                dense: t.view(),
                mx: empty_mx,
            },
            GemmOperand::Mx(q) => {
                let (kind, dense) = match (&q.values, self.own_annex(plugin)) {
                    (_, Some(a)) => (OperandKind::MxWithAnnex, a.tensor.view()),
                    (Some(v), None) if minor >= 2 => (
                        if v.swapped {
                            OperandKind::MxWithValuesSwapped
                        } else {
                            OperandKind::MxWithValues
                        },
                        v.tensor.view(),
                    ),
                    _ => (OperandKind::Mx, TensorView::empty()),
                };
                Operand {
                    struct_size: std::mem::size_of::<Operand>(),
                    kind: kind as u32,
                    dense,
                    mx: q.view(),
                }
            }
        }
    }

    /// The annex `plugin` wrote for this operand, which goes with it to that plugin (ABI 1.3).
    fn own_annex(&self, plugin: &LoadedPlugin) -> Option<&MxAnnex> {
        match self {
            GemmOperand::Mx(q) => q
                .annex
                .as_ref()
                .filter(|a| plugin.abi_minor >= 3 && a.plugin == plugin.path),
            GemmOperand::Dense(_) => None,
        }
    }

    fn is_mx(&self) -> bool {
        matches!(self, GemmOperand::Mx(_))
    }

    fn location(&self) -> Device {
        match self {
            GemmOperand::Dense(t) => t.location(),
            GemmOperand::Mx(q) => q.data.location(),
        }
    }
}

/// An operand copied to host memory for a staged call.
enum Staged {
    Dense(Tensor),
    Mx(Box<MxTensor>),
}

impl Staged {
    fn op(&self) -> GemmOperand<'_> {
        match self {
            Staged::Dense(t) => GemmOperand::Dense(t),
            Staged::Mx(q) => GemmOperand::Mx(q),
        }
    }
}

/// Options of one grouped GEMM, host side.
#[derive(Debug, Clone, Copy)]
pub struct GemmConfig {
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub weight_blocks_2d: bool,
    pub weight_layout: WeightLayout,
    pub out_dtype: DType,
    pub hadamard: bool,
    pub dge: bool,
    pub bias: bool,
}

impl Default for GemmConfig {
    fn default() -> Self {
        GemmConfig {
            format: MxFormat::E4m3,
            mode: ScaleMode::Rceil,
            weight_blocks_2d: false,
            weight_layout: WeightLayout::Nk,
            out_dtype: DType::F32,
            hadamard: false,
            dge: false,
            bias: false,
        }
    }
}

/// Run one grouped GEMM pass on `plugin`.
pub fn grouped_gemm(
    plugin: &LoadedPlugin,
    pass: GemmPass,
    a: GemmOperand<'_>,
    b: GemmOperand<'_>,
    offs: &[i32],
    cfg: &GemmConfig,
) -> OpResult<Tensor> {
    if !plugin.has(caps::GROUPED_GEMM) {
        return Err(OpError::unsupported(format!(
            "plugin `{}` has no grouped GEMM",
            plugin.name
        )));
    }
    if (a.is_mx() || b.is_mx()) && !plugin.has(caps::MX_OPERANDS) {
        return Err(OpError::unsupported(format!(
            "plugin `{}` ({}) does not accept pre-quantized operands: pass dense tensors, or select an MX plugin",
            plugin.name, plugin.precision
        )));
    }
    if (!a.is_mx() || !b.is_mx()) && !plugin.has(caps::DENSE_OPERANDS) {
        return Err(OpError::unsupported(format!(
            "plugin `{}` needs pre-quantized operands",
            plugin.name
        )));
    }
    let plan = validate::plan_grouped_gemm(
        pass,
        &a.desc(),
        &b.desc(),
        offs,
        cfg.weight_layout,
        cfg.out_dtype,
    )?;
    let stage = |op: &GemmOperand<'_>, to: Device| -> OpResult<Staged> {
        Ok(match op {
            GemmOperand::Dense(t) => Staged::Dense(t.to_device(to)?),
            GemmOperand::Mx(q) => Staged::Mx(Box::new(q.to_device(to)?)),
        })
    };
    // Operands on two devices (e.g. a CPU-made tensor in a GPU run): bring both to the
    // GPU one, so a plugin always sees a single device.
    let (da, db) = (a.location(), b.location());
    if da != db {
        let to = if da == Device::Cpu { db } else { da };
        let (sa, sb) = (stage(&a, to)?, stage(&b, to)?);
        return grouped_gemm(plugin, pass, sa.op(), sb.op(), offs, cfg);
    }
    let dev = da;
    if needs_staging(plugin, dev) {
        let (sa, sb) = (stage(&a, Device::Cpu)?, stage(&b, Device::Cpu)?);
        return grouped_gemm(plugin, pass, sa.op(), sb.op(), offs, cfg)?.to_device(dev);
    }
    // Bytes a plugin left out (ABI 1.7) are written before another plugin reads them; the
    // plugin that wrote an operand's annex gets the annex and writes them itself if it must.
    for op in [&a, &b] {
        if let GemmOperand::Mx(q) = op {
            if op.own_annex(plugin).is_none() {
                ensure_bytes(q)?;
            }
        }
    }
    let mut out = output_on(dev, &plan.out_shape, cfg.out_dtype)?;
    // Owned, so that a call the watchdog abandons still reads valid offsets.
    let offs_owned: Vec<i32> = offs.to_vec();
    // Device tensors: the offsets go to the device too (kept alive until the call's
    // work is done: the buffer is freed stream-ordered on drop).
    let offs_dev = match dev {
        Device::Cpu => None,
        Device::Cuda(_) => {
            let bytes: Vec<u8> = offs.iter().flat_map(|o| o.to_le_bytes()).collect();
            Some(Storage::from_bytes_on(dev, &bytes)?)
        }
    };
    // Wgrad values of this wgrad's grid go as `DenseMxValues` (ABI 1.5): not quantized again.
    let abi = |op: &GemmOperand<'_>| {
        let mut o = op.abi(plugin);
        if let GemmOperand::Dense(t) = op {
            if pass == GemmPass::Wgrad
                && plugin.abi_minor >= 5
                && t.on_wgrad_grid(cfg.format, cfg.mode, offs)
            {
                o.kind = OperandKind::DenseMxValues as u32;
            }
        }
        o
    };
    let desc = GroupedGemmDesc {
        struct_size: std::mem::size_of::<GroupedGemmDesc>(),
        pass: pass as u32,
        a: abi(&a),
        b: abi(&b),
        offs_host: offs_owned.as_ptr(),
        offs_device: offs_dev.as_ref().map_or(std::ptr::null(), |s| {
            s.view_ptr() as *const std::ffi::c_void
        }),
        num_groups: offs.len() as u32,
        out: out.view_mut().expect("fresh output is unshared"),
        options: GemmOptions {
            struct_size: std::mem::size_of::<GemmOptions>(),
            format: cfg.format as u32,
            mode: cfg.mode as u32,
            weight_blocks_2d: cfg.weight_blocks_2d as u32,
            weight_layout: cfg.weight_layout as u32,
            hadamard: cfg.hadamard as u32,
            dge: cfg.dge as u32,
            bias: cfg.bias as u32,
        },
        rows: plan.rows,
        n: plan.n,
        k: plan.k,
        stream: stream_for(dev)?,
    };
    let mut keep: Vec<Box<dyn std::any::Any>> = vec![
        Box::new(out.clone()),
        Box::new(offs_owned),
        Box::new(offs_dev),
    ];
    for op in [&a, &b] {
        match op {
            GemmOperand::Dense(t) => keep.push(Box::new((*t).clone())),
            GemmOperand::Mx(q) => keep.push(Box::new((*q).clone())),
        }
    }
    call::grouped_gemm(plugin, &desc, KeepAlive(keep), dev == Device::Cpu)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn annexed(shape: Vec<u64>) -> MxTensor {
        let t = |shape: Vec<u64>, dtype| Tensor::zeros_on(Device::Cpu, shape, dtype).unwrap();
        MxTensor {
            data: t(shape.clone(), DType::E4m3),
            scales: t(vec![1], DType::E8m0),
            format: MxFormat::E4m3,
            mode: ScaleMode::Floor,
            block: BlockLayout::tile(),
            values: None,
            annex: Some(MxAnnex {
                tensor: t(vec![64], DType::I32),
                plugin: "p".into(),
                partner: None,
                bytes_on_demand: None,
            }),
        }
    }

    static FILLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// A plugin's `fill_bytes` that counts its calls for tensors of 64 columns (the
    /// once-per-tensor test's: other tests use other widths, so that tests running in
    /// parallel leave its count alone) and checks what it gets: the tensor's data and its
    /// annex. A tensor of 7 rows makes it fail.
    unsafe extern "C" fn counting_fill(
        desc: *const FillBytesDesc,
        _err: *mut mxhost_plugin_abi::ErrorBuf,
    ) -> u32 {
        // SAFETY: ensure_bytes passes a live descriptor.
        let d = unsafe { &*desc };
        assert_eq!(d.struct_size, std::mem::size_of::<FillBytesDesc>());
        assert_eq!(d.annex.shape[0], 64, "the annex goes with the tensor");
        if d.tensor.data.shape[0] == 7 {
            return mxhost_plugin_abi::Status::BackendError as u32;
        }
        if d.tensor.data.shape[1] == 64 {
            FILLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        mxhost_plugin_abi::Status::Ok as u32
    }

    fn on_demand(shape: Vec<u64>) -> MxTensor {
        let mut q = annexed(shape);
        q.annex.as_mut().unwrap().bytes_on_demand = Some(Arc::new(BytesOnDemand {
            plugin: "p".into(),
            fill: counting_fill,
            pending: std::sync::Mutex::new(true),
        }));
        q
    }

    /// ABI 1.8: the scales are promised to a plugin of minor ≥ 8 only (a 1.7 plugin would read
    /// 2 as an invalid value).
    #[test]
    fn the_scales_are_promised_only_to_plugins_that_know_the_promise() {
        assert_eq!(on_demand_promise(7), mxhost_plugin_abi::BYTES_ON_DEMAND);
        assert_eq!(
            on_demand_promise(8),
            mxhost_plugin_abi::BYTES_ON_DEMAND_WITH_SCALES
        );
    }

    /// ABI 1.7: the plugin is asked for the bytes of a tensor it may have left out once,
    /// whichever clone asks; never for a tensor without the mark; and again after a failed ask.
    #[test]
    fn bytes_on_demand_are_asked_for_once_per_tensor() {
        use std::sync::atomic::Ordering::SeqCst;
        let before = FILLS.load(SeqCst);
        let q = on_demand(vec![32, 64]);
        let c = q.clone();
        ensure_bytes(&q).unwrap();
        ensure_bytes(&c).unwrap();
        ensure_bytes(&q).unwrap();
        assert_eq!(
            FILLS.load(SeqCst) - before,
            1,
            "one ask for the tensor and its clone"
        );
        ensure_bytes(&annexed(vec![32, 64])).unwrap();
        assert_eq!(FILLS.load(SeqCst) - before, 1, "no ask without the mark");
        let bad = on_demand(vec![7, 64]);
        assert!(ensure_bytes(&bad).is_err(), "a failed ask is an error");
        let b = bad
            .annex
            .as_ref()
            .unwrap()
            .bytes_on_demand
            .as_ref()
            .unwrap();
        assert!(*b.pending.lock().unwrap(), "and leaves the bytes pending");
    }

    /// ABI 1.8: a reader of the scales, as of the bytes, gets them after the plugin was asked.
    #[test]
    fn reading_the_scales_asks_for_them_first() {
        let pending = |q: &MxTensor| {
            let b = q.annex.as_ref().unwrap().bytes_on_demand.as_ref().unwrap();
            *b.pending.lock().unwrap()
        };
        for scales in [true, false] {
            let q = on_demand(vec![32, 48]);
            assert!(pending(&q));
            let t = filled_part(&q, scales).unwrap();
            assert!(
                !pending(&q),
                "read (scales {scales}) before the plugin was asked"
            );
            let want = if scales { &q.scales } else { &q.data };
            assert_eq!(t.shape, want.shape);
        }
        assert!(
            filled_part(&on_demand(vec![7, 48]), true).is_err(),
            "a failed ask is the reader's error"
        );
    }

    /// ABI 1.4: each result of a transposing quantize keeps the other's data and annex alive
    /// (and so unwritable), and counts them among the bytes it holds; both outlive the other
    /// result (its annex too: an annex may read its partner's form, run 198).
    #[test]
    fn partners_keep_each_others_data_and_annex_alive() {
        let (mut w, mut wt) = (annexed(vec![32, 64]), annexed(vec![64, 32]));
        let before = w.byte_len();
        let wt_annex = wt.annex.as_ref().unwrap().tensor.clone();
        link_partners(&mut w, &mut wt);
        assert_eq!(
            w.byte_len(),
            before + wt.data.byte_len() + wt_annex.byte_len()
        );
        let kept = w.annex.as_ref().unwrap().partner.as_ref().unwrap();
        assert!(Arc::ptr_eq(&kept.data.storage, &wt.data.storage));
        let kept_annex = kept.annex.as_ref().expect("the partner's annex kept");
        assert!(Arc::ptr_eq(&kept_annex.storage, &wt_annex.storage));
        assert_eq!(Arc::strong_count(&wt.data.storage), 2);
        assert!(
            wt.data.view_mut().is_none(),
            "a kept partner is never written"
        );
        let back = wt.annex.as_ref().unwrap().partner.as_ref().unwrap();
        assert!(Arc::ptr_eq(&back.data.storage, &w.data.storage));
        let w_annex = &w.annex.as_ref().unwrap().tensor;
        assert!(Arc::ptr_eq(
            &back.annex.as_ref().unwrap().storage,
            &w_annex.storage
        ));
        drop((wt, wt_annex));
        let kept = w.annex.as_ref().unwrap().partner.as_ref().unwrap();
        assert_eq!(
            Arc::strong_count(&kept.data.storage),
            1,
            "outlives its tensor"
        );
        let kept_annex = kept.annex.as_ref().unwrap();
        assert_eq!(
            Arc::strong_count(&kept_annex.storage),
            1,
            "its annex outlives it too"
        );
    }
}
