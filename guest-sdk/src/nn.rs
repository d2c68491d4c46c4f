//! Building blocks for MoE training in a guest: [`GroupedLinear`] (per-expert linear
//! layers on the contiguous grouped GEMM), [`MoeLayer`] (router, dispatch, experts,
//! combine, with a full backward pass) and the optimizers [`Sgd`] and [`AdamW`].
//!
//! Precision follows the active plugin: the GEMMs pass dense operands that a MX plugin
//! quantizes inside the call (E4M3, rceil, 1×32 or 32×32 weight blocks), so
//! `plugin::select("bf16")` turns the same model into the BF16 baseline. On a GPU with an
//! MX plugin, [`GroupedLinear`] quantizes its weight itself, once per forward, with the
//! in-call recipe and its exact values kept in bf16 (`gemm::quantize_keep_values`): forward
//! and dgrad both read that one copy on the BF16 tensor cores instead of each quantizing and
//! expanding the weight (same MX values, so the same model; `keep_values(false)` passes the
//! weight dense again, saving its bf16 copy's device memory). There X and dY are quantized
//! here too, each with its wgrad values from the same pass (`gemm::quantize_with_wgrad_values`,
//! plugin ABI 1.5) and, beside a weight with kept values, its own values kept as well: forward
//! (dgrad) runs cuBLAS on both operands' values and wgrad on the wgrad values, so each tensor
//! is read from memory once and nothing is expanded in a GEMM call (one fused kernel on a GPU,
//! `mx_quantize_rows_vals_wv_bf16_*`), and backward keeps X's wgrad values instead of X (the
//! same 2 bytes per element). Otherwise activations and gradients stay dense (quantized in
//! the call).
//!
//! With 32×32 weight blocks, a plugin that reports `chained-gemm` (mxfp8 on a Hopper GPU,
//! unless `MXHOST_MX_CHAIN=off`) and a GEMM of at least [`CHAINED_MIN_MACS`] multiply-adds,
//! the weight is quantized with its transposed copy instead of its values (forward reads
//! `[E, N, K]`, dgrad `[E, K, N]`), and the weight, X and dY are quantized `for_gemm`: the
//! plugin writes the chained GEMM's forms beside them; kept values would send both GEMMs to
//! cuBLAS and leave those forms unread (docs/perf.md run 154: that step 8–11 % slower).
//!
//! ```ignore
//! let mut moe = MoeLayer::new(MoeConfig { experts: 8, hidden: 256, ffn: 512, top_k: 2, ..Default::default() }, seed)?;
//! let mut opt = AdamW::new(1e-3);
//! for step in 0..steps {
//!     let y = moe.forward(&x)?;
//!     let (loss, dy) = ops::mse_loss(&y, &target)?;
//!     moe.backward(&dy)?;
//!     opt.step(moe.parameters())?;
//! }
//! ```

use crate::ops::{self, Activation, AdamwConfig};
use crate::topk;
use crate::{
    gemm, plugin, route, BlockLayout, DeviceKind, Dtype, Error, ErrorKind, GemmOptions, MxSpec,
    MxTensor, Operand, RoutePlan, RouteRequest, Tensor, WeightLayout,
};

type R<T> = Result<T, Error>;

fn invalid(message: String) -> Error {
    Error {
        kind: crate::ErrorKind::InvalidArgument,
        message,
    }
}

/// A parameter and its gradient, as an optimizer sees them.
pub struct Param<'a> {
    pub value: &'a mut Tensor,
    pub grad: Option<&'a Tensor>,
}

/// Per-expert linear layers `y_e = x_e · W_eᵀ` on the contiguous grouped GEMM.
pub struct GroupedLinear {
    /// `[E, N, K]` f32 (nn.Linear layout per expert).
    pub weight: Tensor,
    /// `∂L/∂W` of the last backward pass.
    pub grad: Option<Tensor>,
    /// GEMM options (format, scale mode, 32×32 weight blocks); dense operands are
    /// quantized in-call by MX plugins and ignored by `bf16`.
    pub options: GemmOptions,
    /// Quantize the weight here once per forward, keeping its values (or, with 32×32 tiles
    /// under a chained GEMM, with its transposed copy), when it is on a GPU and the active
    /// plugin quantizes (default on).
    pub keep_values: bool,
    saved: Option<LinearSaved>,
}

/// What forward keeps for backward: the input (or, with `x_values`, its wgrad values, which
/// wgrad multiplies as they are), the offsets and, where forward quantized the weight, its
/// quantization for dgrad.
struct LinearSaved {
    x: Tensor,
    x_values: bool,
    /// X was quantized with its values kept (beside the weight's): dY is too.
    keep: bool,
    offs: Vec<i32>,
    w_dgrad: Option<DgradWeight>,
}

/// How [`GroupedLinear`]'s forward passes its weight (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WeightPrep {
    /// Dense, quantized inside each call.
    Dense,
    /// Quantized here with its values kept (32×32 tiles: one copy; else along K and N).
    KeptValues,
    /// Quantized here in 32×32 tiles with its transposed copy, for a chained GEMM.
    WithTranspose,
}

/// Multiply-adds per GEMM (rows × K × N) from which [`GroupedLinear`] gives a chained GEMM the
/// weight's transposed copy. Below, kept values are faster even where the plugin chains
/// (docs/perf.md run 156, H100: a step of 4096 × 256 × 1024 took 156 µs with the transposed
/// copy against 98 with kept values; 32 × 1024³ the same 666 µs both ways; the anchors a, b, c,
/// 150–550 G multiply-adds, 3–11 % faster with the copy, runs 154–155).
pub const CHAINED_MIN_MACS: u64 = 1 << 35;

impl WeightPrep {
    /// Kept values where the layer keeps them (`keep_values`), the weight is on a GPU and
    /// the active plugin quantizes; the transposed copy instead where, in addition, the
    /// weight uses 32×32 tiles, the plugin reports `chained-gemm` and the GEMM has at least
    /// [`CHAINED_MIN_MACS`] multiply-adds (`macs`).
    fn choose(
        keep_values: bool,
        on_gpu: bool,
        blocks_2d: bool,
        caps: &[String],
        macs: u64,
    ) -> WeightPrep {
        let has = |cap: &str| caps.iter().any(|c| c == cap);
        if !keep_values || !on_gpu || !has("quantize") {
            WeightPrep::Dense
        } else if blocks_2d && has("chained-gemm") && macs >= CHAINED_MIN_MACS {
            WeightPrep::WithTranspose
        } else {
            WeightPrep::KeptValues
        }
    }
}

/// The weight's quantization dgrad reads, and its layout: `[E, N, K]` (`Nk`, the forward's
/// copy or one along N) or the transposed copy `[E, K, N]` (`Kn`).
struct DgradWeight {
    q: MxTensor,
    layout: WeightLayout,
}

impl GroupedLinear {
    /// `experts` layers of `in_features → out_features`, weights N(0, 1/in_features).
    pub fn new(experts: u32, in_features: u32, out_features: u32, seed: u64) -> R<Self> {
        let std = 1.0 / (in_features as f32).sqrt();
        let w = Tensor::randn(
            &[experts, out_features, in_features],
            Dtype::F32,
            seed,
            0.0,
            std,
        )?;
        Ok(Self::from_weight(w))
    }
    /// Wrap existing `[E, N, K]` weights.
    pub fn from_weight(weight: Tensor) -> Self {
        GroupedLinear {
            weight,
            grad: None,
            options: gemm::options(),
            keep_values: true,
            saved: None,
        }
    }
    /// Quantize the weight once per forward with its values kept on a GPU (see the module
    /// docs); off: the weight goes dense and is quantized inside each call.
    pub fn keep_values(mut self, on: bool) -> Self {
        self.keep_values = on;
        self
    }
    /// The in-call recipe for an operand quantized along `block`.
    fn spec(&self, block: BlockLayout) -> MxSpec {
        MxSpec {
            format: self.options.format,
            mode: self.options.mode,
            block,
        }
    }
    /// How a forward of `rows` rows passes the weight ([`WeightPrep::choose`] from this
    /// layer's settings, the active plugin's capabilities and the GEMM's size).
    fn weight_prep(&self, rows: u64) -> WeightPrep {
        let active = plugin::active();
        let caps = plugin::list()
            .into_iter()
            .find(|p| p.name == active)
            .map(|p| p.capabilities)
            .unwrap_or_default();
        WeightPrep::choose(
            self.keep_values,
            self.weight.device() == DeviceKind::Cuda,
            self.options.weight_blocks_2d,
            &caps,
            rows * self
                .weight
                .shape()
                .iter()
                .skip(1)
                .map(|&d| d as u64)
                .product::<u64>(),
        )
    }
    /// `t` quantized with its values kept; `None` when the plugin cannot keep them (an
    /// older ABI): the caller passes the operand dense instead.
    fn quantize_kept(&self, t: &Tensor, block: BlockLayout) -> R<Option<MxTensor>> {
        match gemm::quantize_keep_values(t, self.spec(block)) {
            Ok(q) => Ok(Some(q)),
            Err(e) if e.kind == ErrorKind::Unsupported => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// `t` (X or dY) quantized along its rows, with its wgrad values from the same pass;
    /// `None` when the plugin cannot write them (an older ABI): the caller passes `t`
    /// dense instead.
    /// With `keep`, the MX tensor keeps its values too (for a GEMM on cuBLAS beside the
    /// weight's kept values, which then expands nothing); with `for_gemm`, the plugin's GEMM
    /// form (for a chained GEMM beside the weight's transposed copy).
    /// With `for_gemm` the weight its GEMM reads is named too (`weight`: forward's for X,
    /// dgrad's transposed copy for dY), so the plugin writes only the part of that form the
    /// GEMM reads.
    fn quantize_with_values(
        &self,
        t: &Tensor,
        offs: &[i32],
        (keep, for_gemm): (bool, bool),
        weight: Option<&MxTensor>,
    ) -> R<Option<(MxTensor, Tensor)>> {
        let options = crate::QuantizeOptions {
            transposed: false,
            keep_values: keep,
            for_gemm,
        };
        let spec = self.spec(BlockLayout::Along(1));
        let quantized = match weight.filter(|_| for_gemm) {
            Some(w) => gemm::quantize_with_wgrad_values_for(t, spec, options, offs, w),
            None => gemm::quantize_with_wgrad_values(t, spec, options, offs),
        };
        match quantized {
            Ok((q, _, v)) => Ok(Some((q, v))),
            Err(e) if e.kind == ErrorKind::Unsupported => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// The weight's quantization for forward (along K, or 32×32 tiles) and for dgrad (along
    /// N; `None` with 32×32 tiles: the forward's copy), as `prep` says; `None` for
    /// [`WeightPrep::Dense`] or when the plugin cannot keep values (an older ABI).
    fn weight_quantized(&self, prep: WeightPrep) -> R<Option<(MxTensor, Option<DgradWeight>)>> {
        let tiles = self.spec(BlockLayout::Tile32x32);
        match prep {
            WeightPrep::Dense => Ok(None),
            WeightPrep::WithTranspose => {
                let (q, t) = gemm::quantize_with_transpose_for_gemm(&self.weight, tiles)?;
                let t = DgradWeight {
                    q: t,
                    layout: WeightLayout::Kn,
                };
                Ok(Some((q, Some(t))))
            }
            WeightPrep::KeptValues if self.options.weight_blocks_2d => Ok(self
                .quantize_kept(&self.weight, BlockLayout::Tile32x32)?
                .map(|q| (q, None))),
            WeightPrep::KeptValues => {
                let Some(fwd) = self.quantize_kept(&self.weight, BlockLayout::Along(2))? else {
                    return Ok(None);
                };
                Ok(self
                    .quantize_kept(&self.weight, BlockLayout::Along(1))?
                    .map(|q| {
                        let d = DgradWeight {
                            q,
                            layout: WeightLayout::Nk,
                        };
                        (fwd, Some(d))
                    }))
            }
        }
    }
    /// Quantize weights with 32×32 tiles (one copy serves forward and dgrad).
    pub fn weight_blocks_2d(mut self, on: bool) -> Self {
        self.options.weight_blocks_2d = on;
        self
    }
    /// `y = x_e · W_eᵀ` per expert; `x` `[rows, K]` sorted by expert with cumulative end
    /// offsets `offs`. Keeps `x` for the backward pass.
    pub fn forward(&mut self, x: Tensor, offs: &[i32]) -> R<Tensor> {
        let rows = x.shape().first().copied().unwrap_or(0) as u64;
        let prep = self.weight_prep(rows);
        if let Some((qw, qw_dgrad)) = self.weight_quantized(prep)? {
            // X quantized here with its wgrad values (one read of X for forward and
            // wgrad); backward keeps the values instead of X. Beside kept weight values X
            // keeps its own too, and so will dY.
            let keep = prep == WeightPrep::KeptValues;
            let for_gemm = prep == WeightPrep::WithTranspose;
            let quantized = self.quantize_with_values(&x, offs, (keep, for_gemm), Some(&qw))?;
            let (y, x, x_values) = match quantized {
                Some((qx, xv)) => {
                    let (a, b) = (Operand::Quantized(&qx), Operand::Quantized(&qw));
                    (gemm::forward(a, b, offs, &self.options)?, xv, true)
                }
                None => {
                    let (a, b) = (Operand::Dense(&x), Operand::Quantized(&qw));
                    (gemm::forward(a, b, offs, &self.options)?, x, false)
                }
            };
            let w_dgrad = Some(qw_dgrad.unwrap_or(DgradWeight {
                q: qw,
                layout: WeightLayout::Nk,
            }));
            self.saved = Some(LinearSaved {
                x,
                x_values,
                keep,
                offs: offs.to_vec(),
                w_dgrad,
            });
            return Ok(y);
        }
        let y = gemm::forward(
            Operand::Dense(&x),
            Operand::Dense(&self.weight),
            offs,
            &self.options,
        )?;
        self.saved = Some(LinearSaved {
            x,
            x_values: false,
            keep: false,
            offs: offs.to_vec(),
            w_dgrad: None,
        });
        Ok(y)
    }
    /// `y` without keeping anything (inference).
    pub fn apply(&self, x: &Tensor, offs: &[i32]) -> R<Tensor> {
        gemm::forward(
            Operand::Dense(x),
            Operand::Dense(&self.weight),
            offs,
            &self.options,
        )
    }
    /// Store `dW = dy_eᵀ · x_e` in [`Self::grad`] and return `dx = dy_e · W_e`.
    pub fn backward(&mut self, dy: &Tensor) -> R<Tensor> {
        let dx = self.backward_impl(dy, true)?;
        Ok(dx.expect("input gradient requested"))
    }
    /// Only `dW` (the first layer of a model needs no input gradient).
    pub fn backward_weight(&mut self, dy: &Tensor) -> R<()> {
        self.backward_impl(dy, false).map(|_| ())
    }
    fn backward_impl(&mut self, dy: &Tensor, want_dx: bool) -> R<Option<Tensor>> {
        let LinearSaved {
            x,
            x_values,
            keep,
            offs,
            w_dgrad,
        } = self
            .saved
            .take()
            .ok_or_else(|| invalid("GroupedLinear::backward before forward".into()))?;
        // Where forward kept X's wgrad values, dY gets its own from the pass that quantizes
        // it for dgrad (only when dgrad runs: wgrad alone reads dY once either way); beside
        // the weight's transposed copy, for a chained GEMM as X was.
        let for_gemm = w_dgrad
            .as_ref()
            .is_some_and(|d| d.layout == WeightLayout::Kn);
        let dy_q = if x_values && want_dx {
            let weight = w_dgrad.as_ref().map(|d| &d.q);
            self.quantize_with_values(dy, &offs, (keep, for_gemm), weight)?
        } else {
            None
        };
        let dy_wgrad = dy_q.as_ref().map_or(dy, |(_, v)| v);
        self.grad = Some(gemm::wgrad(
            Operand::Dense(dy_wgrad),
            Operand::Dense(&x),
            &offs,
            &self.options,
        )?);
        if !want_dx {
            return Ok(None);
        }
        // The weight's quantization from forward, in its layout, else dense.
        let mut options = self.options;
        let w = match &w_dgrad {
            Some(d) => {
                options.weight_layout = d.layout;
                Operand::Quantized(&d.q)
            }
            None => Operand::Dense(&self.weight),
        };
        let dy_dgrad = match &dy_q {
            Some((q, _)) => Operand::Quantized(q),
            None => Operand::Dense(dy),
        };
        let dx = gemm::dgrad(dy_dgrad, w, &offs, &options)?;
        Ok(Some(dx))
    }
    pub fn parameters(&mut self) -> Vec<Param<'_>> {
        vec![Param {
            value: &mut self.weight,
            grad: self.grad.as_ref(),
        }]
    }
}

/// The expert nonlinearity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertActivation {
    /// up projects to 2F = [gate | value]; silu(gate) · value.
    SwiGlu,
    Silu,
    Gelu,
    Relu,
}

/// Shape and routing of a [`MoeLayer`].
#[derive(Debug, Clone, Copy)]
pub struct MoeConfig {
    pub experts: u32,
    pub hidden: u32,
    pub ffn: u32,
    pub top_k: u32,
    pub activation: ExpertActivation,
    pub renormalize: bool,
    /// Group padding (32 = one MX block of rows; 128 for large tiles).
    pub align: u32,
    pub capacity_factor: Option<f32>,
    /// 32×32 weight blocks for both expert projections.
    pub weight_blocks_2d: bool,
}

impl Default for MoeConfig {
    fn default() -> Self {
        MoeConfig {
            experts: 8,
            hidden: 256,
            ffn: 512,
            top_k: 2,
            activation: ExpertActivation::SwiGlu,
            renormalize: true,
            align: topk::DEFAULT_ALIGN,
            capacity_factor: None,
            weight_blocks_2d: false,
        }
    }
}

struct Saved {
    x: Tensor,
    logits: Vec<f32>,
    plan: RoutePlan,
    gates: Tensor,
    up_out: Tensor,
    expert_out: Tensor,
}

/// A routed-expert MoE layer: `y = Σ_{e ∈ topk(x·Wrᵀ)} g_e(x) · down_e(act(up_e(x)))`.
pub struct MoeLayer {
    pub config: MoeConfig,
    /// Router projection `[E, H]`.
    pub router: Tensor,
    pub router_grad: Option<Tensor>,
    /// `[E, 2F, H]` (SwiGLU) or `[E, F, H]`.
    pub up: GroupedLinear,
    /// `[E, H, F]`.
    pub down: GroupedLinear,
    /// Compute `∂L/∂x` in [`Self::backward`] (off for a first layer).
    pub input_grad: bool,
    saved: Option<Saved>,
    /// Plan of the last forward pass (load, drops).
    pub last_load: Vec<u32>,
    pub last_dropped: u32,
}

impl MoeLayer {
    /// Fresh weights from `seed`: router N(0, 1/H), experts N(0, 1/fan-in).
    pub fn new(config: MoeConfig, seed: u64) -> R<Self> {
        let c = config;
        let up_n = if c.activation == ExpertActivation::SwiGlu {
            2 * c.ffn
        } else {
            c.ffn
        };
        let router = Tensor::randn(
            &[c.experts, c.hidden],
            Dtype::F32,
            seed,
            0.0,
            1.0 / (c.hidden as f32).sqrt(),
        )?;
        let up = GroupedLinear::new(c.experts, c.hidden, up_n, seed.wrapping_add(1))?
            .weight_blocks_2d(c.weight_blocks_2d);
        let down = GroupedLinear::new(c.experts, c.ffn, c.hidden, seed.wrapping_add(2))?
            .weight_blocks_2d(c.weight_blocks_2d);
        Ok(MoeLayer {
            config,
            router,
            router_grad: None,
            up,
            down,
            input_grad: true,
            saved: None,
            last_load: vec![],
            last_dropped: 0,
        })
    }

    /// The routing request for router logits `[tokens, E]`.
    pub fn route_request(&self, tokens: u32, logits: Vec<f32>) -> RouteRequest {
        RouteRequest {
            tokens,
            experts: self.config.experts,
            top_k: self.config.top_k,
            logits,
            renormalize: self.config.renormalize,
            align: self.config.align,
            capacity_factor: self.config.capacity_factor,
        }
    }

    fn activation(&self, u: &Tensor) -> R<Tensor> {
        match self.config.activation {
            ExpertActivation::SwiGlu => ops::swiglu(u),
            ExpertActivation::Silu => ops::act(u, Activation::Silu),
            ExpertActivation::Gelu => ops::act(u, Activation::Gelu),
            ExpertActivation::Relu => ops::act(u, Activation::Relu),
        }
    }

    fn activation_backward(&self, u: &Tensor, dh: &Tensor) -> R<Tensor> {
        match self.config.activation {
            ExpertActivation::SwiGlu => ops::swiglu_backward(u, dh),
            ExpertActivation::Silu => ops::act_backward(u, dh, Activation::Silu),
            ExpertActivation::Gelu => ops::act_backward(u, dh, Activation::Gelu),
            ExpertActivation::Relu => ops::act_backward(u, dh, Activation::Relu),
        }
    }

    /// Route, dispatch, run the experts and combine: `x` `[tokens, H]` → `[tokens, H]`.
    /// Keeps what the backward pass needs.
    pub fn forward(&mut self, x: &Tensor) -> R<Tensor> {
        let tokens = x.rows();
        let logits = ops::matmul_nt(x, &self.router)?.to_f32()?;
        let plan = route(&self.route_request(tokens, logits.clone())).map_err(|m| Error {
            kind: crate::ErrorKind::InvalidArgument,
            message: format!("routing failed: {m}"),
        })?;
        let xd = ops::gather_rows(x, &plan.source_token)?;
        let up_out = self.up.forward(xd, &plan.offs)?;
        let h = self.activation(&up_out)?;
        let expert_out = self.down.forward(h, &plan.offs)?;
        let gates = ops::vector(&plan.gate_weight)?;
        let y = ops::scatter_add_rows(&expert_out, &plan.source_token, Some(&gates), tokens)?;
        self.last_load = plan.load.clone();
        self.last_dropped = plan.dropped;
        self.saved = Some(Saved {
            x: ops::copy(x)?,
            logits,
            plan,
            gates,
            up_out,
            expert_out,
        });
        Ok(y)
    }

    /// Backward from `dy` `[tokens, H]`: gradients of the router and both expert
    /// projections (stored in the layer), and `∂L/∂x` when [`Self::input_grad`] is set.
    pub fn backward(&mut self, dy: &Tensor) -> R<Option<Tensor>> {
        let s = self
            .saved
            .take()
            .ok_or_else(|| invalid("MoeLayer::backward before forward".into()))?;
        let (e, tokens) = (self.config.experts as usize, s.x.rows());
        let index = &s.plan.source_token;
        // Combine: y[t] = Σ_rows g_r · o_r, so dg_r = ⟨dy[t], o_r⟩ and do_r = g_r · dy[t].
        let dy_rows = ops::gather_rows(dy, index)?;
        let dgate = ops::row_dot(&dy_rows, &s.expert_out)?.to_f32()?;
        drop(s.expert_out);
        let d_out = ops::scale_rows(&dy_rows, &s.gates)?;
        drop(dy_rows);
        let dh = self.down.backward(&d_out)?;
        drop(d_out);
        let du = self.activation_backward(&s.up_out, &dh)?;
        drop((dh, s.up_out));
        let dx_experts = if self.input_grad {
            let dxd = self.up.backward(&du)?;
            Some(ops::scatter_add_rows(&dxd, index, None, tokens)?)
        } else {
            self.up.backward_weight(&du)?;
            None
        };
        // Router: gates → logits (the [tokens × k] softmax Jacobian, here), then matmuls.
        let experts_of_row = topk::row_experts(&s.plan.offs);
        let kept: Vec<(usize, usize, f32)> = index
            .iter()
            .zip(&experts_of_row)
            .zip(&dgate)
            .filter(|((&t, _), _)| t >= 0)
            .map(|((&t, &x), &g)| (t as usize, x as usize, g))
            .collect();
        let dlogits = topk::router_softmax_backward(
            &s.logits,
            e,
            self.config.top_k as usize,
            self.config.renormalize,
            &kept,
        );
        let dlogits = Tensor::from_f32(&[tokens, e as u32], &dlogits)?;
        self.router_grad = Some(ops::matmul_tn(&dlogits, &s.x)?);
        match dx_experts {
            Some(dxe) => {
                let dx_router = ops::matmul(&dlogits, &self.router)?;
                Ok(Some(ops::add(&dxe, &dx_router)?))
            }
            None => Ok(None),
        }
    }

    /// Router, up and down weights with their gradients.
    pub fn parameters(&mut self) -> Vec<Param<'_>> {
        vec![
            Param {
                value: &mut self.router,
                grad: self.router_grad.as_ref(),
            },
            Param {
                value: &mut self.up.weight,
                grad: self.up.grad.as_ref(),
            },
            Param {
                value: &mut self.down.weight,
                grad: self.down.grad.as_ref(),
            },
        ]
    }
}

/// Plain SGD: `p ← p − lr · g`.
pub struct Sgd {
    pub lr: f32,
}

impl Sgd {
    pub fn new(lr: f32) -> Self {
        Sgd { lr }
    }
    pub fn step(&mut self, params: Vec<Param<'_>>) -> R<()> {
        for p in params {
            if let Some(g) = p.grad {
                *p.value = ops::sgd_step(p.value, g, self.lr)?;
            }
        }
        Ok(())
    }
}

/// AdamW (decoupled weight decay, bias-corrected) holding one pair of moment tensors
/// per parameter, matched by position in the parameter list.
pub struct AdamW {
    pub config: AdamwConfig,
    pub step: u32,
    moments: Vec<Option<(Tensor, Tensor)>>,
}

impl AdamW {
    /// PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
    pub fn new(lr: f32) -> Self {
        Self::with_config(AdamwConfig {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        })
    }
    pub fn with_config(config: AdamwConfig) -> Self {
        AdamW {
            config,
            step: 0,
            moments: Vec::new(),
        }
    }
    pub fn step(&mut self, params: Vec<Param<'_>>) -> R<()> {
        self.step += 1;
        if self.moments.len() < params.len() {
            self.moments.resize_with(params.len(), || None);
        }
        for (i, p) in params.into_iter().enumerate() {
            let Some(g) = p.grad else { continue };
            if self.moments[i].is_none() {
                let shape = p.value.shape();
                self.moments[i] = Some((
                    Tensor::zeros(&shape, Dtype::F32)?,
                    Tensor::zeros(&shape, Dtype::F32)?,
                ));
            }
            let (m, v) = self.moments[i].as_ref().unwrap();
            let (np, nm, nv) = ops::adamw_step(p.value, g, m, v, self.step, self.config)?;
            *p.value = np;
            self.moments[i] = Some((nm, nv));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::WeightPrep;

    fn caps(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_weight_goes_kept_transposed_or_dense_as_the_plugin_and_layer_say() {
        let mx = caps(&["quantize", "grouped-gemm", "cuda"]);
        let chained = caps(&["quantize", "grouped-gemm", "chained-gemm", "cuda"]);
        let bf16 = caps(&["grouped-gemm", "cuda"]);
        use WeightPrep::*;
        let big = super::CHAINED_MIN_MACS;
        // (keep_values, on_gpu, blocks_2d, caps, multiply-adds) -> prep
        for (keep, gpu, tiles, c, macs, want) in [
            (true, true, true, &mx, big, KeptValues),
            (true, true, false, &mx, big, KeptValues),
            (true, true, true, &chained, big, WithTranspose),
            // small GEMMs: kept values are faster even where the plugin chains
            (true, true, true, &chained, big - 1, KeptValues),
            // the chained GEMM takes 32×32 weights only: 1×32 weights keep their values
            (true, true, false, &chained, big, KeptValues),
            (false, true, true, &chained, big, Dense),
            (true, false, true, &chained, big, Dense),
            (true, true, true, &bf16, big, Dense),
        ] {
            assert_eq!(
                WeightPrep::choose(keep, gpu, tiles, c, macs),
                want,
                "keep {keep} gpu {gpu} tiles {tiles} caps {c:?} macs {macs}"
            );
        }
    }
}
