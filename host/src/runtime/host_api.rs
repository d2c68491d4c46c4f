//! The host side of the `experiment` world's imports: tensors, MX quantization,
//! grouped GEMM, plugin selection, metrics and routing. Every input is validated
//! before a plugin sees it; failures reach the guest as the WIT `error` record.

use super::bindings::{
    dispatch, grouped_gemm, metrics, mx, plugins, routing, routing_types, tensors, types,
};
use super::convert::*;
use super::state::HostState;
use crate::error::{ErrorKind, OpError, OpResult};
use crate::ops::{self, GemmConfig, GemmOperand};
use crate::routing::{route_top_k, RouteRequest};
use crate::tensor::{MxTensor, Tensor};
use crate::validate;
use mxhost_plugin_abi::{DType, GemmPass, WeightLayout};
use rand::SeedableRng;
use rand_distr::Distribution;
use wasmtime::component::Resource;

fn bad_handle(e: impl std::fmt::Display) -> OpError {
    OpError::new(ErrorKind::BadHandle, format!("invalid tensor handle: {e}"))
}

impl HostState {
    fn tensor(&self, r: &Resource<Tensor>) -> OpResult<&Tensor> {
        self.table.get(r).map_err(bad_handle)
    }
    fn mx_tensor(&self, r: &Resource<MxTensor>) -> OpResult<&MxTensor> {
        self.table.get(r).map_err(bad_handle)
    }

    /// Check a new tensor's size against the budget before allocating it.
    fn new_tensor_checked(&self, shape: &[u32], dtype: DType) -> OpResult<(Vec<u64>, u64)> {
        let shape = dims(shape);
        let (numel, bytes) = validate::checked_size(&shape, dtype)?;
        self.check_room(bytes)?;
        Ok((shape, numel))
    }

    fn guard(&mut self, request: dispatch::DispatchRequest) -> OpResult<()> {
        if self.guards.is_empty() {
            return Ok(());
        }
        self.guards
            .check(&request)
            .map_err(|m| OpError::new(ErrorKind::RejectedByGuard, m))
    }
}

fn bytes_of<T: Copy>(values: &[T], f: impl Fn(T) -> [u8; 4]) -> Vec<u8> {
    values.iter().flat_map(|&v| f(v)).collect()
}

/// A new tensor holding `bytes`, on the current device (uploaded when it is a GPU).
fn cpu_tensor(shape: Vec<u64>, dtype: DType, bytes: &[u8]) -> OpResult<Tensor> {
    Tensor::from_bytes_on(crate::device::current(), shape, dtype, bytes)
}

impl types::Host for HostState {
    fn convert_error(&mut self, err: OpError) -> wasmtime::Result<types::Error> {
        Ok(error_to_wit(err))
    }
}

impl tensors::Host for HostState {}

impl tensors::HostTensor for HostState {
    fn from_f32(&mut self, shape: Vec<u32>, data: Vec<f32>) -> OpResult<Resource<Tensor>> {
        let (shape, numel) = self.new_tensor_checked(&shape, DType::F32)?;
        if numel != data.len() as u64 {
            return Err(OpError::invalid(format!(
                "shape {shape:?} holds {numel} values but {} were given",
                data.len()
            )));
        }
        let t = cpu_tensor(shape, DType::F32, &bytes_of(&data, f32::to_le_bytes))?;
        self.push_tensor(t)
    }

    fn from_bf16_bits(&mut self, shape: Vec<u32>, bits: Vec<u16>) -> OpResult<Resource<Tensor>> {
        let (shape, numel) = self.new_tensor_checked(&shape, DType::Bf16)?;
        if numel != bits.len() as u64 {
            return Err(OpError::invalid(format!(
                "shape {shape:?} holds {numel} values but {} were given",
                bits.len()
            )));
        }
        let bytes: Vec<u8> = bits.iter().flat_map(|b| b.to_le_bytes()).collect();
        self.push_tensor(cpu_tensor(shape, DType::Bf16, &bytes)?)
    }

    fn zeros(&mut self, shape: Vec<u32>, dtype: types::Dtype) -> OpResult<Resource<Tensor>> {
        let dtype = dtype_from_wit(dtype);
        let (shape, _) = self.new_tensor_checked(&shape, dtype)?;
        let t = ops::alloc(&shape, dtype)?;
        self.push_tensor(t)
    }

    fn randn(
        &mut self,
        shape: Vec<u32>,
        dtype: types::Dtype,
        seed: u64,
        mean: f32,
        std: f32,
    ) -> OpResult<Resource<Tensor>> {
        let dtype = dtype_from_wit(dtype);
        if !matches!(dtype, DType::F32 | DType::Bf16) {
            return Err(OpError::invalid(format!(
                "randn makes f32 or bf16 tensors, not {}",
                dtype.name()
            )));
        }
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(OpError::invalid(format!(
                "randn needs a finite mean and std ≥ 0, got {mean}, {std}"
            )));
        }
        let (shape, numel) = self.new_tensor_checked(&shape, dtype)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let normal =
            rand_distr::Normal::new(mean, std).map_err(|e| OpError::invalid(e.to_string()))?;
        // Drawn on the host (seeded, reproducible on every device), then placed.
        let mut bytes = vec![0u8; (numel * dtype.size_bytes()) as usize];
        match dtype {
            DType::F32 => bytes
                .chunks_exact_mut(4)
                .for_each(|c| c.copy_from_slice(&normal.sample(&mut rng).to_le_bytes())),
            _ => bytes.chunks_exact_mut(2).for_each(|c| {
                c.copy_from_slice(
                    &half::bf16::from_f32(normal.sample(&mut rng))
                        .to_bits()
                        .to_le_bytes(),
                )
            }),
        }
        let t = cpu_tensor(shape, dtype, &bytes)?;
        self.push_tensor(t)
    }

    fn shape(&mut self, this: Resource<Tensor>) -> wasmtime::Result<Vec<u32>> {
        Ok(dims_to_wit(&self.table.get(&this)?.shape))
    }

    fn dtype(&mut self, this: Resource<Tensor>) -> wasmtime::Result<types::Dtype> {
        Ok(dtype_to_wit(self.table.get(&this)?.dtype))
    }

    fn device(&mut self, this: Resource<Tensor>) -> wasmtime::Result<types::DeviceKind> {
        Ok(match self.table.get(&this)?.device() {
            mxhost_plugin_abi::DeviceKind::Cuda => types::DeviceKind::Cuda,
            _ => types::DeviceKind::Cpu,
        })
    }

    fn numel(&mut self, this: Resource<Tensor>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&this)?.numel())
    }

    fn to_f32(&mut self, this: Resource<Tensor>) -> OpResult<Vec<f32>> {
        self.tensor(&this)?.try_to_f32_vec()
    }

    fn drop(&mut self, rep: Resource<Tensor>) -> wasmtime::Result<()> {
        let t = self.table.delete(rep)?;
        self.usage.release(t.byte_len());
        Ok(())
    }
}

impl HostState {
    /// What every quantize import does first: the input, the shape checks, room for
    /// `copies` MX results in the tensor budget, the quantizing plugin, the guard chain.
    fn quantize_prologue(
        &mut self,
        x: &Resource<Tensor>,
        spec: &types::MxSpec,
        copies: u64,
    ) -> OpResult<(Tensor, std::sync::Arc<crate::plugin::LoadedPlugin>)> {
        let x = self.tensor(x)?.clone();
        let scales_shape = validate::plan_quantize(&x.shape, x.dtype, block_from_wit(spec.block))?;
        let (scale_numel, _) = validate::checked_size(&scales_shape, DType::E8m0)?;
        self.check_room(copies * (x.numel() + scale_numel))?;
        let plugin = self
            .shared
            .plugins
            .quantizer_for(&self.active)
            .ok_or_else(|| OpError::unsupported("no loaded plugin can quantize"))?;
        self.guard(quantize_request(&plugin.name, &x, spec))?;
        Ok((x, plugin))
    }

    /// `quantize-with-wgrad-values` and its `-for` form (`weight`: the GEMM partner, ABI 1.9).
    fn wgrad_values_call(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
        options: mx::QuantizeOptions,
        offs: Vec<i32>,
        weight: Option<Resource<MxTensor>>,
    ) -> OpResult<WgradValuesResult> {
        let copies = if options.transposed { 2 } else { 1 };
        let (x, plugin) = self.quantize_prologue(&x, &spec, copies)?;
        // the wgrad values (bf16), and the kept ones counted once per result
        let kept = if options.keep_values { copies } else { 0 };
        self.check_room((kept + 1) * 2 * x.numel())?;
        let (format, mode) = (format_from_wit(spec.format), mode_from_wit(spec.mode));
        let extras = ops::QuantizeExtras {
            transposed: options.transposed,
            keep_values: options.keep_values,
            for_gemm: options.for_gemm,
        };
        let fmb = (format, mode, block_from_wit(spec.block));
        let weight = match &weight {
            Some(w) => Some(self.mx_tensor(w)?.clone()),
            None => None,
        };
        let (q, t, v) =
            ops::quantize_with_wgrad_values(&plugin, &x, fmb, extras, &offs, weight.as_ref())?;
        let q = self.push_mx(q)?;
        let t = t.map(|t| self.push_mx(t)).transpose()?;
        let v = self.push_tensor(v)?;
        Ok((q, t, v))
    }
}

/// What `quantize-with-wgrad-values(-for)` returns: the MX tensor, its transposed copy when
/// asked, and the wgrad values.
type WgradValuesResult = (
    Resource<MxTensor>,
    Option<Resource<MxTensor>>,
    Resource<Tensor>,
);

/// What the guard chain sees for a quantization of `x` (with or without a transposed
/// copy: the guard rules are about the recipe, which is the same).
fn quantize_request(plugin: &str, x: &Tensor, spec: &types::MxSpec) -> dispatch::DispatchRequest {
    dispatch::DispatchRequest {
        op: dispatch::Op::Quantize,
        plugin: plugin.to_string(),
        operands: vec![dispatch::OperandInfo {
            shape: x.shape.clone(),
            dtype: dtype_to_wit(x.dtype),
            mx: None,
        }],
        offs: vec![],
        format: spec.format,
        mode: spec.mode,
        weight_blocks_2d: false,
        weight_layout_kn: false,
        hadamard: false,
        dge: false,
        bias: false,
    }
}

impl mx::Host for HostState {
    fn quantize(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
    ) -> OpResult<Resource<MxTensor>> {
        let (x, plugin) = self.quantize_prologue(&x, &spec, 1)?;
        let (format, mode) = (format_from_wit(spec.format), mode_from_wit(spec.mode));
        let q = ops::quantize(&plugin, &x, format, mode, block_from_wit(spec.block))?;
        self.push_mx(q)
    }

    fn quantize_with_transpose(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
    ) -> OpResult<(Resource<MxTensor>, Resource<MxTensor>)> {
        let (x, plugin) = self.quantize_prologue(&x, &spec, 2)?;
        let (format, mode) = (format_from_wit(spec.format), mode_from_wit(spec.mode));
        let block = block_from_wit(spec.block);
        let (q, t) = ops::quantize_with_transpose(&plugin, &x, format, mode, block)?;
        let q = self.push_mx(q)?;
        let t = self.push_mx(t)?;
        Ok((q, t))
    }

    fn quantize_ext(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
        options: mx::QuantizeOptions,
    ) -> OpResult<(Resource<MxTensor>, Option<Resource<MxTensor>>)> {
        let copies = if options.transposed { 2 } else { 1 };
        let (x, plugin) = self.quantize_prologue(&x, &spec, copies)?;
        if options.keep_values {
            // bf16 values, counted once per result that holds them (push_mx).
            self.check_room(copies * 2 * x.numel())?;
        }
        let (format, mode) = (format_from_wit(spec.format), mode_from_wit(spec.mode));
        let extras = ops::QuantizeExtras {
            transposed: options.transposed,
            keep_values: options.keep_values,
            for_gemm: options.for_gemm,
        };
        let block = block_from_wit(spec.block);
        let (q, t) = ops::quantize_with(&plugin, &x, format, mode, block, extras)?;
        let q = self.push_mx(q)?;
        let t = t.map(|t| self.push_mx(t)).transpose()?;
        Ok((q, t))
    }

    fn quantize_with_wgrad_values(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
        options: mx::QuantizeOptions,
        offs: Vec<i32>,
    ) -> OpResult<(
        Resource<MxTensor>,
        Option<Resource<MxTensor>>,
        Resource<Tensor>,
    )> {
        self.wgrad_values_call(x, spec, options, offs, None)
    }

    fn quantize_with_wgrad_values_for(
        &mut self,
        x: Resource<Tensor>,
        spec: types::MxSpec,
        options: mx::QuantizeOptions,
        offs: Vec<i32>,
        weight: Resource<MxTensor>,
    ) -> OpResult<(
        Resource<MxTensor>,
        Option<Resource<MxTensor>>,
        Resource<Tensor>,
    )> {
        self.wgrad_values_call(x, spec, options, offs, Some(weight))
    }

    fn dequantize(&mut self, q: Resource<MxTensor>) -> OpResult<Resource<Tensor>> {
        let q = self.mx_tensor(&q)?.clone();
        self.check_room(q.data.numel() * 4)?;
        let plugin = self
            .shared
            .plugins
            .quantizer_for(&self.active)
            .ok_or_else(|| OpError::unsupported("no loaded plugin can dequantize"))?;
        let t = ops::dequantize(&plugin, &q)?;
        self.push_tensor(t)
    }
}

impl mx::HostMxTensor for HostState {
    fn shape(&mut self, this: Resource<MxTensor>) -> wasmtime::Result<Vec<u32>> {
        Ok(dims_to_wit(&self.table.get(&this)?.data.shape))
    }

    fn spec(&mut self, this: Resource<MxTensor>) -> wasmtime::Result<types::MxSpec> {
        let q = self.table.get(&this)?;
        Ok(types::MxSpec {
            format: format_to_wit(q.format),
            mode: mode_to_wit(q.mode),
            block: block_to_wit(q.block),
        })
    }

    fn data(&mut self, this: Resource<MxTensor>) -> wasmtime::Result<Resource<Tensor>> {
        // (bytes its plugin left out, ABI 1.7, are written before the guest holds them)
        let t = crate::ops::filled_part(self.table.get(&this)?, false)
            .map_err(|e| wasmtime::Error::msg(e.message))?;
        self.push_tensor(t)
            .map_err(|e| wasmtime::Error::msg(e.message))
    }

    fn has_values(&mut self, this: Resource<MxTensor>) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.values.is_some())
    }

    fn scales(&mut self, this: Resource<MxTensor>) -> wasmtime::Result<Resource<Tensor>> {
        // (scales its plugin left out, ABI 1.8, are written with the bytes, before the guest
        // holds them)
        let t = crate::ops::filled_part(self.table.get(&this)?, true)
            .map_err(|e| wasmtime::Error::msg(e.message))?;
        self.push_tensor(t)
            .map_err(|e| wasmtime::Error::msg(e.message))
    }

    fn drop(&mut self, rep: Resource<MxTensor>) -> wasmtime::Result<()> {
        let q = self.table.delete(rep)?;
        self.usage.release(q.byte_len());
        Ok(())
    }
}

enum HeldOperand {
    Dense(Tensor),
    Mx(Box<MxTensor>),
}

impl HeldOperand {
    fn as_op(&self) -> GemmOperand<'_> {
        match self {
            HeldOperand::Dense(t) => GemmOperand::Dense(t),
            HeldOperand::Mx(q) => GemmOperand::Mx(q),
        }
    }
    fn info(&self) -> dispatch::OperandInfo {
        match self {
            HeldOperand::Dense(t) => dispatch::OperandInfo {
                shape: t.shape.clone(),
                dtype: dtype_to_wit(t.dtype),
                mx: None,
            },
            HeldOperand::Mx(q) => dispatch::OperandInfo {
                shape: q.data.shape.clone(),
                dtype: dtype_to_wit(q.data.dtype),
                mx: Some(types::MxSpec {
                    format: format_to_wit(q.format),
                    mode: mode_to_wit(q.mode),
                    block: block_to_wit(q.block),
                }),
            },
        }
    }
}

impl HostState {
    fn hold(&self, op: &grouped_gemm::Operand) -> OpResult<HeldOperand> {
        Ok(match op {
            grouped_gemm::Operand::Dense(r) => HeldOperand::Dense(self.tensor(r)?.clone()),
            grouped_gemm::Operand::Quantized(r) => {
                HeldOperand::Mx(Box::new(self.mx_tensor(r)?.clone()))
            }
        })
    }

    fn run_gemm(
        &mut self,
        pass: GemmPass,
        a: grouped_gemm::Operand,
        b: grouped_gemm::Operand,
        offs: Vec<i32>,
        o: grouped_gemm::GemmOptions,
    ) -> OpResult<Resource<Tensor>> {
        let (a, b) = (self.hold(&a)?, self.hold(&b)?);
        let cfg = GemmConfig {
            format: format_from_wit(o.format),
            mode: mode_from_wit(o.mode),
            weight_blocks_2d: o.weight_blocks_2d,
            weight_layout: match o.weight_layout {
                grouped_gemm::WeightLayout::Nk => WeightLayout::Nk,
                grouped_gemm::WeightLayout::Kn => WeightLayout::Kn,
            },
            out_dtype: dtype_from_wit(o.out_dtype),
            hadamard: o.hadamard,
            dge: o.dge,
            bias: o.bias,
        };
        let plan = validate::plan_grouped_gemm(
            pass,
            &a.as_op().desc(),
            &b.as_op().desc(),
            &offs,
            cfg.weight_layout,
            cfg.out_dtype,
        )?;
        let (_, out_bytes) = validate::checked_size(&plan.out_shape, cfg.out_dtype)?;
        self.check_room(out_bytes)?;
        // One snapshot of the active plugin serves the whole call (swap-safe).
        let plugin = self.active.clone();
        self.guard(dispatch::DispatchRequest {
            op: match pass {
                GemmPass::Forward => dispatch::Op::Forward,
                GemmPass::Dgrad => dispatch::Op::Dgrad,
                GemmPass::Wgrad => dispatch::Op::Wgrad,
            },
            plugin: plugin.name.clone(),
            operands: vec![a.info(), b.info()],
            offs: offs.clone(),
            format: o.format,
            mode: o.mode,
            weight_blocks_2d: o.weight_blocks_2d,
            weight_layout_kn: cfg.weight_layout == WeightLayout::Kn,
            hadamard: o.hadamard,
            dge: o.dge,
            bias: o.bias,
        })?;
        let out = ops::grouped_gemm(&plugin, pass, a.as_op(), b.as_op(), &offs, &cfg)?;
        self.push_tensor(out)
    }
}

impl grouped_gemm::Host for HostState {
    fn forward(
        &mut self,
        x: grouped_gemm::Operand,
        w: grouped_gemm::Operand,
        offs: Vec<i32>,
        options: grouped_gemm::GemmOptions,
    ) -> OpResult<Resource<Tensor>> {
        self.run_gemm(GemmPass::Forward, x, w, offs, options)
    }
    fn dgrad(
        &mut self,
        dy: grouped_gemm::Operand,
        w: grouped_gemm::Operand,
        offs: Vec<i32>,
        options: grouped_gemm::GemmOptions,
    ) -> OpResult<Resource<Tensor>> {
        self.run_gemm(GemmPass::Dgrad, dy, w, offs, options)
    }
    fn wgrad(
        &mut self,
        dy: grouped_gemm::Operand,
        x: grouped_gemm::Operand,
        offs: Vec<i32>,
        options: grouped_gemm::GemmOptions,
    ) -> OpResult<Resource<Tensor>> {
        self.run_gemm(GemmPass::Wgrad, dy, x, offs, options)
    }
}

impl plugins::Host for HostState {
    fn list(&mut self) -> wasmtime::Result<Vec<plugins::PluginInfo>> {
        Ok(self
            .shared
            .plugins
            .plugins()
            .iter()
            .map(|p| plugins::PluginInfo {
                name: p.name.clone(),
                precision: p.precision.clone(),
                version: p.version.clone(),
                capabilities: p.capability_names(),
                path: p.path.display().to_string(),
            })
            .collect())
    }

    fn active(&mut self) -> wasmtime::Result<String> {
        Ok(self.active.name.clone())
    }

    fn select(&mut self, name: String) -> OpResult<()> {
        self.active = self
            .shared
            .plugins
            .find_or_explain(&name)
            .map_err(OpError::invalid)?;
        Ok(())
    }
}

impl metrics::Host for HostState {
    fn record(&mut self, name: String, step: u64, value: f64) -> wasmtime::Result<()> {
        self.shared
            .metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(name, step, value);
        Ok(())
    }
    fn progress(&mut self, done: u64, total: u64, label: String) -> wasmtime::Result<()> {
        self.shared
            .metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .progress(done, total, label);
        Ok(())
    }
    fn log(&mut self, level: metrics::Level, message: String) -> wasmtime::Result<()> {
        self.shared
            .metrics
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log(level_name(level), &message);
        Ok(())
    }
}

pub fn level_name(level: metrics::Level) -> &'static str {
    match level {
        metrics::Level::Debug => "debug",
        metrics::Level::Info => "info",
        metrics::Level::Warn => "warn",
        metrics::Level::Error => "error",
    }
}

impl routing_types::Host for HostState {}

impl routing::Host for HostState {
    fn route(
        &mut self,
        request: routing_types::RouteRequest,
    ) -> wasmtime::Result<Result<routing_types::RoutePlan, String>> {
        if let Some(router) = &mut self.router {
            return Ok(router.route(&request));
        }
        let plan = route_top_k(&RouteRequest {
            tokens: request.tokens,
            experts: request.experts,
            top_k: request.top_k,
            logits: &request.logits,
            renormalize: request.renormalize,
            align: request.align,
            capacity_factor: request.capacity_factor,
        });
        Ok(plan.map(|p| routing_types::RoutePlan {
            source_token: p.source_token,
            gate_weight: p.gate_weight,
            offs: p.offs,
            load: p.load,
            dropped: p.dropped,
        }))
    }
}
