//! `#[repr(C)]` descriptions of tensors, MX operands and requests crossing the plugin
//! boundary, plus the shape rules (scale-tensor shapes, block tails) both sides share.
//!
//! Every tensor is dense and row-major. Enumerations travel as `u32` so that an unknown
//! value from a newer peer is detected (`from_raw` returns `None`) instead of being
//! undefined behaviour.

use std::ffi::c_void;

/// Largest tensor rank the ABI carries.
pub const MAX_RANK: usize = 4;
/// Elements per MX block along one axis (1×32 vectors and 32×32 tiles).
pub const MX_BLOCK: u64 = 32;

macro_rules! abi_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:expr),* $(,)? }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v = $n),* }
        impl $name {
            pub fn from_raw(raw: u32) -> Option<Self> {
                match raw { $($n => Some(Self::$v),)* _ => None }
            }
        }
    };
}

abi_enum!(
    /// Element type of a buffer.
    DType {
        F32 = 0,
        Bf16 = 1,
        /// FP8 E4M3 (OCP "FN": no Inf, max 448), one byte per element.
        E4m3 = 2,
        /// FP8 E5M2, one byte per element.
        E5m2 = 3,
        /// E8M0 scale byte: value 2^(b-127), 0xFF = NaN.
        E8m0 = 4,
        I32 = 5,
    }
);

impl DType {
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::Bf16 => 2,
            DType::E4m3 | DType::E5m2 | DType::E8m0 => 1,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::E4m3 => "e4m3",
            DType::E5m2 => "e5m2",
            DType::E8m0 => "e8m0",
            DType::I32 => "i32",
        }
    }
}

abi_enum!(
    /// Where a buffer lives.
    DeviceKind { Cpu = 0, Cuda = 1, Hip = 2 }
);

abi_enum!(
    /// MX element format.
    MxFormat { E4m3 = 0, E5m2 = 1 }
);

impl MxFormat {
    pub fn dtype(self) -> DType {
        match self {
            MxFormat::E4m3 => DType::E4m3,
            MxFormat::E5m2 => DType::E5m2,
        }
    }
}

abi_enum!(
    /// How a block's E8M0 scale is chosen from its absolute maximum.
    ScaleMode {
        /// amax / elem_max rounded up to a power of two (TE, torchao). Default.
        Rceil = 0,
        /// OCP MX v1.0: floor(log2 amax) - emax_elem.
        Floor = 1,
        /// The reference project's rule: amax rounded to the element mantissa, half up.
        Even = 2,
    }
);

abi_enum!(
    /// Which pass of a grouped linear layer a GEMM computes.
    GemmPass {
        /// out[M,N] = A[M,K] · W_eᵀ   (A = X, rows of expert e)
        Forward = 0,
        /// out[M,K] = A[M,N] · W_e    (A = dY)
        Dgrad = 1,
        /// out_e = A_eᵀ · B_e         (A = dY [M,N], B = X [M,K]); out [E,N,K] or [E,K,N]
        Wgrad = 2,
    }
);

abi_enum!(
    /// Storage of the weight (or weight-gradient) tensor.
    WeightLayout {
        /// `[E, N, K]`: nn.Linear layout, W_e maps K inputs to N outputs.
        Nk = 0,
        /// `[E, K, N]`: the transposed storage.
        Kn = 1,
    }
);

abi_enum!(
    /// Shape of the blocks sharing one scale.
    BlockKind {
        /// 1×32 along `BlockLayout::axis`.
        Vector = 0,
        /// 32×32 over the last two axes.
        Tile32x32 = 1,
    }
);

/// Block layout of an MX tensor.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    /// A [`BlockKind`] value.
    pub kind: u32,
    /// For `Vector`: the axis blocks run along; must be one of the last two axes.
    pub axis: u32,
}

impl BlockLayout {
    pub fn vector(axis: u32) -> Self {
        BlockLayout {
            kind: BlockKind::Vector as u32,
            axis,
        }
    }
    pub fn tile() -> Self {
        BlockLayout {
            kind: BlockKind::Tile32x32 as u32,
            axis: 0,
        }
    }
}

/// Number of blocks covering `n` elements: the last block holds the tail.
pub fn blocks(n: u64) -> u64 {
    n.div_ceil(MX_BLOCK)
}

/// Shape of the E8M0 scale tensor for data of shape `shape` in `layout`.
///
/// Leading axes (before the last two) are batch axes (experts) and are kept. Along a
/// blocked axis of length n there are `ceil(n/32)` scales; the last block covers the
/// remaining `n mod 32` elements as if zero-padded. Returns `None` for an invalid
/// layout (unknown kind, axis not among the last two, tile on a rank-1 tensor).
pub fn scale_shape(shape: &[u64], layout: BlockLayout) -> Option<Vec<u64>> {
    let rank = shape.len();
    if rank == 0 {
        return None;
    }
    let mut out = shape.to_vec();
    match BlockKind::from_raw(layout.kind)? {
        BlockKind::Vector => {
            let axis = layout.axis as usize;
            if axis >= rank || axis + 2 < rank {
                return None;
            }
            out[axis] = blocks(shape[axis]);
        }
        BlockKind::Tile32x32 => {
            if rank < 2 {
                return None;
            }
            out[rank - 1] = blocks(shape[rank - 1]);
            out[rank - 2] = blocks(shape[rank - 2]);
        }
    }
    Some(out)
}

/// A dense, row-major tensor owned by the host.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TensorView {
    pub struct_size: usize,
    /// Host pointer for `Cpu`, device pointer (`CUdeviceptr` as a pointer) for `Cuda`.
    pub data: *mut c_void,
    /// A [`DType`] value.
    pub dtype: u32,
    /// A [`DeviceKind`] value.
    pub device: u32,
    pub device_ordinal: i32,
    pub rank: u32,
    /// Only the first `rank` entries are meaningful.
    pub shape: [u64; MAX_RANK],
}

impl TensorView {
    pub fn empty() -> Self {
        TensorView {
            struct_size: std::mem::size_of::<TensorView>(),
            data: std::ptr::null_mut(),
            dtype: DType::F32 as u32,
            device: DeviceKind::Cpu as u32,
            device_ordinal: 0,
            rank: 0,
            shape: [0; MAX_RANK],
        }
    }
    /// The "absent" view of an optional descriptor field (`struct_size` 0).
    pub fn absent() -> Self {
        TensorView {
            struct_size: 0,
            ..TensorView::empty()
        }
    }
    pub fn is_absent(&self) -> bool {
        self.struct_size == 0
    }
    pub fn dims(&self) -> &[u64] {
        &self.shape[..(self.rank as usize).min(MAX_RANK)]
    }
    pub fn numel(&self) -> u64 {
        self.dims().iter().product()
    }
    pub fn dtype(&self) -> Option<DType> {
        DType::from_raw(self.dtype)
    }
}

/// An MX tensor: element bytes with the logical shape, E8M0 scale bytes with
/// [`scale_shape`], the format and the block layout.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MxTensorView {
    pub struct_size: usize,
    pub data: TensorView,
    pub scales: TensorView,
    /// An [`MxFormat`] value.
    pub format: u32,
    /// The [`ScaleMode`] the scales were chosen with (informational for GEMMs).
    pub mode: u32,
    pub block: BlockLayout,
}

abi_enum!(
    /// Which member of an [`Operand`] is set.
    OperandKind {
        /// High precision (f32 or bf16); the plugin quantizes it if it computes in MX.
        Dense = 0,
        /// Already quantized.
        Mx = 1,
        /// ABI 1.2: already quantized, and `dense` holds its exact MX values in bf16 with
        /// the shape of `mx.data` (what `QuantizeDesc::values` wrote). A plugin may compute
        /// from either member: they are the same numbers. A host sends this kind only to
        /// plugins of minor ≥ 2.
        MxWithValues = 2,
        /// ABI 1.2: as `MxWithValues`, but `dense` holds the values with the last two axes
        /// swapped (shape `transposed_shape(mx.data.shape)`): the copy a
        /// `quantize`-with-`transposed` call keeps once for both of its results.
        MxWithValuesSwapped = 3,
        /// ABI 1.3: already quantized, and `dense` is the tensor's *annex*: plugin-private
        /// data (an i32 tensor `[words]`, opaque to the host) that the same plugin's quantize
        /// call wrote beside it (`QuantizeDesc::annex`), e.g. a re-encoded copy a faster
        /// kernel reads. A plugin must compute the same result with or without it. A host
        /// sends this kind only to the plugin that wrote the annex, of minor ≥ 3.
        MxWithAnnex = 4,
        /// ABI 1.5: dense (`dense`, bf16), and its values are already what the plugin would
        /// quantize it to in this call: the MX values of a 1×32 quantization along axis 0
        /// with blocks restarting at each expert's first row of this call's offsets, in the
        /// options' format and mode (what [`QuantizeDesc::wgrad_values`] wrote with the same
        /// offsets). A plugin may compute from it as is instead of quantizing it again; the
        /// two give the same numbers (quantizing MX values again returns them; values below
        /// 2^-126, which bf16 rounds, aside). wgrad operands only. A host sends this kind only
        /// to plugins of minor ≥ 5.
        DenseMxValues = 5,
    }
);

/// A GEMM operand: dense or pre-quantized.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub struct_size: usize,
    /// An [`OperandKind`] value.
    pub kind: u32,
    pub dense: TensorView,
    pub mx: MxTensorView,
}

/// Precision and feature options of a grouped GEMM. Booleans are 0 or 1.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GemmOptions {
    pub struct_size: usize,
    /// [`MxFormat`] used when the plugin quantizes dense operands.
    pub format: u32,
    /// [`ScaleMode`] used when the plugin quantizes dense operands.
    pub mode: u32,
    /// Quantize weights (forward, dgrad) with 32×32 tiles instead of 1×32 vectors.
    pub weight_blocks_2d: u32,
    /// [`WeightLayout`] of the weight operand (forward, dgrad) or the output (wgrad).
    pub weight_layout: u32,
    /// Knobs a guard must be able to reject; no current plugin implements them.
    pub hadamard: u32,
    pub dge: u32,
    pub bias: u32,
}

/// One grouped GEMM pass. The host has validated every shape against `offs` before
/// the call; the sizes below are the logical ones it derived.
///
/// Rows of `a` (and of `b` for wgrad) are sorted by expert: expert `e` owns rows
/// `offs[e-1]..offs[e]` (with `offs[-1] = 0`). Rows at or after `offs[E-1]` are
/// padding: the forward/dgrad output rows there are written as zeros and wgrad ignores
/// them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GroupedGemmDesc {
    pub struct_size: usize,
    /// A [`GemmPass`] value.
    pub pass: u32,
    /// forward: X `[rows, K]`; dgrad: dY `[rows, N]`; wgrad: dY `[rows, N]`.
    pub a: Operand,
    /// forward/dgrad: W `[E, N, K]` or `[E, K, N]`; wgrad: X `[rows, K]`.
    pub b: Operand,
    /// Cumulative end offsets, `num_groups` entries, in host memory.
    pub offs_host: *const i32,
    /// The same offsets in device memory when the tensors are on a device, else null.
    pub offs_device: *const c_void,
    pub num_groups: u32,
    /// forward `[rows, N]`, dgrad `[rows, K]`, wgrad `[E, N, K]` or `[E, K, N]`; f32 or bf16.
    pub out: TensorView,
    pub options: GemmOptions,
    /// Rows in the A buffer (≥ `offs[E-1]`).
    pub rows: u64,
    pub n: u64,
    pub k: u64,
    /// Backend stream (`CUstream`), null for the CPU or the default stream.
    pub stream: *mut c_void,
}

/// Quantize `input` (f32 or bf16) into the preallocated `output` (data and scale
/// buffers shaped by the host from `output.block`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct QuantizeDesc {
    pub struct_size: usize,
    pub input: TensorView,
    pub output: MxTensorView,
    pub stream: *mut c_void,
    /// ABI 1.1: also write `output` with its last two axes swapped (data and scales
    /// transposed; the block layout follows the axes), from the same pass. That is the
    /// quantization of `inputᵀ`, so one call gives a weight in both layouts a training
    /// step's GEMMs read. Absent when `struct_size` is 0 (and in a 1.0 descriptor, which
    /// ends before this field).
    pub transposed: MxTensorView,
    /// ABI 1.2: also write `output`'s exact MX values (what `dequantize` would give) as
    /// bf16 here, shape of `input`, from the same pass, so that GEMMs on the BF16 tensor
    /// cores read them instead of expanding the FP8 bytes each call. Absent when
    /// `struct_size` is 0 (and in an older descriptor, which ends before this field).
    pub values: TensorView,
    /// ABI 1.3: the plugin's annex of `output` (see [`OperandKind::MxWithAnnex`]), an i32
    /// tensor of the size [`AnnexQuery`] returned for it, to be written in the same call.
    /// Absent when the plugin asked for none (and in an older descriptor).
    pub annex: TensorView,
    /// ABI 1.3: the same for `transposed`.
    pub transposed_annex: TensorView,
    /// ABI 1.5: also write `input`'s values quantized as wgrad quantizes a dense operand
    /// (1×32 blocks along axis 0, each expert's blocks starting at its first row per
    /// `wgrad_offs`, `output`'s format and mode) and dequantized, as bf16 of `input`'s shape
    /// (rank 2), from the same pass where the plugin can: a training step's X and dY then
    /// cross memory once for forward or dgrad and wgrad ([`OperandKind::DenseMxValues`]).
    /// Absent when `struct_size` is 0 (and in an older descriptor).
    pub wgrad_values: TensorView,
    /// ABI 1.5: the cumulative end offsets of `wgrad_values`' experts (`wgrad_num_groups`
    /// entries, host memory, as [`GroupedGemmDesc::offs_host`]); rows at or after the last
    /// one are padding, written with blocks from the last offset on.
    pub wgrad_offs: *const i32,
    pub wgrad_num_groups: u32,
    /// ABI 1.7: 1 when the host will call `PluginApi::fill_bytes` with `output` (and with
    /// `transposed`) and its annex before anything but this plugin's GEMMs reads its bytes:
    /// the plugin may then leave out the bytes its annex gives back, and its GEMMs must
    /// write them first wherever they read them. ABI 1.8: 2 when the host asks before it
    /// reads the bytes or the scales ([`BYTES_ON_DEMAND_WITH_SCALES`]): the plugin may leave
    /// out both. 0 in an older descriptor.
    pub bytes_on_demand: u32,
    /// ABI 1.9: the weight `output` will be multiplied with as the `a` operand of forward or
    /// dgrad (W `[E, N, K]` for X, the transposed copy `[E, K, N]` for dY), already quantized
    /// by this plugin with its annex (`weight_annex`), so that the plugin may write only the
    /// part of `output`'s annex that GEMM reads. A hint: any GEMM computes the same result
    /// whatever was passed here, at most slower with another weight. The host checks that the
    /// weight's last axis is `input`'s and that it has one expert per `wgrad_offs` entry.
    /// Absent (and `weight_annex` absent) when the caller named none, and in an older
    /// descriptor; a host sets it only for plugins that report minor ≥ 9.
    pub weight: MxTensorView,
    pub weight_annex: TensorView,
}

/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.0 host (no `transposed`).
pub const QUANTIZE_DESC_SIZE_1_0: usize = std::mem::offset_of!(QuantizeDesc, transposed);
/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.1 host (no `values`).
pub const QUANTIZE_DESC_SIZE_1_1: usize = std::mem::offset_of!(QuantizeDesc, values);
/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.2 host (no annexes).
pub const QUANTIZE_DESC_SIZE_1_2: usize = std::mem::offset_of!(QuantizeDesc, annex);
/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.3–1.4 host (no wgrad values).
pub const QUANTIZE_DESC_SIZE_1_4: usize = std::mem::offset_of!(QuantizeDesc, wgrad_values);
/// [`QuantizeDesc::bytes_on_demand`]: the host asks before it reads the bytes (ABI 1.7).
pub const BYTES_ON_DEMAND: u32 = 1;
/// [`QuantizeDesc::bytes_on_demand`]: the host asks before it reads the bytes or the scales
/// (ABI 1.8; set only for plugins that report minor ≥ 8).
pub const BYTES_ON_DEMAND_WITH_SCALES: u32 = 2;

/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.5–1.6 host (no `bytes_on_demand`).
pub const QUANTIZE_DESC_SIZE_1_6: usize = std::mem::offset_of!(QuantizeDesc, bytes_on_demand);
/// `struct_size` of a [`QuantizeDesc`] written by an ABI 1.7–1.8 host (no `weight`).
pub const QUANTIZE_DESC_SIZE_1_8: usize = std::mem::offset_of!(QuantizeDesc, weight);

/// ABI 1.3: which annex a plugin wants beside one MX tensor a quantize call will write
/// ([`crate::PluginApi::annex_words`]). The host asks before it allocates the outputs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AnnexQuery {
    pub struct_size: usize,
    /// The MX tensor's logical shape (first `rank` entries).
    pub rank: u32,
    pub shape: [u64; MAX_RANK],
    /// An [`MxFormat`] value.
    pub format: u32,
    pub block: BlockLayout,
    /// A [`DeviceKind`] value: where the tensor will live.
    pub device: u32,
    /// 1 when the same call also keeps the values in bf16 (`QuantizeDesc::values`).
    pub keeps_values: u32,
    /// ABI 1.4: 1 when the tensor is one of the two results of a transposing quantize
    /// (`QuantizeDesc::transposed`) and the host keeps its partner's data alive, unchanged,
    /// for as long as this tensor's annex lives. The plugin's annex may then refer to the
    /// partner's bytes instead of holding a copy of them. A host of ABI 1.7 or later keeps the
    /// partner's annex alive too, so that where the plugin left bytes out (`bytes_on_demand`)
    /// the annex may read the partner's form in their place. 0 in an older query (which ends
    /// before this field).
    pub partner_kept: u32,
    /// ABI 1.6: 1 when the caller quantizes the tensor to be a GEMM operand and wants the
    /// plugin's GEMM form of it if the plugin has one (WIT `quantize-options.for-gemm`). A
    /// plugin may give an annex without it (a setting of its own) or none with it. 0 in an
    /// older query (which ends before this field).
    pub for_gemm: u32,
}

/// `struct_size` of an [`AnnexQuery`] written by an ABI 1.3 host (no `partner_kept`).
pub const ANNEX_QUERY_SIZE_1_3: usize = std::mem::offset_of!(AnnexQuery, partner_kept);
/// `struct_size` of an [`AnnexQuery`] written by an ABI 1.4–1.5 host (no `for_gemm`).
pub const ANNEX_QUERY_SIZE_1_5: usize = std::mem::offset_of!(AnnexQuery, for_gemm);

impl MxTensorView {
    /// The "absent" view (`struct_size` 0, null buffers).
    pub fn absent() -> Self {
        MxTensorView {
            struct_size: 0,
            data: TensorView::empty(),
            scales: TensorView::empty(),
            format: 0,
            mode: 0,
            block: BlockLayout { kind: 0, axis: 0 },
        }
    }
    pub fn is_absent(&self) -> bool {
        self.struct_size == 0
    }
}

/// `shape` with its last two axes swapped (the shape of a `transposed` copy and of its
/// scales). Shapes of rank < 2 come back unchanged.
pub fn transposed_shape(shape: &[u64]) -> Vec<u64> {
    let mut s = shape.to_vec();
    let rank = s.len();
    if rank >= 2 {
        s.swap(rank - 1, rank - 2);
    }
    s
}

/// The block layout of `x`'s quantization seen with the last two axes of a rank-`rank`
/// tensor swapped: 32×32 tiles stay tiles, 1×32 blocks along one of the last two axes
/// move to the other one, blocks along an earlier axis stay.
pub fn transposed_block(block: BlockLayout, rank: usize) -> BlockLayout {
    if block.kind == BlockLayout::vector(0).kind && rank >= 2 {
        let a = block.axis as usize;
        if a + 1 == rank {
            return BlockLayout::vector(rank as u32 - 2);
        }
        if a + 2 == rank {
            return BlockLayout::vector(rank as u32 - 1);
        }
    }
    block
}

/// Dequantize `input` into the preallocated `output` (f32 or bf16, same shape).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DequantizeDesc {
    pub struct_size: usize,
    pub input: MxTensorView,
    pub output: TensorView,
    pub stream: *mut c_void,
}

/// ABI 1.7: the MX tensor a quantize call with `QuantizeDesc::bytes_on_demand` wrote and the
/// annex it wrote with it; `PluginApi::fill_bytes` writes the tensor's bytes that the call
/// left out (the tensor's data is written in place: its values do not change).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FillBytesDesc {
    pub struct_size: usize,
    pub tensor: MxTensorView,
    pub annex: TensorView,
    pub stream: *mut c_void,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_shapes_follow_the_block_layout() {
        assert_eq!(
            scale_shape(&[100, 64], BlockLayout::vector(1)),
            Some(vec![100, 2])
        );
        assert_eq!(
            scale_shape(&[100, 64], BlockLayout::vector(0)),
            Some(vec![4, 64])
        );
        assert_eq!(
            scale_shape(&[8, 65, 33], BlockLayout::tile()),
            Some(vec![8, 3, 2])
        );
        assert_eq!(scale_shape(&[8, 65, 33], BlockLayout::vector(0)), None);
        assert_eq!(
            scale_shape(&[8, 65, 33], BlockLayout::vector(1)),
            Some(vec![8, 3, 33])
        );
        assert_eq!(scale_shape(&[40], BlockLayout::tile()), None);
        assert_eq!(scale_shape(&[40], BlockLayout::vector(0)), Some(vec![2]));
        assert_eq!(scale_shape(&[], BlockLayout::vector(0)), None);
        assert_eq!(scale_shape(&[4, 4], BlockLayout { kind: 9, axis: 0 }), None);
    }

    #[test]
    fn unknown_enum_values_are_rejected() {
        assert_eq!(DType::from_raw(5), Some(DType::I32));
        assert_eq!(DType::from_raw(6), None);
        assert_eq!(GemmPass::from_raw(3), None);
        assert_eq!(OperandKind::from_raw(4), Some(OperandKind::MxWithAnnex));
        assert_eq!(OperandKind::from_raw(5), Some(OperandKind::DenseMxValues));
        assert_eq!(OperandKind::from_raw(6), None);
    }

    #[test]
    fn older_quantize_descriptors_end_before_the_fields_they_lack() {
        const {
            assert!(QUANTIZE_DESC_SIZE_1_0 < QUANTIZE_DESC_SIZE_1_1);
            assert!(QUANTIZE_DESC_SIZE_1_1 < QUANTIZE_DESC_SIZE_1_2);
            assert!(QUANTIZE_DESC_SIZE_1_2 < QUANTIZE_DESC_SIZE_1_4);
            assert!(QUANTIZE_DESC_SIZE_1_4 < QUANTIZE_DESC_SIZE_1_6);
            assert!(QUANTIZE_DESC_SIZE_1_6 < QUANTIZE_DESC_SIZE_1_8);
            assert!(QUANTIZE_DESC_SIZE_1_8 < std::mem::size_of::<QuantizeDesc>());
            assert!(ANNEX_QUERY_SIZE_1_3 < ANNEX_QUERY_SIZE_1_5);
            assert!(ANNEX_QUERY_SIZE_1_5 < std::mem::size_of::<AnnexQuery>());
        }
    }
}
