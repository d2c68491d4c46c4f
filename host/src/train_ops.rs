//! CPU implementations of the `tensor-ops` interface: the dense pieces of a training
//! step around the grouped GEMMs (dispatch/combine, activations, elementwise algebra,
//! a dense matmul, softmax, losses and optimizer updates).
//!
//! Pure functions over f32 slices and shapes, so they are unit-tested directly. Heavy
//! ones run on rayon (row-parallel) or `matrixmultiply`'s sgemm. FP32 throughout; the
//! guest-facing glue converts bf16 inputs and places results on the right device.

use rayon::prelude::*;

pub type OpsResult<T> = Result<T, String>;

/// Rows and columns of a 2-D shape.
pub fn dims2(shape: &[u64], what: &str) -> OpsResult<(usize, usize)> {
    match shape {
        [r, c] => Ok((*r as usize, *c as usize)),
        _ => Err(format!("{what} must be 2-D, got shape {shape:?}")),
    }
}

fn same_shape(a: &[u64], b: &[u64], what: &str) -> OpsResult<()> {
    if a != b {
        return Err(format!("{what}: shapes {a:?} and {b:?} differ"));
    }
    Ok(())
}

const CHUNK: usize = 1 << 14;

fn map2(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0f32; a.len()];
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(i, o)| {
        let s = i * CHUNK;
        for (j, v) in o.iter_mut().enumerate() {
            *v = f(a[s + j], b[s + j]);
        }
    });
    out
}

fn map1(a: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0f32; a.len()];
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .for_each(|(o, i)| {
            for (v, &x) in o.iter_mut().zip(i) {
                *v = f(x);
            }
        });
    out
}

/// out[i, :] = x[index[i], :] or zeros for -1.
pub fn gather_rows(x: &[f32], shape: &[u64], index: &[i32]) -> OpsResult<(Vec<f32>, Vec<u64>)> {
    let (rows, cols) = dims2(shape, "gather-rows input")?;
    if let Some(&bad) = index.iter().find(|&&i| i < -1 || i as i64 >= rows as i64) {
        return Err(format!("gather-rows: index {bad} is outside -1..{rows}"));
    }
    let mut out = vec![0f32; index.len() * cols];
    if cols > 0 {
        out.par_chunks_mut(cols)
            .zip(index.par_iter())
            .for_each(|(o, &i)| {
                if i >= 0 {
                    let i = i as usize;
                    o.copy_from_slice(&x[i * cols..(i + 1) * cols]);
                }
            });
    }
    Ok((out, vec![index.len() as u64, cols as u64]))
}

/// out = zeros[rows, C]; out[index[i]] += w[i] · x[i] for index[i] ≥ 0. Deterministic:
/// each output row sums its contributions in increasing i.
pub fn scatter_add_rows(
    x: &[f32],
    shape: &[u64],
    index: &[i32],
    weights: Option<&[f32]>,
    rows: usize,
) -> OpsResult<(Vec<f32>, Vec<u64>)> {
    let (n, cols) = dims2(shape, "scatter-add-rows input")?;
    if index.len() != n {
        return Err(format!(
            "scatter-add-rows: {} indices for {n} rows",
            index.len()
        ));
    }
    if let Some(w) = weights {
        if w.len() != n {
            return Err(format!(
                "scatter-add-rows: {} weights for {n} rows",
                w.len()
            ));
        }
    }
    if let Some(&bad) = index.iter().find(|&&i| i < -1 || i as i64 >= rows as i64) {
        return Err(format!(
            "scatter-add-rows: index {bad} is outside -1..{rows}"
        ));
    }
    // Invert the index so every output row is owned by one task.
    let mut sources: Vec<Vec<usize>> = vec![Vec::new(); rows];
    for (i, &t) in index.iter().enumerate() {
        if t >= 0 {
            sources[t as usize].push(i);
        }
    }
    let mut out = vec![0f32; rows * cols];
    if cols > 0 {
        out.par_chunks_mut(cols)
            .zip(sources.par_iter())
            .for_each(|(o, src)| {
                for &i in src {
                    let w = weights.map_or(1.0, |w| w[i]);
                    for (v, &xv) in o.iter_mut().zip(&x[i * cols..(i + 1) * cols]) {
                        *v += w * xv;
                    }
                }
            });
    }
    Ok((out, vec![rows as u64, cols as u64]))
}

/// out[i, :] = w[i] · x[i, :].
pub fn scale_rows(x: &[f32], shape: &[u64], w: &[f32]) -> OpsResult<Vec<f32>> {
    let (rows, cols) = dims2(shape, "scale-rows input")?;
    if w.len() != rows {
        return Err(format!("scale-rows: {} weights for {rows} rows", w.len()));
    }
    let mut out = x.to_vec();
    if cols > 0 {
        out.par_chunks_mut(cols)
            .zip(w.par_iter())
            .for_each(|(o, &s)| o.iter_mut().for_each(|v| *v *= s));
    }
    Ok(out)
}

/// out[i] = Σ_j a[i, j] b[i, j], accumulated in f64.
pub fn row_dot(a: &[f32], b: &[f32], shape: &[u64], other: &[u64]) -> OpsResult<Vec<f32>> {
    same_shape(shape, other, "row-dot")?;
    let (rows, cols) = dims2(shape, "row-dot input")?;
    Ok((0..rows)
        .into_par_iter()
        .map(|r| {
            let (x, y) = (&a[r * cols..(r + 1) * cols], &b[r * cols..(r + 1) * cols]);
            x.iter()
                .zip(y)
                .map(|(&p, &q)| p as f64 * q as f64)
                .sum::<f64>() as f32
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Identity,
    Relu,
    Silu,
    Gelu,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (as PyTorch's `approximate="tanh"`).
fn gelu(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044715 * x * x * x)).tanh())
}

fn gelu_grad(x: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    let u = C * (x + 0.044715 * x * x * x);
    let t = u.tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * 0.044715 * x * x)
}

pub fn activation_forward(x: &[f32], kind: Activation) -> Vec<f32> {
    match kind {
        Activation::Identity => x.to_vec(),
        Activation::Relu => map1(x, |v| v.max(0.0)),
        Activation::Silu => map1(x, |v| v * sigmoid(v)),
        Activation::Gelu => map1(x, gelu),
    }
}

pub fn activation_backward(x: &[f32], dy: &[f32], kind: Activation) -> Vec<f32> {
    match kind {
        Activation::Identity => dy.to_vec(),
        Activation::Relu => map2(x, dy, |v, g| if v > 0.0 { g } else { 0.0 }),
        Activation::Silu => map2(x, dy, |v, g| {
            let s = sigmoid(v);
            g * (s + v * s * (1.0 - s))
        }),
        Activation::Gelu => map2(x, dy, |v, g| g * gelu_grad(v)),
    }
}

/// [M, 2F] → silu(a) · b, [M, F].
pub fn swiglu_forward(x: &[f32], shape: &[u64]) -> OpsResult<(Vec<f32>, Vec<u64>)> {
    let (m, f2) = dims2(shape, "swiglu input")?;
    if f2 % 2 != 0 {
        return Err(format!("swiglu needs an even number of columns, got {f2}"));
    }
    let f = f2 / 2;
    let mut out = vec![0f32; m * f];
    if f > 0 {
        out.par_chunks_mut(f).enumerate().for_each(|(r, o)| {
            let row = &x[r * f2..(r + 1) * f2];
            for j in 0..f {
                let a = row[j];
                o[j] = a * sigmoid(a) * row[f + j];
            }
        });
    }
    Ok((out, vec![m as u64, f as u64]))
}

pub fn swiglu_backward(
    x: &[f32],
    shape: &[u64],
    dy: &[f32],
    dy_shape: &[u64],
) -> OpsResult<Vec<f32>> {
    let (m, f2) = dims2(shape, "swiglu input")?;
    let f = f2 / 2;
    if f2 % 2 != 0 || dy_shape != [m as u64, f as u64] {
        return Err(format!(
            "swiglu-backward: x {shape:?} and dy {dy_shape:?} do not match"
        ));
    }
    let mut dx = vec![0f32; m * f2];
    if f > 0 {
        dx.par_chunks_mut(f2).enumerate().for_each(|(r, o)| {
            let row = &x[r * f2..(r + 1) * f2];
            let g = &dy[r * f..(r + 1) * f];
            for j in 0..f {
                let (a, b) = (row[j], row[f + j]);
                let s = sigmoid(a);
                o[j] = g[j] * b * (s + a * s * (1.0 - s));
                o[f + j] = g[j] * a * s;
            }
        });
    }
    Ok(dx)
}

pub fn axpby(
    alpha: f32,
    a: &[f32],
    beta: f32,
    b: &[f32],
    sa: &[u64],
    sb: &[u64],
) -> OpsResult<Vec<f32>> {
    same_shape(sa, sb, "axpby")?;
    Ok(map2(a, b, |x, y| alpha * x + beta * y))
}

pub fn mul(a: &[f32], b: &[f32], sa: &[u64], sb: &[u64]) -> OpsResult<Vec<f32>> {
    same_shape(sa, sb, "mul")?;
    Ok(map2(a, b, |x, y| x * y))
}

/// op(a) · op(b) with FP32 accumulation.
pub fn matmul(
    a: &[f32],
    sa: &[u64],
    b: &[f32],
    sb: &[u64],
    ta: bool,
    tb: bool,
) -> OpsResult<(Vec<f32>, Vec<u64>)> {
    let (ar, ac) = dims2(sa, "matmul a")?;
    let (br, bc) = dims2(sb, "matmul b")?;
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(format!(
            "matmul: inner dimensions differ ({sa:?}{} · {sb:?}{})",
            if ta { "ᵀ" } else { "" },
            if tb { "ᵀ" } else { "" }
        ));
    }
    let mut c = vec![0f32; m * n];
    if m > 0 && n > 0 && k > 0 {
        // Row/column strides of op(a) and op(b) in their row-major storage.
        let (rsa, csa) = if ta {
            (1, ac as isize)
        } else {
            (ac as isize, 1)
        };
        let (rsb, csb) = if tb {
            (1, bc as isize)
        } else {
            (bc as isize, 1)
        };
        // Split the output rows across threads; each task runs one sgemm.
        let rows_per = m.div_ceil(rayon::current_num_threads().max(1)).max(16);
        c.par_chunks_mut(rows_per * n)
            .enumerate()
            .for_each(|(t, chunk)| {
                let r0 = t * rows_per;
                let mr = chunk.len() / n;
                // SAFETY: pointers and strides describe in-bounds views of `a`, `b` and
                // `chunk`: op(a) rows r0..r0+mr (k columns), op(b) k×n, chunk mr×n.
                unsafe {
                    matrixmultiply::sgemm(
                        mr,
                        k,
                        n,
                        1.0,
                        a.as_ptr().offset(r0 as isize * rsa),
                        rsa,
                        csa,
                        b.as_ptr(),
                        rsb,
                        csb,
                        0.0,
                        chunk.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
            });
    }
    Ok((c, vec![m as u64, n as u64]))
}

pub fn softmax_rows(x: &[f32], shape: &[u64]) -> OpsResult<Vec<f32>> {
    let (_, cols) = dims2(shape, "softmax-rows input")?;
    let mut out = x.to_vec();
    if cols > 0 {
        out.par_chunks_mut(cols).for_each(|row| {
            let max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for v in row.iter_mut() {
                *v = (*v - max).exp();
                sum += *v;
            }
            row.iter_mut().for_each(|v| *v /= sum);
        });
    }
    Ok(out)
}

/// Σ x in f64, deterministic: fixed chunks summed in parallel, then in order (rayon's
/// own reduction order depends on work stealing).
pub fn sum(x: &[f32]) -> f64 {
    let partial: Vec<f64> = x
        .par_chunks(CHUNK)
        .map(|c| c.iter().map(|&v| v as f64).sum::<f64>())
        .collect();
    partial.iter().sum()
}

/// (mean((p − t)²), 2(p − t)/numel).
pub fn mse_loss(p: &[f32], t: &[f32], sp: &[u64], st: &[u64]) -> OpsResult<(f64, Vec<f32>)> {
    same_shape(sp, st, "mse-loss")?;
    let n = p.len().max(1) as f32;
    // Deterministic like `sum`: the same loss on every run.
    let partial: Vec<f64> = p
        .par_chunks(CHUNK)
        .zip(t.par_chunks(CHUNK))
        .map(|(a, b)| {
            a.iter()
                .zip(b)
                .map(|(&x, &y)| ((x - y) as f64).powi(2))
                .sum::<f64>()
        })
        .collect();
    let loss = partial.iter().sum::<f64>() / p.len().max(1) as f64;
    Ok((loss, map2(p, t, |a, b| 2.0 * (a - b) / n)))
}

#[derive(Debug, Clone, Copy)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

/// One AdamW step (PyTorch semantics): returns (param, m, v).
pub fn adamw_step(
    p: &[f32],
    g: &[f32],
    m: &[f32],
    v: &[f32],
    step: u32,
    c: AdamW,
) -> OpsResult<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    if g.len() != p.len() || m.len() != p.len() || v.len() != p.len() {
        return Err("adamw-step: param, grad, m and v must have the same shape".into());
    }
    if step == 0 {
        return Err("adamw-step: step counts from 1".into());
    }
    let bc1 = 1.0 - c.beta1.powi(step as i32);
    let bc2 = 1.0 - c.beta2.powi(step as i32);
    let n = p.len();
    let (mut po, mut mo, mut vo) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
    po.par_iter_mut()
        .zip(mo.par_iter_mut())
        .zip(vo.par_iter_mut())
        .enumerate()
        .for_each(|(i, ((pp, mm), vv))| {
            *mm = c.beta1 * m[i] + (1.0 - c.beta1) * g[i];
            *vv = c.beta2 * v[i] + (1.0 - c.beta2) * g[i] * g[i];
            let mhat = *mm / bc1;
            let vhat = *vv / bc2;
            *pp = p[i] * (1.0 - c.lr * c.weight_decay) - c.lr * mhat / (vhat.sqrt() + c.eps);
        });
    Ok((po, mo, vo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gather_then_scatter_is_a_weighted_combine() {
        let x: Vec<f32> = (0..6).map(|v| v as f32).collect(); // 3 rows × 2
        let (g, s) = gather_rows(&x, &[3, 2], &[2, -1, 0, 2]).unwrap();
        assert_eq!(s, vec![4, 2]);
        assert_eq!(g, vec![4.0, 5.0, 0.0, 0.0, 0.0, 1.0, 4.0, 5.0]);
        let (c, s) =
            scatter_add_rows(&g, &[4, 2], &[2, -1, 0, 2], Some(&[0.5, 9.0, 1.0, 0.25]), 3).unwrap();
        assert_eq!(s, vec![3, 2]);
        assert_eq!(c, vec![0.0, 1.0, 0.0, 0.0, 3.0, 3.75]);
        assert!(gather_rows(&x, &[3, 2], &[3]).is_err());
        assert!(scatter_add_rows(&g, &[4, 2], &[0, 0, 0], None, 3).is_err());
    }

    #[test]
    fn matmul_handles_every_transpose() {
        let a = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2,3]
        let b = vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // [3,2]
        let (c, s) = matmul(&a, &[2, 3], &b, &[3, 2], false, false).unwrap();
        assert_eq!((c.clone(), s), (vec![4.0, 5.0, 10.0, 11.0], vec![2, 2]));
        // aᵀ stored as [3,2], bᵀ stored as [2,3]: same product.
        let at = vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        let bt = vec![1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        assert_eq!(matmul(&at, &[3, 2], &bt, &[2, 3], true, true).unwrap().0, c);
        assert!(matmul(&a, &[2, 3], &a, &[2, 3], false, false).is_err());
        // A tall product split across threads agrees with a naive loop.
        let m = 300;
        let a: Vec<f32> = (0..m * 7).map(|i| (i % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..7 * 5).map(|i| (i % 5) as f32 - 2.0).collect();
        let (c, _) = matmul(&a, &[m as u64, 7], &b, &[7, 5], false, false).unwrap();
        for r in [0, 17, 299] {
            for j in 0..5 {
                let want: f32 = (0..7).map(|k| a[r * 7 + k] * b[k * 5 + j]).sum();
                assert_eq!(c[r * 5 + j], want);
            }
        }
    }

    fn numeric_grad(f: impl Fn(f32) -> f32, x: f32) -> f32 {
        let h = 1e-3;
        (f(x + h) - f(x - h)) / (2.0 * h)
    }

    #[test]
    fn activation_gradients_match_finite_differences() {
        let xs = [-2.0f32, -0.3, 0.0, 0.7, 1.9];
        for kind in [
            Activation::Silu,
            Activation::Gelu,
            Activation::Relu,
            Activation::Identity,
        ] {
            let d = activation_backward(&xs, &[1.0; 5], kind);
            for (i, &x) in xs.iter().enumerate() {
                if kind == Activation::Relu && x == 0.0 {
                    continue;
                }
                let want = numeric_grad(|v| activation_forward(&[v], kind)[0], x);
                assert!(
                    (d[i] - want).abs() < 2e-3,
                    "{kind:?} at {x}: {} vs {want}",
                    d[i]
                );
            }
        }
        let x = [0.3f32, -1.2, 2.0, 0.5];
        let dx = swiglu_backward(&x, &[1, 4], &[1.0, 1.0], &[1, 2]).unwrap();
        for j in 0..4 {
            let f = |v: f32| {
                let mut y = x;
                y[j] = v;
                swiglu_forward(&y, &[1, 4]).unwrap().0.iter().sum::<f32>()
            };
            let want = numeric_grad(f, x[j]);
            assert!(
                (dx[j] - want).abs() < 2e-3,
                "swiglu d{j}: {} vs {want}",
                dx[j]
            );
        }
    }

    #[test]
    fn losses_softmax_and_optimizers() {
        let (l, g) = mse_loss(&[1.0, 3.0], &[0.0, 1.0], &[2], &[2]).unwrap();
        assert_eq!(l, 2.5);
        assert_eq!(g, vec![1.0, 2.0]);
        let s = softmax_rows(&[0.0, 0.0, 1000.0, 1000.0], &[2, 2]).unwrap();
        assert_eq!(s, vec![0.5; 4]);
        let c = AdamW {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let (p, m, v) = adamw_step(&[1.0], &[0.5], &[0.0], &[0.0], 1, c).unwrap();
        // First step moves by lr · sign(g) (bias correction makes m̂/√v̂ = ±1).
        assert!((p[0] - 0.9).abs() < 1e-6, "{p:?}");
        assert!(
            (m[0] - 0.05).abs() < 1e-6 && (v[0] - 0.00025).abs() < 1e-7,
            "{m:?} {v:?}"
        );
        assert!(adamw_step(&[1.0], &[0.5], &[0.0], &[0.0], 0, c).is_err());
        assert_eq!(
            row_dot(
                &[1.0, 2.0, 3.0, 4.0],
                &[1.0, 1.0, 2.0, 0.5],
                &[2, 2],
                &[2, 2]
            )
            .unwrap(),
            vec![3.0, 8.0]
        );
        assert_eq!(sum(&[1.0, 2.0, 3.5]), 6.5);
    }
}
