//! Validated, device-agnostic views of the ABI descriptors.
//!
//! A descriptor arrives as plain `#[repr(C)]` data whose enums are raw `u32`s and whose
//! shapes are unchecked. The parsers here turn it into typed values and check every
//! rule that does not need to dereference a tensor pointer: known enum values, nested
//! `struct_size`s, ranks, dtypes, shapes against each other and against `scale_shape`,
//! byte sizes that fit the address space, one device per request, and output buffers
//! that do not overlap inputs. Pointers stay raw (they may be device pointers); a
//! backend for host memory turns them into slices with [`crate::host`].
//!
//! The one exception is the group offsets, which the ABI always passes in host memory
//! and which are needed to validate anything: [`GemmArgs::parse`] reads them.

use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{
    scale_shape, AnnexQuery, BlockKind, BlockLayout, DType, DequantizeDesc, DeviceKind,
    FillBytesDesc, GemmPass, GroupedGemmDesc, MxFormat, MxTensorView, Operand, OperandKind,
    QuantizeDesc, ScaleMode, TensorView, WeightLayout, ANNEX_QUERY_SIZE_1_3,
    BYTES_ON_DEMAND_WITH_SCALES, MAX_RANK,
};
use std::ffi::c_void;
use std::ops::Range;

fn check_struct_size(what: &str, got: usize, want: usize) -> PluginResult<()> {
    if got < want {
        return Err(PluginError::invalid(format!(
            "{what}: struct_size {got} is smaller than {want} (host built against another ABI?)"
        )));
    }
    Ok(())
}

fn fmt_shape(shape: &[u64]) -> String {
    let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

/// A tensor whose header has been checked; `ptr` is not dereferenced here.
#[derive(Debug, Clone)]
pub struct TensorArg {
    /// Name used in error messages (e.g. `"grouped_gemm.a"`).
    pub what: String,
    pub ptr: *mut c_void,
    pub dtype: DType,
    pub device: DeviceKind,
    pub ordinal: i32,
    pub shape: Vec<u64>,
    /// Product of `shape`, known to fit in `usize` with its byte size ≤ `isize::MAX`.
    pub numel: usize,
}

impl TensorArg {
    pub fn parse(view: &TensorView, what: &str) -> PluginResult<Self> {
        check_struct_size(what, view.struct_size, std::mem::size_of::<TensorView>())?;
        if view.rank as usize > MAX_RANK {
            return Err(PluginError::invalid(format!(
                "{what}: rank {} exceeds {MAX_RANK}",
                view.rank
            )));
        }
        let dtype = DType::from_raw(view.dtype)
            .ok_or_else(|| PluginError::invalid(format!("{what}: unknown dtype {}", view.dtype)))?;
        let device = DeviceKind::from_raw(view.device).ok_or_else(|| {
            PluginError::invalid(format!("{what}: unknown device kind {}", view.device))
        })?;
        let shape = view.dims().to_vec();
        let numel = shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                PluginError::invalid(format!("{what}: shape {} overflows", fmt_shape(&shape)))
            })?;
        let bytes = numel.checked_mul(dtype.size_bytes() as usize);
        if bytes.is_none_or(|b| b > isize::MAX as usize) {
            return Err(PluginError::invalid(format!(
                "{what}: shape {} is too large",
                fmt_shape(&shape)
            )));
        }
        if numel > 0 && view.data.is_null() {
            return Err(PluginError::invalid(format!(
                "{what}: null data pointer for {numel} elements"
            )));
        }
        Ok(TensorArg {
            what: what.to_string(),
            ptr: view.data,
            dtype,
            device,
            ordinal: view.device_ordinal,
            shape,
            numel,
        })
    }

    pub fn bytes(&self) -> usize {
        self.numel * self.dtype.size_bytes() as usize
    }

    pub fn expect_dtype(&self, allowed: &[DType]) -> PluginResult<()> {
        if allowed.contains(&self.dtype) {
            return Ok(());
        }
        let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
        Err(PluginError::invalid(format!(
            "{}: dtype {} is not accepted here (expected {})",
            self.what,
            self.dtype.name(),
            names.join(" or ")
        )))
    }

    pub fn expect_shape(&self, shape: &[u64]) -> PluginResult<()> {
        if self.shape == shape {
            return Ok(());
        }
        Err(PluginError::invalid(format!(
            "{}: shape {} does not match the expected {}",
            self.what,
            fmt_shape(&self.shape),
            fmt_shape(shape)
        )))
    }

    /// Byte range `[start, end)` of the buffer, for overlap checks.
    fn byte_range(&self) -> Range<usize> {
        let start = self.ptr as usize;
        start..start.saturating_add(self.bytes())
    }
}

/// The block layout of an MX tensor, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocking {
    /// 1×32 vectors along `axis` (one of the last two axes).
    Vector { axis: usize },
    /// 32×32 tiles over the last two axes.
    Tile,
}

impl Blocking {
    pub fn from_abi(layout: BlockLayout) -> Option<Self> {
        match BlockKind::from_raw(layout.kind)? {
            BlockKind::Vector => Some(Blocking::Vector {
                axis: layout.axis as usize,
            }),
            BlockKind::Tile32x32 => Some(Blocking::Tile),
        }
    }
    pub fn to_abi(self) -> BlockLayout {
        match self {
            Blocking::Vector { axis } => BlockLayout::vector(axis as u32),
            Blocking::Tile => BlockLayout::tile(),
        }
    }
}

/// An MX tensor whose data, scales, format and layout agree.
#[derive(Debug, Clone)]
pub struct MxArg {
    pub data: TensorArg,
    pub scales: TensorArg,
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub block: BlockLayout,
    /// ABI 1.2, GEMM operands only: the tensor's exact MX values in bf16, kept by the
    /// quantize call that made it (checked: bf16, the data's shape or its last two axes
    /// swapped, same device).
    pub values: Option<MxValues>,
    /// ABI 1.3, GEMM operands only: this plugin's annex of the tensor (operand kind
    /// `MxWithAnnex`; checked: i32, one axis, same device). Its contents are the plugin's
    /// own business: the host only allocates it and hands it back.
    pub annex: Option<TensorArg>,
}

/// The exact MX values of an [`MxArg`] in bf16 (operand kinds `MxWithValues` /
/// `MxWithValuesSwapped`).
#[derive(Debug, Clone)]
pub struct MxValues {
    pub t: TensorArg,
    /// The values are stored with the last two axes of the data's shape swapped.
    pub swapped: bool,
}

impl MxArg {
    pub fn parse(view: &MxTensorView, what: &str) -> PluginResult<Self> {
        check_struct_size(what, view.struct_size, std::mem::size_of::<MxTensorView>())?;
        let data = TensorArg::parse(&view.data, &format!("{what}.data"))?;
        let scales = TensorArg::parse(&view.scales, &format!("{what}.scales"))?;
        let format = MxFormat::from_raw(view.format).ok_or_else(|| {
            PluginError::invalid(format!("{what}: unknown MX format {}", view.format))
        })?;
        let mode = ScaleMode::from_raw(view.mode).ok_or_else(|| {
            PluginError::invalid(format!("{what}: unknown scale mode {}", view.mode))
        })?;
        data.expect_dtype(&[format.dtype()])?;
        scales.expect_dtype(&[DType::E8m0])?;
        let want = scale_shape(&data.shape, view.block).ok_or_else(|| {
            PluginError::invalid(format!(
                "{what}: block layout {:?} is invalid for shape {}",
                view.block,
                fmt_shape(&data.shape)
            ))
        })?;
        scales.expect_shape(&want)?;
        if (data.device, data.ordinal) != (scales.device, scales.ordinal) {
            return Err(PluginError::invalid(format!(
                "{what}: data and scales live on different devices"
            )));
        }
        Ok(MxArg {
            data,
            scales,
            format,
            mode,
            block: view.block,
            values: None,
            annex: None,
        })
    }

    /// `self` with the annex of an `MxWithAnnex` operand attached, checked.
    fn with_annex(mut self, view: &TensorView, what: &str) -> PluginResult<Self> {
        let t = parse_annex(view, &format!("{what}.annex"))?;
        if (t.device, t.ordinal) != (self.data.device, self.data.ordinal) {
            return Err(PluginError::invalid(format!(
                "{what}: annex and data live on different devices"
            )));
        }
        self.annex = Some(t);
        Ok(self)
    }

    /// `self` with the values of an `MxWithValues(Swapped)` operand attached, checked.
    fn with_values(mut self, view: &TensorView, swapped: bool, what: &str) -> PluginResult<Self> {
        let t = TensorArg::parse(view, &format!("{what}.values"))?;
        t.expect_dtype(&[DType::Bf16])?;
        let shape = if swapped {
            mxhost_plugin_abi::transposed_shape(&self.data.shape)
        } else {
            self.data.shape.clone()
        };
        t.expect_shape(&shape)?;
        if (t.device, t.ordinal) != (self.data.device, self.data.ordinal) {
            return Err(PluginError::invalid(format!(
                "{what}: values and data live on different devices"
            )));
        }
        self.values = Some(MxValues { t, swapped });
        Ok(self)
    }

    pub fn shape(&self) -> &[u64] {
        &self.data.shape
    }
}

/// A GEMM operand, dense or pre-quantized.
#[derive(Debug, Clone)]
// (An MxArg is a few hundred bytes, built once per operand per call: boxing it would buy
// nothing.)
#[allow(clippy::large_enum_variant)]
pub enum OperandArg {
    Dense(TensorArg),
    Mx(MxArg),
}

impl OperandArg {
    pub fn parse(op: &Operand, what: &str) -> PluginResult<Self> {
        Ok(Self::parse_marked(op, what)?.0)
    }

    /// The operand, and whether it came as [`OperandKind::DenseMxValues`] (ABI 1.5: dense,
    /// already on the grid the call would quantize it to).
    pub fn parse_marked(op: &Operand, what: &str) -> PluginResult<(Self, bool)> {
        check_struct_size(what, op.struct_size, std::mem::size_of::<Operand>())?;
        let marked = op.kind == OperandKind::DenseMxValues as u32;
        Ok((Self::parse_kind(op, what)?, marked))
    }

    fn parse_kind(op: &Operand, what: &str) -> PluginResult<Self> {
        match OperandKind::from_raw(op.kind) {
            Some(OperandKind::Dense) => {
                let t = TensorArg::parse(&op.dense, what)?;
                t.expect_dtype(&[DType::F32, DType::Bf16])?;
                Ok(OperandArg::Dense(t))
            }
            Some(OperandKind::DenseMxValues) => {
                let t = TensorArg::parse(&op.dense, what)?;
                t.expect_dtype(&[DType::Bf16])?;
                Ok(OperandArg::Dense(t))
            }
            Some(OperandKind::Mx) => Ok(OperandArg::Mx(MxArg::parse(&op.mx, what)?)),
            Some(k @ (OperandKind::MxWithValues | OperandKind::MxWithValuesSwapped)) => {
                let swapped = k == OperandKind::MxWithValuesSwapped;
                let m = MxArg::parse(&op.mx, what)?.with_values(&op.dense, swapped, what)?;
                Ok(OperandArg::Mx(m))
            }
            Some(OperandKind::MxWithAnnex) => {
                let m = MxArg::parse(&op.mx, what)?.with_annex(&op.dense, what)?;
                Ok(OperandArg::Mx(m))
            }
            None => Err(PluginError::invalid(format!(
                "{what}: unknown operand kind {}",
                op.kind
            ))),
        }
    }

    pub fn shape(&self) -> &[u64] {
        match self {
            OperandArg::Dense(t) => &t.shape,
            OperandArg::Mx(m) => m.shape(),
        }
    }

    fn expect_shape(&self, shape: &[u64]) -> PluginResult<()> {
        match self {
            OperandArg::Dense(t) => t.expect_shape(shape),
            OperandArg::Mx(m) => m.data.expect_shape(shape),
        }
    }

    fn tensors(&self) -> Vec<&TensorArg> {
        match self {
            OperandArg::Dense(t) => vec![t],
            OperandArg::Mx(m) => {
                let mut v = vec![&m.data, &m.scales];
                v.extend(m.values.as_ref().map(|v| &v.t));
                v.extend(m.annex.as_ref());
                v
            }
        }
    }
}

/// An annex view (ABI 1.3): an i32 tensor with one axis.
fn parse_annex(view: &TensorView, what: &str) -> PluginResult<TensorArg> {
    let t = TensorArg::parse(view, what)?;
    t.expect_dtype(&[DType::I32])?;
    if t.shape.len() != 1 {
        return Err(PluginError::invalid(format!(
            "{what}: an annex has one axis, got shape {}",
            fmt_shape(&t.shape)
        )));
    }
    Ok(t)
}

/// The device every tensor of a request lives on; mixed devices are rejected.
fn common_device(tensors: &[&TensorArg]) -> PluginResult<(DeviceKind, i32)> {
    let first = tensors
        .first()
        .map(|t| (t.device, t.ordinal))
        .unwrap_or((DeviceKind::Cpu, 0));
    for t in tensors {
        if (t.device, t.ordinal) != first {
            return Err(PluginError::invalid(format!(
                "{} lives on {:?}:{} but the request's first tensor on {:?}:{}",
                t.what, t.device, t.ordinal, first.0, first.1
            )));
        }
    }
    Ok(first)
}

/// Outputs must not overlap inputs or each other: the CPU backend hands out `&mut`
/// slices, which would otherwise alias.
fn check_disjoint(outputs: &[&TensorArg], inputs: &[&TensorArg]) -> PluginResult<()> {
    for (i, o) in outputs.iter().enumerate() {
        let others = outputs.iter().skip(i + 1).chain(inputs.iter());
        for other in others {
            let (a, b) = (o.byte_range(), other.byte_range());
            if !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end {
                return Err(PluginError::invalid(format!(
                    "{} overlaps {} in memory",
                    o.what, other.what
                )));
            }
        }
    }
    Ok(())
}

/// A validated `quantize` request.
#[derive(Debug, Clone)]
pub struct QuantizeArgs {
    pub input: TensorArg,
    pub output: MxArg,
    /// ABI 1.1: also write this copy, `output` with its last two axes swapped (checked:
    /// shape, block layout, format and mode match; disjoint from every other buffer).
    pub transposed: Option<MxArg>,
    /// ABI 1.2: also write `output`'s exact MX values here (checked: bf16, the input's
    /// shape, disjoint from every other buffer).
    pub values: Option<TensorArg>,
    /// ABI 1.3: this plugin's annexes of `output` and `transposed`, of the sizes its
    /// `annex_words` asked for (checked: i32, one axis, disjoint from every other buffer).
    pub annex: Option<TensorArg>,
    pub transposed_annex: Option<TensorArg>,
    /// ABI 1.5: also write the input's values as wgrad quantizes a dense operand.
    pub wgrad_values: Option<WgradValues>,
    /// ABI 1.7: the host calls `fill_bytes` before anything but this plugin's GEMMs reads
    /// the output's bytes, so a backend may leave out the bytes its annex gives back.
    pub bytes_on_demand: bool,
    /// ABI 1.8: the same promise for the output's scales (`bytes_on_demand` = 2).
    pub scales_on_demand: bool,
    /// ABI 1.9: the weight the output will be multiplied with in forward or dgrad, with its
    /// annex (checked: a rank-3 MX tensor whose last axis is the input's, one expert per
    /// wgrad offset, same device as the input; a hint, see `QuantizeDesc::weight`).
    pub weight: Option<MxArg>,
    pub device: DeviceKind,
    pub ordinal: i32,
    pub stream: *mut c_void,
}

/// ABI 1.7 (`PluginApi::fill_bytes`): an MX tensor and the annex its quantize call wrote,
/// whose left-out bytes the backend writes now.
#[derive(Debug, Clone)]
pub struct FillBytesArgs {
    pub tensor: MxArg,
    pub annex: TensorArg,
    pub device: DeviceKind,
    pub ordinal: i32,
    pub stream: *mut c_void,
}

impl FillBytesArgs {
    pub fn parse(desc: &FillBytesDesc) -> PluginResult<Self> {
        let tensor = MxArg::parse(&desc.tensor, "fill_bytes.tensor")?;
        let annex = parse_annex(&desc.annex, "fill_bytes.annex")?;
        let (device, ordinal) = common_device(&[&tensor.data, &tensor.scales, &annex])?;
        check_disjoint(&[&tensor.data], &[&tensor.scales, &annex])?;
        Ok(FillBytesArgs {
            tensor,
            annex,
            device,
            ordinal,
            stream: desc.stream,
        })
    }
}

/// ABI 1.5 (`QuantizeDesc::wgrad_values`): where to write a rank-2 input's values quantized
/// 1×32 along axis 0 with each segment's blocks starting at its first row, and dequantized.
#[derive(Debug, Clone)]
pub struct WgradValues {
    /// bf16, the input's shape (checked; disjoint from every other buffer).
    pub out: TensorArg,
    /// Cumulative end offsets of the experts, checked as a GEMM's.
    pub offs: Vec<usize>,
}

impl WgradValues {
    /// The row ranges that get their own blocks: each expert's, then the padding rows
    /// after the last offset (one more segment, empty when there are none).
    pub fn segments(&self, rows: usize) -> Vec<Range<usize>> {
        let mut g = groups_from_offs(&self.offs);
        g.push(self.offs.last().copied().unwrap_or(0)..rows);
        g
    }

    /// Whether every segment starts on a multiple of 32, so that the blocks are those of
    /// a 1×32 quantization along axis 0 from row 0 (what a fused kernel computes).
    pub fn aligned(&self) -> bool {
        self.offs.iter().all(|o| o % 32 == 0)
    }
}

impl QuantizeArgs {
    /// # Safety
    /// `desc.wgrad_offs` is null or valid for reading `desc.wgrad_num_groups` `i32`s, as
    /// the ABI requires (read only when `wgrad_values` is present).
    pub unsafe fn parse(desc: &QuantizeDesc) -> PluginResult<Self> {
        let input = TensorArg::parse(&desc.input, "quantize.input")?;
        input.expect_dtype(&[DType::F32, DType::Bf16])?;
        let output = MxArg::parse(&desc.output, "quantize.output")?;
        output.data.expect_shape(&input.shape)?;
        let transposed = if desc.transposed.is_absent() {
            None
        } else {
            let t = MxArg::parse(&desc.transposed, "quantize.transposed")?;
            let rank = input.shape.len();
            if rank < 2 {
                return Err(PluginError::invalid(
                    "quantize.transposed: the input needs at least two axes",
                ));
            }
            t.data
                .expect_shape(&mxhost_plugin_abi::transposed_shape(&input.shape))?;
            let block_t = mxhost_plugin_abi::transposed_block(output.block, rank);
            if t.block != block_t || t.format != output.format || t.mode != output.mode {
                return Err(PluginError::invalid(
                    "quantize.transposed: block layout, format and mode must be the output's, with the last two axes swapped",
                ));
            }
            Some(t)
        };
        let values = if desc.values.is_absent() {
            None
        } else {
            let v = TensorArg::parse(&desc.values, "quantize.values")?;
            v.expect_dtype(&[DType::Bf16])?;
            v.expect_shape(&input.shape)?;
            Some(v)
        };
        let annex = (!desc.annex.is_absent())
            .then(|| parse_annex(&desc.annex, "quantize.annex"))
            .transpose()?;
        let transposed_annex = (!desc.transposed_annex.is_absent())
            .then(|| parse_annex(&desc.transposed_annex, "quantize.transposed_annex"))
            .transpose()?;
        if transposed_annex.is_some() && transposed.is_none() {
            return Err(PluginError::invalid(
                "quantize.transposed_annex without quantize.transposed",
            ));
        }
        let wgrad_values = if desc.wgrad_values.is_absent() {
            None
        } else {
            let v = TensorArg::parse(&desc.wgrad_values, "quantize.wgrad_values")?;
            v.expect_dtype(&[DType::Bf16])?;
            v.expect_shape(&input.shape)?;
            if input.shape.len() != 2 {
                return Err(PluginError::invalid(
                    "quantize.wgrad_values: the input must have two axes [rows, C]",
                ));
            }
            // SAFETY: this function's precondition.
            let offs = unsafe {
                read_offsets(
                    desc.wgrad_offs,
                    desc.wgrad_num_groups as usize,
                    input.shape[0] as usize,
                    "quantize.wgrad_offs",
                )?
            };
            Some(WgradValues { out: v, offs })
        };
        let mut tensors = vec![&input, &output.data, &output.scales];
        let mut outs = vec![&output.data, &output.scales];
        for a in annex.iter().chain(transposed_annex.iter()) {
            tensors.push(a);
            outs.push(a);
        }
        if let Some(t) = &transposed {
            tensors.extend([&t.data, &t.scales]);
            outs.extend([&t.data, &t.scales]);
        }
        if let Some(v) = &values {
            tensors.push(v);
            outs.push(v);
        }
        if let Some(w) = &wgrad_values {
            tensors.push(&w.out);
            outs.push(&w.out);
        }
        let weight = parse_weight(desc, &input, wgrad_values.as_ref())?;
        if let Some(w) = &weight {
            tensors.extend([&w.data, &w.scales]);
            tensors.extend(w.annex.iter());
        }
        let (device, ordinal) = common_device(&tensors)?;
        let weight_in: Vec<&TensorArg> = weight
            .iter()
            .flat_map(|w| [&w.data, &w.scales].into_iter().chain(w.annex.iter()))
            .collect();
        let mut inputs = vec![&input];
        inputs.extend(weight_in);
        check_disjoint(&outs, &inputs)?;
        if desc.bytes_on_demand > BYTES_ON_DEMAND_WITH_SCALES {
            return Err(PluginError::invalid(format!(
                "options.bytes_on_demand must be 0, 1 or 2 (ABI 1.8: with the scales), got {}",
                desc.bytes_on_demand
            )));
        }
        Ok(QuantizeArgs {
            input,
            output,
            transposed,
            values,
            annex,
            transposed_annex,
            wgrad_values,
            bytes_on_demand: desc.bytes_on_demand != 0,
            scales_on_demand: desc.bytes_on_demand == BYTES_ON_DEMAND_WITH_SCALES,
            weight,
            device,
            ordinal,
            stream: desc.stream,
        })
    }
}

/// `QuantizeDesc::weight` with its annex (ABI 1.9), checked against the input: `[E, cols,
/// red]` with `red` the input's last axis, and `E` the wgrad offsets' count when there are any.
fn parse_weight(
    desc: &QuantizeDesc,
    input: &TensorArg,
    wgrad_values: Option<&WgradValues>,
) -> PluginResult<Option<MxArg>> {
    if desc.weight.is_absent() {
        return Ok(None);
    }
    if desc.weight_annex.is_absent() {
        return Err(PluginError::invalid(
            "quantize.weight without quantize.weight_annex",
        ));
    }
    let w = MxArg::parse(&desc.weight, "quantize.weight")?
        .with_annex(&desc.weight_annex, "quantize.weight")?;
    let (ws, xs) = (&w.data.shape, &input.shape);
    let experts = wgrad_values.map(|v| v.offs.len() as u64);
    if ws.len() != 3 || xs.last() != ws.last() || experts.is_some_and(|e| e != ws[0]) {
        return Err(PluginError::invalid(format!(
            "quantize.weight: shape {ws:?} does not fit an input of shape {xs:?}{} (want [E, cols, {}])",
            experts.map_or(String::new(), |e| format!(" with {e} experts")),
            xs.last().copied().unwrap_or(0)
        )));
    }
    Ok(Some(w))
}

/// A validated annex query (ABI 1.3): which MX tensor a quantize call will write.
#[derive(Debug, Clone)]
pub struct AnnexSpec {
    pub shape: Vec<u64>,
    pub format: MxFormat,
    pub block: Blocking,
    pub device: DeviceKind,
    pub keeps_values: bool,
    /// ABI 1.4: the host keeps the partner result of a transposing quantize alive as long
    /// as this annex (false in a 1.3 query).
    pub partner_kept: bool,
    /// ABI 1.6: the tensor is quantized to be a GEMM operand (false in an older query).
    pub for_gemm: bool,
}

impl AnnexSpec {
    /// `q` as read by `read_desc_grown` (a 1.3 query reads `partner_kept` as 0).
    pub fn parse(q: &AnnexQuery) -> PluginResult<Self> {
        check_struct_size("annex query", q.struct_size, ANNEX_QUERY_SIZE_1_3)?;
        let rank = q.rank as usize;
        if rank == 0 || rank > MAX_RANK {
            return Err(PluginError::invalid(format!(
                "annex query: rank {rank} is outside 1..={MAX_RANK}"
            )));
        }
        let format = MxFormat::from_raw(q.format).ok_or_else(|| {
            PluginError::invalid(format!("annex query: unknown MX format {}", q.format))
        })?;
        let shape = q.shape[..rank].to_vec();
        let block = Blocking::from_abi(q.block)
            .filter(|_| scale_shape(&shape, q.block).is_some())
            .ok_or_else(|| {
                PluginError::invalid(format!(
                    "annex query: block layout {:?} is invalid for shape {}",
                    q.block,
                    fmt_shape(&shape)
                ))
            })?;
        let device = DeviceKind::from_raw(q.device).ok_or_else(|| {
            PluginError::invalid(format!("annex query: unknown device kind {}", q.device))
        })?;
        Ok(AnnexSpec {
            shape,
            format,
            block,
            device,
            keeps_values: q.keeps_values != 0,
            partner_kept: q.partner_kept != 0,
            for_gemm: q.for_gemm != 0,
        })
    }
}

/// A validated `dequantize` request.
#[derive(Debug, Clone)]
pub struct DequantizeArgs {
    pub input: MxArg,
    pub output: TensorArg,
    pub device: DeviceKind,
    pub ordinal: i32,
    pub stream: *mut c_void,
}

impl DequantizeArgs {
    pub fn parse(desc: &DequantizeDesc) -> PluginResult<Self> {
        let input = MxArg::parse(&desc.input, "dequantize.input")?;
        let output = TensorArg::parse(&desc.output, "dequantize.output")?;
        output.expect_dtype(&[DType::F32, DType::Bf16])?;
        output.expect_shape(input.shape())?;
        let (device, ordinal) = common_device(&[&input.data, &input.scales, &output])?;
        check_disjoint(&[&output], &[&input.data, &input.scales])?;
        Ok(DequantizeArgs {
            input,
            output,
            device,
            ordinal,
            stream: desc.stream,
        })
    }
}

/// Parse an ABI boolean knob: 0 or 1.
fn flag(what: &str, raw: u32) -> PluginResult<bool> {
    match raw {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(PluginError::invalid(format!(
            "options.{what} must be 0 or 1, got {raw}"
        ))),
    }
}

/// A validated grouped-GEMM request.
#[derive(Debug, Clone)]
pub struct GemmArgs {
    pub pass: GemmPass,
    pub a: OperandArg,
    pub b: OperandArg,
    /// Cumulative end offsets, one per group, non-decreasing, last ≤ `rows`.
    pub offs: Vec<usize>,
    pub out: TensorArg,
    /// Raw `options.format`; see [`GemmArgs::format`].
    pub format_raw: u32,
    /// Raw `options.mode`; see [`GemmArgs::mode`].
    pub mode_raw: u32,
    pub weight_blocks_2d: bool,
    pub weight_layout: WeightLayout,
    pub rows: usize,
    pub n: usize,
    pub k: usize,
    pub device: DeviceKind,
    pub ordinal: i32,
    pub offs_device: *const c_void,
    pub stream: *mut c_void,
    /// ABI 1.5: which of `a`, `b` came as [`OperandKind::DenseMxValues`]: dense, already
    /// quantized along axis 0 per `offs` in the options' format and mode (wgrad only).
    pub dense_on_grid: [bool; 2],
}

impl GemmArgs {
    /// Validate `desc`. Rejects `hadamard`/`dge`/`bias` = 1 as Unsupported (no plugin
    /// implements them yet).
    ///
    /// # Safety
    /// `desc.offs_host` is null or valid for reading `desc.num_groups` `i32`s, as the
    /// ABI requires. It is only read after the weight (or wgrad output) shape has been
    /// checked to have `num_groups` experts.
    pub unsafe fn parse(desc: &GroupedGemmDesc) -> PluginResult<Self> {
        let pass = GemmPass::from_raw(desc.pass)
            .ok_or_else(|| PluginError::invalid(format!("unknown GEMM pass {}", desc.pass)))?;
        let o = &desc.options;
        check_struct_size(
            "grouped_gemm.options",
            o.struct_size,
            std::mem::size_of_val(o),
        )?;
        for (what, raw) in [("hadamard", o.hadamard), ("dge", o.dge), ("bias", o.bias)] {
            if flag(what, raw)? {
                return Err(PluginError::unsupported(format!(
                    "options.{what} = 1 is not implemented by this plugin"
                )));
            }
        }
        let weight_blocks_2d = flag("weight_blocks_2d", o.weight_blocks_2d)?;
        let weight_layout = WeightLayout::from_raw(o.weight_layout).ok_or_else(|| {
            PluginError::invalid(format!("unknown weight layout {}", o.weight_layout))
        })?;

        let (a, a_on_grid) = OperandArg::parse_marked(&desc.a, "grouped_gemm.a")?;
        let (b, b_on_grid) = OperandArg::parse_marked(&desc.b, "grouped_gemm.b")?;
        if (a_on_grid || b_on_grid) && pass != GemmPass::Wgrad {
            return Err(PluginError::invalid(
                "dense operands on an MX grid (DenseMxValues) are wgrad operands only",
            ));
        }
        let out = TensorArg::parse(&desc.out, "grouped_gemm.out")?;
        out.expect_dtype(&[DType::F32, DType::Bf16])?;

        let too_big =
            |what: &str| PluginError::invalid(format!("grouped_gemm.{what} does not fit in usize"));
        let rows = usize::try_from(desc.rows).map_err(|_| too_big("rows"))?;
        let n = usize::try_from(desc.n).map_err(|_| too_big("n"))?;
        let k = usize::try_from(desc.k).map_err(|_| too_big("k"))?;
        let e = desc.num_groups as u64;
        let (r, n64, k64) = (desc.rows, desc.n, desc.k);
        let weights = match weight_layout {
            WeightLayout::Nk => [e, n64, k64],
            WeightLayout::Kn => [e, k64, n64],
        };
        match pass {
            GemmPass::Forward => {
                a.expect_shape(&[r, k64])?;
                b.expect_shape(&weights)?;
                out.expect_shape(&[r, n64])?;
            }
            GemmPass::Dgrad => {
                a.expect_shape(&[r, n64])?;
                b.expect_shape(&weights)?;
                out.expect_shape(&[r, k64])?;
            }
            GemmPass::Wgrad => {
                a.expect_shape(&[r, n64])?;
                b.expect_shape(&[r, k64])?;
                out.expect_shape(&weights)?;
            }
        }

        let mut tensors = a.tensors();
        tensors.extend(b.tensors());
        tensors.push(&out);
        let (device, ordinal) = common_device(&tensors)?;
        check_disjoint(&[&out], &tensors[..tensors.len() - 1])?;

        // SAFETY: this function's precondition; `num_groups` equals a dimension of a tensor
        // whose byte size was checked to fit in memory, so it is not an absurd length.
        let offs = unsafe {
            read_offsets(
                desc.offs_host,
                desc.num_groups as usize,
                rows,
                "grouped_gemm.offs_host",
            )?
        };

        Ok(GemmArgs {
            pass,
            a,
            b,
            offs,
            out,
            format_raw: o.format,
            mode_raw: o.mode,
            weight_blocks_2d,
            weight_layout,
            rows,
            n,
            k,
            device,
            ordinal,
            offs_device: desc.offs_device,
            stream: desc.stream,
            dense_on_grid: [a_on_grid, b_on_grid],
        })
    }

    /// `options.format`, for plugins that quantize dense operands.
    pub fn format(&self) -> PluginResult<MxFormat> {
        MxFormat::from_raw(self.format_raw).ok_or_else(|| {
            PluginError::invalid(format!(
                "options.format: unknown MX format {}",
                self.format_raw
            ))
        })
    }

    /// `options.mode`, for plugins that quantize dense operands.
    pub fn mode(&self) -> PluginResult<ScaleMode> {
        ScaleMode::from_raw(self.mode_raw).ok_or_else(|| {
            PluginError::invalid(format!(
                "options.mode: unknown scale mode {}",
                self.mode_raw
            ))
        })
    }

    /// Row range of each group (`offs[g-1]..offs[g]`, with `offs[-1] = 0`).
    pub fn groups(&self) -> Vec<Range<usize>> {
        groups_from_offs(&self.offs)
    }
}

/// Read and check `groups` cumulative end offsets at `ptr` (host memory): non-negative,
/// non-decreasing, the last ≤ `rows`.
///
/// # Safety
/// `ptr` is null or valid for reading `groups` `i32`s.
unsafe fn read_offsets(
    ptr: *const i32,
    groups: usize,
    rows: usize,
    what: &str,
) -> PluginResult<Vec<usize>> {
    let raw_offs: &[i32] = if groups == 0 {
        &[]
    } else if ptr.is_null() {
        return Err(PluginError::invalid(format!("{what} is null")));
    } else if !(ptr as usize).is_multiple_of(std::mem::align_of::<i32>()) {
        return Err(PluginError::invalid(format!(
            "{what} is not 4-byte aligned"
        )));
    } else {
        // SAFETY: non-null and aligned (checked above); valid for `groups` reads by this
        // function's precondition.
        unsafe { std::slice::from_raw_parts(ptr, groups) }
    };
    let mut offs = Vec::with_capacity(groups);
    let mut prev = 0usize;
    for (g, &end) in raw_offs.iter().enumerate() {
        let end_u = usize::try_from(end)
            .map_err(|_| PluginError::invalid(format!("offs[{g}] = {end} is negative")))?;
        if end_u < prev {
            return Err(PluginError::invalid(format!(
                "offs must be non-decreasing: offs[{g}] = {end} < offs[{}] = {prev}",
                g.wrapping_sub(1)
            )));
        }
        if end_u > rows {
            return Err(PluginError::invalid(format!(
                "offs[{g}] = {end} exceeds rows = {rows}"
            )));
        }
        offs.push(end_u);
        prev = end_u;
    }
    Ok(offs)
}

/// Row ranges of the groups described by cumulative end offsets.
pub fn groups_from_offs(offs: &[usize]) -> Vec<Range<usize>> {
    let mut start = 0;
    offs.iter()
        .map(|&end| {
            let r = start..end;
            start = end;
            r
        })
        .collect()
}
