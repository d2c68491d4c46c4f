//! The CPU backend: requests whose tensors are in host memory, computed with the exact
//! numerics of [`crate::numerics`] and the shared rayon grouped-GEMM driver.

use crate::gemm::MxPrep;
use crate::numerics::{dequantize_mx, fake_quantize_row_segments, quantize_mx};
use mxhost_plugin_abi::plugin_support::PluginResult;
use mxhost_plugin_common::args::{DequantizeArgs, GemmArgs, QuantizeArgs};
use mxhost_plugin_common::dense::{DenseMut, DenseRef};
use mxhost_plugin_common::entry::Backend;
use mxhost_plugin_common::{gemm, host};

pub struct CpuBackend;

impl Backend for CpuBackend {
    fn quantize(&self, args: &QuantizeArgs) -> PluginResult<()> {
        let o = &args.output;
        // SAFETY: the args were parsed from the host's descriptor; the host allocated
        // numel × size bytes for each tensor and keeps them alive for this call, and the
        // outputs were checked not to overlap the input.
        let (input, data, scales) = unsafe {
            (
                host::dense(&args.input)?,
                host::slice_mut::<u8>(&o.data)?,
                host::slice_mut::<u8>(&o.scales)?,
            )
        };
        let shape = &args.input.shape;
        match input {
            DenseRef::F32(x) => quantize_mx(x, shape, o.block, o.format, o.mode, data, scales)?,
            DenseRef::Bf16(x) => quantize_mx(x, shape, o.block, o.format, o.mode, data, scales)?,
        }
        if let Some(t) = &args.transposed {
            // SAFETY: as above; `QuantizeArgs::parse` checked the transposed buffers'
            // shapes and that they overlap nothing else.
            let (data_t, scales_t) = unsafe {
                (
                    host::slice_mut::<u8>(&t.data)?,
                    host::slice_mut::<u8>(&t.scales)?,
                )
            };
            host::transpose_last2(data, data_t, shape);
            host::transpose_last2(scales, scales_t, &o.scales.shape);
        }
        if let Some(v) = &args.values {
            // SAFETY: as above; `QuantizeArgs::parse` checked the values buffer (bf16, the
            // input's shape) and that it overlaps nothing else.
            let DenseMut::Bf16(out) = (unsafe { host::dense_mut(v)? }) else {
                unreachable!("QuantizeArgs::parse checked: bf16")
            };
            dequantize_mx(data, scales, shape, o.block, o.format, out)?;
        }
        if let Some(w) = &args.wgrad_values {
            // SAFETY: as above; `QuantizeArgs::parse` checked the buffer (bf16, the input's
            // rank-2 shape) and that it overlaps nothing else.
            let DenseMut::Bf16(out) = (unsafe { host::dense_mut(&w.out)? }) else {
                unreachable!("QuantizeArgs::parse checked: bf16")
            };
            let (rows, c) = (shape[0] as usize, shape[1] as usize);
            if rows > 0 && c > 0 {
                let segments = w.segments(rows);
                let fm = (o.format, o.mode);
                match input {
                    DenseRef::F32(x) => fake_quantize_row_segments(x, c, &segments, fm, out)?,
                    DenseRef::Bf16(x) => fake_quantize_row_segments(x, c, &segments, fm, out)?,
                }
            }
        }
        Ok(())
    }

    fn dequantize(&self, args: &DequantizeArgs) -> PluginResult<()> {
        let i = &args.input;
        // SAFETY: as in `quantize`.
        let (mx, out) = unsafe { (host::mx(i)?, host::dense_mut(&args.output)?) };
        match out {
            DenseMut::F32(o) => dequantize_mx(mx.data, mx.scales, mx.shape, mx.block, mx.format, o),
            DenseMut::Bf16(o) => {
                dequantize_mx(mx.data, mx.scales, mx.shape, mx.block, mx.format, o)
            }
        }
    }

    fn grouped_gemm(&self, args: &GemmArgs) -> PluginResult<()> {
        let prep = MxPrep {
            format: args.format(),
            mode: args.mode(),
            weight_blocks_2d: args.weight_blocks_2d,
        };
        // SAFETY: as in `quantize`; `GemmArgs::parse` checked the output against inputs.
        unsafe { gemm::run_on_host(args, &prep) }
    }
}
