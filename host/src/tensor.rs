//! Host-owned tensor storage: what a guest's `tensor` handle points at.
//!
//! Storage is reference-counted so that views (an MX tensor's data and scales, a
//! tensor handed to several handles) share bytes without copies, and it is aligned to
//! 8 bytes so that f32/i32 views of it are sound. Tensors are immutable once a plugin
//! has filled them: every operation allocates its output.

use mxhost_plugin_abi::{
    BlockLayout, DType, DeviceKind, MxFormat, ScaleMode, TensorView, MAX_RANK,
};
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

/// Where the bytes of a tensor live. A CUDA variant joins this enum with the device
/// backend; everything else goes through [`Storage::view_ptr`].
pub enum Storage {
    Cpu(CpuBuffer),
}

impl Storage {
    pub fn device(&self) -> DeviceKind {
        match self {
            Storage::Cpu(_) => DeviceKind::Cpu,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Storage::Cpu(b) => b.len(),
        }
    }
    /// Pointer for read-only views: plugins never write through input views.
    fn view_ptr(&self) -> *mut std::ffi::c_void {
        match self {
            Storage::Cpu(b) => b.as_ptr() as *mut std::ffi::c_void,
        }
    }
    fn view_ptr_mut(&mut self) -> *mut std::ffi::c_void {
        match self {
            Storage::Cpu(b) => b.as_mut_ptr() as *mut std::ffi::c_void,
        }
    }
}

/// A dense row-major tensor in host-owned storage.
#[derive(Clone)]
pub struct Tensor {
    pub shape: Vec<u64>,
    pub dtype: DType,
    pub storage: Arc<Storage>,
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
            device_ordinal: 0,
            rank: self.shape.len() as u32,
            shape,
        }
    }

    /// A writable view for a plugin's output. Only a tensor nobody else shares can be
    /// written (outputs are allocated fresh for each call), hence `Option`.
    pub fn view_mut(&mut self) -> Option<TensorView> {
        let mut v = self.view();
        v.data = Arc::get_mut(&mut self.storage)?.view_ptr_mut();
        Some(v)
    }

    /// Host bytes of a CPU tensor.
    pub fn cpu_bytes(&self) -> Option<&[u8]> {
        match &*self.storage {
            Storage::Cpu(b) => Some(b.as_bytes()),
        }
    }

    /// Values as f32 (f32, bf16, i32 exactly; FP8 and E8M0 as their byte values).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        let bytes = self.cpu_bytes().expect("CPU tensor");
        match self.dtype {
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
        }
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
}

impl MxTensor {
    pub fn byte_len(&self) -> u64 {
        self.data.byte_len() + self.scales.byte_len()
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

    /// A writable view for a quantizer's output (see [`Tensor::view_mut`]).
    pub fn view_mut(&mut self) -> Option<mxhost_plugin_abi::MxTensorView> {
        let mut v = self.view();
        v.data = self.data.view_mut()?;
        v.scales = self.scales.view_mut()?;
        Some(v)
    }
}
