//! The host side of `tensor-ops`: reads operands as f32, runs the CPU kernels of
//! [`crate::train_ops`], and returns new tensors on the device of the first input.

use super::bindings::{tensor_ops as wit, types};
use super::convert::dtype_from_wit;
use super::state::HostState;
use crate::error::{OpError, OpResult};
use crate::tensor::Tensor;
use crate::train_ops::{self as k, Activation};
use mxhost_plugin_abi::DType;
use wasmtime::component::Resource;

/// The f32 values of a float tensor (bf16 widened exactly).
fn values(t: &Tensor) -> OpResult<Vec<f32>> {
    if !matches!(t.dtype, DType::F32 | DType::Bf16) {
        return Err(OpError::invalid(format!(
            "tensor-ops need f32 or bf16 tensors, got {}",
            t.dtype.name()
        )));
    }
    t.try_to_f32_vec()
}

/// A new f32 tensor holding `data`, on the device of `like` (the kernels here run on
/// the CPU; results go back where the inputs live, so a GPU run keeps its tensors there).
fn output_like(like: &Tensor, shape: Vec<u64>, data: Vec<f32>) -> OpResult<Tensor> {
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::from_bytes_on(like.location(), shape, DType::F32, &bytes)
}

fn bf16_output_like(like: &Tensor, shape: Vec<u64>, data: &[f32]) -> OpResult<Tensor> {
    let bytes: Vec<u8> = data
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_bits().to_le_bytes())
        .collect();
    Tensor::from_bytes_on(like.location(), shape, DType::Bf16, &bytes)
}

fn activation(a: wit::Activation) -> Activation {
    match a {
        wit::Activation::Identity => Activation::Identity,
        wit::Activation::Relu => Activation::Relu,
        wit::Activation::Silu => Activation::Silu,
        wit::Activation::Gelu => Activation::Gelu,
    }
}

impl HostState {
    fn t(&self, r: &Resource<Tensor>) -> OpResult<Tensor> {
        self.table.get(r).cloned().map_err(|e| {
            OpError::new(
                crate::error::ErrorKind::BadHandle,
                format!("invalid tensor handle: {e}"),
            )
        })
    }

    /// Budget-check and register a result.
    fn emit(
        &mut self,
        like: &Tensor,
        shape: Vec<u64>,
        data: Vec<f32>,
    ) -> OpResult<Resource<Tensor>> {
        self.check_room(data.len() as u64 * 4)?;
        let t = output_like(like, shape, data)?;
        self.push_tensor(t)
    }
}

fn invalid(e: String) -> OpError {
    OpError::invalid(e)
}

impl wit::Host for HostState {
    fn gather_rows(&mut self, x: Resource<Tensor>, index: Vec<i32>) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let cols = x.shape.get(1).copied().unwrap_or(0);
        self.check_room(index.len() as u64 * cols * 4)?;
        let (out, shape) = k::gather_rows(&values(&x)?, &x.shape, &index).map_err(invalid)?;
        self.emit(&x, shape, out)
    }

    fn scatter_add_rows(
        &mut self,
        x: Resource<Tensor>,
        index: Vec<i32>,
        weights: Option<Resource<Tensor>>,
        rows: u32,
    ) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let w = match weights {
            Some(w) => Some(values(&self.t(&w)?)?),
            None => None,
        };
        let cols = x.shape.get(1).copied().unwrap_or(0);
        self.check_room(rows as u64 * cols * 4)?;
        let (out, shape) =
            k::scatter_add_rows(&values(&x)?, &x.shape, &index, w.as_deref(), rows as usize)
                .map_err(invalid)?;
        self.emit(&x, shape, out)
    }

    fn scale_rows(
        &mut self,
        x: Resource<Tensor>,
        w: Resource<Tensor>,
    ) -> OpResult<Resource<Tensor>> {
        let (x, w) = (self.t(&x)?, self.t(&w)?);
        let out = k::scale_rows(&values(&x)?, &x.shape, &values(&w)?).map_err(invalid)?;
        self.emit(&x, x.shape.clone(), out)
    }

    fn row_dot(&mut self, a: Resource<Tensor>, b: Resource<Tensor>) -> OpResult<Resource<Tensor>> {
        let (a, b) = (self.t(&a)?, self.t(&b)?);
        let out = k::row_dot(&values(&a)?, &values(&b)?, &a.shape, &b.shape).map_err(invalid)?;
        self.emit(&a, vec![out.len() as u64], out)
    }

    fn activation_forward(
        &mut self,
        x: Resource<Tensor>,
        kind: wit::Activation,
    ) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let out = k::activation_forward(&values(&x)?, activation(kind));
        self.emit(&x, x.shape.clone(), out)
    }

    fn activation_backward(
        &mut self,
        x: Resource<Tensor>,
        dy: Resource<Tensor>,
        kind: wit::Activation,
    ) -> OpResult<Resource<Tensor>> {
        let (x, dy) = (self.t(&x)?, self.t(&dy)?);
        if x.shape != dy.shape {
            return Err(OpError::invalid(format!(
                "activation-backward: x {:?} and dy {:?} differ",
                x.shape, dy.shape
            )));
        }
        let out = k::activation_backward(&values(&x)?, &values(&dy)?, activation(kind));
        self.emit(&x, x.shape.clone(), out)
    }

    fn swiglu_forward(&mut self, x: Resource<Tensor>) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let (out, shape) = k::swiglu_forward(&values(&x)?, &x.shape).map_err(invalid)?;
        self.emit(&x, shape, out)
    }

    fn swiglu_backward(
        &mut self,
        x: Resource<Tensor>,
        dy: Resource<Tensor>,
    ) -> OpResult<Resource<Tensor>> {
        let (x, dy) = (self.t(&x)?, self.t(&dy)?);
        let out = k::swiglu_backward(&values(&x)?, &x.shape, &values(&dy)?, &dy.shape)
            .map_err(invalid)?;
        self.emit(&x, x.shape.clone(), out)
    }

    fn axpby(
        &mut self,
        alpha: f32,
        a: Resource<Tensor>,
        beta: f32,
        b: Resource<Tensor>,
    ) -> OpResult<Resource<Tensor>> {
        let (a, b) = (self.t(&a)?, self.t(&b)?);
        let out = k::axpby(alpha, &values(&a)?, beta, &values(&b)?, &a.shape, &b.shape)
            .map_err(invalid)?;
        self.emit(&a, a.shape.clone(), out)
    }

    fn mul(&mut self, a: Resource<Tensor>, b: Resource<Tensor>) -> OpResult<Resource<Tensor>> {
        let (a, b) = (self.t(&a)?, self.t(&b)?);
        let out = k::mul(&values(&a)?, &values(&b)?, &a.shape, &b.shape).map_err(invalid)?;
        self.emit(&a, a.shape.clone(), out)
    }

    fn matmul(
        &mut self,
        a: Resource<Tensor>,
        b: Resource<Tensor>,
        transpose_a: bool,
        transpose_b: bool,
    ) -> OpResult<Resource<Tensor>> {
        let (a, b) = (self.t(&a)?, self.t(&b)?);
        if a.shape.len() == 2 && b.shape.len() == 2 {
            let m = if transpose_a { a.shape[1] } else { a.shape[0] };
            let n = if transpose_b { b.shape[0] } else { b.shape[1] };
            self.check_room(m.saturating_mul(n).saturating_mul(4))?;
        }
        let (out, shape) = k::matmul(
            &values(&a)?,
            &a.shape,
            &values(&b)?,
            &b.shape,
            transpose_a,
            transpose_b,
        )
        .map_err(invalid)?;
        self.emit(&a, shape, out)
    }

    fn softmax_rows(&mut self, x: Resource<Tensor>) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let out = k::softmax_rows(&values(&x)?, &x.shape).map_err(invalid)?;
        self.emit(&x, x.shape.clone(), out)
    }

    fn cast(&mut self, x: Resource<Tensor>, to: types::Dtype) -> OpResult<Resource<Tensor>> {
        let x = self.t(&x)?;
        let v = values(&x)?;
        match dtype_from_wit(to) {
            DType::F32 => self.emit(&x, x.shape.clone(), v),
            DType::Bf16 => {
                self.check_room(v.len() as u64 * 2)?;
                let t = bf16_output_like(&x, x.shape.clone(), &v)?;
                self.push_tensor(t)
            }
            other => Err(OpError::invalid(format!(
                "cast: target must be f32 or bf16, not {}",
                other.name()
            ))),
        }
    }

    fn sum(&mut self, x: Resource<Tensor>) -> OpResult<f64> {
        let x = self.t(&x)?;
        Ok(k::sum(&values(&x)?))
    }

    fn mse_loss(
        &mut self,
        prediction: Resource<Tensor>,
        target: Resource<Tensor>,
    ) -> OpResult<(f64, Resource<Tensor>)> {
        let (p, t) = (self.t(&prediction)?, self.t(&target)?);
        let (loss, grad) =
            k::mse_loss(&values(&p)?, &values(&t)?, &p.shape, &t.shape).map_err(invalid)?;
        Ok((loss, self.emit(&p, p.shape.clone(), grad)?))
    }

    fn sgd_step(
        &mut self,
        param: Resource<Tensor>,
        grad: Resource<Tensor>,
        lr: f32,
    ) -> OpResult<Resource<Tensor>> {
        let (p, g) = (self.t(&param)?, self.t(&grad)?);
        let out =
            k::axpby(1.0, &values(&p)?, -lr, &values(&g)?, &p.shape, &g.shape).map_err(invalid)?;
        self.emit(&p, p.shape.clone(), out)
    }

    fn adamw_step(
        &mut self,
        param: Resource<Tensor>,
        grad: Resource<Tensor>,
        m: Resource<Tensor>,
        v: Resource<Tensor>,
        step: u32,
        c: wit::AdamwConfig,
    ) -> OpResult<(Resource<Tensor>, Resource<Tensor>, Resource<Tensor>)> {
        let (p, g, m, v) = (self.t(&param)?, self.t(&grad)?, self.t(&m)?, self.t(&v)?);
        for (name, t) in [("grad", &g), ("m", &m), ("v", &v)] {
            if t.shape != p.shape {
                return Err(OpError::invalid(format!(
                    "adamw-step: {name} {:?} differs from param {:?}",
                    t.shape, p.shape
                )));
            }
        }
        let cfg = k::AdamW {
            lr: c.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: c.weight_decay,
        };
        let (np, nm, nv) = k::adamw_step(
            &values(&p)?,
            &values(&g)?,
            &values(&m)?,
            &values(&v)?,
            step,
            cfg,
        )
        .map_err(invalid)?;
        let shape = p.shape.clone();
        let rp = self.emit(&p, shape.clone(), np)?;
        let rm = self.emit(&p, shape.clone(), nm)?;
        let rv = self.emit(&p, shape, nv)?;
        Ok((rp, rm, rv))
    }
}
