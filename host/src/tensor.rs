//! Host-owned tensor storage: what a guest's `tensor` handle points at.
//!
//! Storage is reference-counted so that views (an MX tensor's data and scales, a
//! tensor handed to several handles) share bytes without copies, and it is aligned to
//! 8 bytes so that f32/i32 views of it are sound. Tensors are immutable once a plugin
//! has filled them: every operation allocates its output.

use crate::device::Device;
use crate::error::{OpError, OpResult};
use mxhost_plugin_abi::{
    BlockLayout, DType, DeviceKind, MxFormat, ScaleMode, TensorView, MAX_RANK,
};
use std::borrow::Cow;
use std::sync::Arc;

/// Bytes in host memory, 8-byte aligned.
pub struct CpuBuffer {
    words: Vec<u64>,
    len: usize,
}

impl CpuBuffer {
    pub fn zeroed(len: usize) -> Self {
        CpuBuffer {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes; u8 has no alignment.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
    pub fn as_ptr(&self) -> *const u8 {
        self.words.as_ptr() as *const u8
    }
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.words.as_mut_ptr() as *mut u8
    }
}

/// Where the bytes of a tensor live: host memory, or CUDA device memory (feature
/// `cuda`, freed stream-ordered on drop). Everything else goes through
/// [`Storage::view_ptr`].
pub enum Storage {
    Cpu(CpuBuffer),
    #[cfg(feature = "cuda")]
    Cuda(crate::cuda::DeviceBuffer),
}

impl Storage {
    /// Zero-filled storage of `len` bytes on `device`.
    pub fn zeroed_on(device: Device, len: usize) -> OpResult<Storage> {
        match device {
            Device::Cpu => Ok(Storage::Cpu(CpuBuffer::zeroed(len))),
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => Ok(Storage::Cuda(crate::cuda::device()?.zeros(len)?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(OpError::unsupported(
                "this mxhost build has no CUDA support",
            )),
        }
    }
    /// Storage on `device` holding a copy of `bytes`.
    pub fn from_bytes_on(device: Device, bytes: &[u8]) -> OpResult<Storage> {
        match device {
            Device::Cpu => {
                let mut buf = CpuBuffer::zeroed(bytes.len());
                buf.as_bytes_mut().copy_from_slice(bytes);
                Ok(Storage::Cpu(buf))
            }
            #[cfg(feature = "cuda")]
            Device::Cuda(_) => Ok(Storage::Cuda(crate::cuda::device()?.upload(bytes)?)),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => Err(OpError::unsupported(
                "this mxhost build has no CUDA support",
            )),
        }
    }
    pub fn device(&self) -> DeviceKind {
        match self {
            Storage::Cpu(_) => DeviceKind::Cpu,
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => DeviceKind::Cuda,
        }
    }
    /// The device, with its ordinal.
    pub fn location(&self) -> Device {
        match self {
            Storage::Cpu(_) => Device::Cpu,
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => Device::Cuda(b.ordinal()),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(b) => b.len(),
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => b.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Pointer for read-only views: plugins never write through input views.
    pub fn view_ptr(&self) -> *mut std::ffi::c_void {
        match self {
            Storage::Cpu(b) => b.as_ptr() as *mut std::ffi::c_void,
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => b.device_ptr() as *mut std::ffi::c_void,
        }
    }
    fn view_ptr_mut(&mut self) -> *mut std::ffi::c_void {
        match self {
            Storage::Cpu(b) => b.as_mut_ptr() as *mut std::ffi::c_void,
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => b.device_ptr() as *mut std::ffi::c_void,
        }
    }
}

/// A dense row-major tensor in host-owned storage.
#[derive(Clone)]
pub struct Tensor {
    pub shape: Vec<u64>,
    pub dtype: DType,
    pub storage: Arc<Storage>,
    /// Set by the quantize call that wrote this tensor as wgrad values (ABI 1.5): its
    /// values are already wgrad's quantization of a dense operand with these offsets, so
    /// wgrad passes it to the plugin as `DenseMxValues`. Cleared when the bytes could change.
    pub wgrad_grid: Option<Arc<WgradGrid>>,
}

/// The grid a tensor of wgrad values lies on: 1×32 blocks along axis 0 restarting at each
/// expert of `offs`, in `format` with scales chosen by `mode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WgradGrid {
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub offs: Vec<i32>,
}

impl Tensor {
    /// Wrap a freshly filled buffer. `storage.len()` must equal numel × dtype size.
    pub fn new(shape: Vec<u64>, dtype: DType, storage: Storage) -> Self {
        debug_assert_eq!(
            storage.len() as u64,
            shape.iter().product::<u64>() * dtype.size_bytes()
        );
        Tensor {
            shape,
            dtype,
            storage: Arc::new(storage),
            wgrad_grid: None,
        }
    }

    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn byte_len(&self) -> u64 {
        self.storage.len() as u64
    }

    pub fn device(&self) -> DeviceKind {
        self.storage.device()
    }

    /// The device with its ordinal (where outputs of ops on this tensor go).
    pub fn location(&self) -> Device {
        self.storage.location()
    }

    /// A zero-filled tensor on `device`.
    pub fn zeros_on(device: Device, shape: Vec<u64>, dtype: DType) -> OpResult<Tensor> {
        let bytes = shape.iter().product::<u64>() * dtype.size_bytes();
        let bytes = usize::try_from(bytes)
            .map_err(|_| OpError::invalid("tensor too large for this host"))?;
        Ok(Tensor::new(
            shape,
            dtype,
            Storage::zeroed_on(device, bytes)?,
        ))
    }

    /// A tensor on `device` holding `bytes` (little-endian elements, numel × size).
    pub fn from_bytes_on(
        device: Device,
        shape: Vec<u64>,
        dtype: DType,
        bytes: &[u8],
    ) -> OpResult<Tensor> {
        Ok(Tensor::new(
            shape,
            dtype,
            Storage::from_bytes_on(device, bytes)?,
        ))
    }

    /// The same tensor on `device` (a copy, or a cheap clone when already there).
    pub fn to_device(&self, device: Device) -> OpResult<Tensor> {
        if self.location() == device {
            return Ok(self.clone());
        }
        Tensor::from_bytes_on(device, self.shape.clone(), self.dtype, &self.host_bytes()?)
    }

    /// The bytes in host memory: borrowed for a CPU tensor, downloaded (after
    /// synchronizing the host stream) for a device tensor.
    pub fn host_bytes(&self) -> OpResult<Cow<'_, [u8]>> {
        match &*self.storage {
            Storage::Cpu(b) => Ok(Cow::Borrowed(b.as_bytes())),
            #[cfg(feature = "cuda")]
            Storage::Cuda(b) => Ok(Cow::Owned(b.download()?)),
        }
    }

    /// The ABI view of this tensor. Plugins only write through views of outputs,
    /// which the host allocates fresh for each call.
    pub fn view(&self) -> TensorView {
        let mut shape = [0u64; MAX_RANK];
        shape[..self.shape.len()].copy_from_slice(&self.shape);
        TensorView {
            struct_size: std::mem::size_of::<TensorView>(),
            data: self.storage.view_ptr(),
            dtype: self.dtype as u32,
            device: self.device() as u32,
            device_ordinal: match self.location() {
                Device::Cpu => 0,
                Device::Cuda(i) => i,
            },
            rank: self.shape.len() as u32,
            shape,
        }
    }

    /// A writable view for a plugin's output. Only a tensor nobody else shares can be
    /// written (outputs are allocated fresh for each call), hence `Option`.
    pub fn view_mut(&mut self) -> Option<TensorView> {
        let mut v = self.view();
        v.data = Arc::get_mut(&mut self.storage)?.view_ptr_mut();
        // whoever writes through the view decides what the values are
        self.wgrad_grid = None;
        Some(v)
    }

    /// Whether this tensor holds wgrad's quantization of a dense operand for a wgrad with
    /// these options and offsets (see [`Tensor::wgrad_grid`]).
    pub fn on_wgrad_grid(&self, format: MxFormat, mode: ScaleMode, offs: &[i32]) -> bool {
        self.dtype == DType::Bf16
            && self
                .wgrad_grid
                .as_deref()
                .is_some_and(|g| g.format == format && g.mode == mode && g.offs == offs)
    }

    /// Host bytes of a CPU tensor (`None` for a device tensor: see [`Tensor::host_bytes`]).
    pub fn cpu_bytes(&self) -> Option<&[u8]> {
        match &*self.storage {
            Storage::Cpu(b) => Some(b.as_bytes()),
            #[cfg(feature = "cuda")]
            Storage::Cuda(_) => None,
        }
    }

    /// Values as f32 (f32, bf16, i32 exactly; FP8 and E8M0 as their byte values).
    /// Panics if a device tensor cannot be read back; see [`Tensor::try_to_f32_vec`].
    pub fn to_f32_vec(&self) -> Vec<f32> {
        self.try_to_f32_vec()
            .unwrap_or_else(|e| panic!("reading a tensor back failed: {}", e.message))
    }

    /// Values as f32, downloading a device tensor first.
    pub fn try_to_f32_vec(&self) -> OpResult<Vec<f32>> {
        let bytes = self.host_bytes()?;
        let bytes: &[u8] = &bytes;
        Ok(match self.dtype {
            DType::F32 => bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            DType::Bf16 => bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_bits(u16::from_le_bytes(c.try_into().unwrap())).to_f32())
                .collect(),
            DType::I32 => bytes
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()) as f32)
                .collect(),
            DType::E4m3 | DType::E5m2 | DType::E8m0 => bytes.iter().map(|&b| b as f32).collect(),
        })
    }
}

/// A quantized tensor: element bytes (logical shape) and E8M0 scales.
#[derive(Clone)]
pub struct MxTensor {
    pub data: Tensor,
    pub scales: Tensor,
    pub format: MxFormat,
    pub mode: ScaleMode,
    pub block: BlockLayout,
    /// The exact MX values in bf16, when the quantize call was asked to keep them
    /// (ABI 1.2): GEMMs on the BF16 tensor cores read these instead of expanding the FP8
    /// bytes each call. Shared, not copied, by the two results of a transposing quantize.
    pub values: Option<MxValues>,
    /// The plugin's annex (ABI 1.3), when the quantize call's plugin asked for one: private
    /// data it reads back when the tensor is its GEMM operand. Never copied to another
    /// device (a plugin computes the same result without it).
    pub annex: Option<MxAnnex>,
}

/// A plugin's annex of an [`MxTensor`]: an i32 tensor only the plugin that wrote it reads.
#[derive(Clone)]
pub struct MxAnnex {
    pub tensor: Tensor,
    /// The library of the plugin that wrote it; the host hands it to no other.
    pub plugin: std::path::PathBuf,
    /// ABI 1.4: what the annex may refer to of the other result of the transposing quantize
    /// that wrote it (`AnnexQuery::partner_kept`), kept alive and, being shared, never
    /// written again.
    pub partner: Option<Box<KeptPartner>>,
    /// ABI 1.7: set when the quantize call was told the host would ask for the tensor's
    /// bytes (`QuantizeDesc::bytes_on_demand`), so the plugin may have left some out; shared
    /// by every clone of the tensor. [`crate::ops::ensure_bytes`] asks once before anything
    /// but the plugin's own GEMMs reads them.
    pub bytes_on_demand: Option<Arc<BytesOnDemand>>,
}

/// The parts of a transposing quantize's other result that an annex keeps alive: its bytes
/// (ABI 1.4) and its own annex, where a plugin that left bytes out (ABI 1.7) has the annex
/// read the partner's form in their place (mxfp8's `MXC_BT_FORM`). Keeping only the bytes let
/// a dropped partner's annex be reused while the other result's GEMM still read it (docs/
/// perf.md run 198: the selftest's dgrad on a `Kn` weight quantized before A, 19.6 dB).
#[derive(Clone)]
pub struct KeptPartner {
    pub data: Tensor,
    pub annex: Option<Tensor>,
}

impl KeptPartner {
    pub fn byte_len(&self) -> u64 {
        self.data.byte_len() + self.annex.as_ref().map_or(0, Tensor::byte_len)
    }
}

/// Bytes of an MX tensor that its plugin writes when asked (ABI 1.7, `fill_bytes`).
pub struct BytesOnDemand {
    /// The plugin's name (for errors) and entry.
    pub plugin: String,
    pub fill: mxhost_plugin_abi::EntryFn<mxhost_plugin_abi::FillBytesDesc>,
    /// Whether the plugin has not been asked yet.
    pub pending: std::sync::Mutex<bool>,
}

/// The bf16 values kept beside an [`MxTensor`]'s bytes.
#[derive(Clone)]
pub struct MxValues {
    pub tensor: Tensor,
    /// Stored with the last two axes of the MX tensor's shape swapped (the transposed
    /// result of a transposing quantize shares its partner's values).
    pub swapped: bool,
}

impl MxTensor {
    /// Bytes held: data, scales, kept values and the annex with the partner's data and annex
    /// it keeps alive (counted in full by both tensors that share them).
    pub fn byte_len(&self) -> u64 {
        self.data.byte_len()
            + self.scales.byte_len()
            + self.values.as_ref().map_or(0, |v| v.tensor.byte_len())
            + self.annex.as_ref().map_or(0, |a| {
                a.tensor.byte_len() + a.partner.as_ref().map_or(0, |p| p.byte_len())
            })
    }
    pub fn view(&self) -> mxhost_plugin_abi::MxTensorView {
        mxhost_plugin_abi::MxTensorView {
            struct_size: std::mem::size_of::<mxhost_plugin_abi::MxTensorView>(),
            data: self.data.view(),
            scales: self.scales.view(),
            format: self.format as u32,
            mode: self.mode as u32,
            block: self.block,
        }
    }

    /// The same quantized tensor on `device` (data and scales copied, bytes the plugin left
    /// out written first; see [`Tensor::to_device`]).
    pub fn to_device(&self, device: Device) -> OpResult<MxTensor> {
        if self.data.location() != device {
            crate::ops::ensure_bytes(self)?;
        }
        Ok(MxTensor {
            data: self.data.to_device(device)?,
            scales: self.scales.to_device(device)?,
            format: self.format,
            mode: self.mode,
            block: self.block,
            values: match &self.values {
                Some(v) => Some(MxValues {
                    tensor: v.tensor.to_device(device)?,
                    swapped: v.swapped,
                }),
                None => None,
            },
            annex: None,
        })
    }

    /// A writable view for a quantizer's output (see [`Tensor::view_mut`]).
    pub fn view_mut(&mut self) -> Option<mxhost_plugin_abi::MxTensorView> {
        let mut v = self.view();
        v.data = self.data.view_mut()?;
        v.scales = self.scales.view_mut()?;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor's wgrad grid (ABI 1.5) matches only the same format, mode and offsets, only
    /// in bf16, and is dropped when the tensor is handed out for writing.
    #[test]
    fn the_wgrad_grid_tag_is_exact_and_cleared_on_write() {
        let grid = WgradGrid {
            format: MxFormat::E4m3,
            mode: ScaleMode::Rceil,
            offs: vec![32, 64],
        };
        let mut t = Tensor::zeros_on(Device::Cpu, vec![64, 32], DType::Bf16).unwrap();
        assert!(!t.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Rceil, &[32, 64]));
        t.wgrad_grid = Some(Arc::new(grid.clone()));
        assert!(t.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Rceil, &[32, 64]));
        assert!(!t.on_wgrad_grid(MxFormat::E5m2, ScaleMode::Rceil, &[32, 64]));
        assert!(!t.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Floor, &[32, 64]));
        assert!(!t.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Rceil, &[32, 60]));
        // a clone shares the bytes and the tag; a write through a view drops it
        let c = t.clone();
        assert!(c.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Rceil, &[32, 64]));
        drop(c);
        assert!(t.view_mut().is_some());
        assert!(t.wgrad_grid.is_none());
        let mut f = Tensor::zeros_on(Device::Cpu, vec![64, 32], DType::F32).unwrap();
        f.wgrad_grid = Some(Arc::new(grid));
        assert!(
            !f.on_wgrad_grid(MxFormat::E4m3, ScaleMode::Rceil, &[32, 64]),
            "f32"
        );
    }
}
