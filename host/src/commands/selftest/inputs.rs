//! The inputs: seeded random values (with special values), packed as f32 or bf16 bytes,
//! and the same tensor on the CPU and on the GPU.

use super::Ctx;
use crate::device::Device;
use crate::error::OpResult;
use crate::tensor::Tensor;
use mxhost_plugin_abi::DType;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Normal values, each row scaled by 2^U(-12, 12) (exercises the scale rules), with
/// optional special values (NaN, ±Inf, subnormals, huge, an all-zero block).
pub(super) fn gen(rows: usize, cols: usize, seed: u64, std: f32, specials: bool) -> Vec<f32> {
    let mut v = vec![0f32; rows * cols];
    // Rows in parallel chunks, each chunk seeded from (seed, chunk): deterministic.
    let chunk_rows = (rows / 64).max(256);
    std::thread::scope(|sc| {
        for (ci, chunk) in v.chunks_mut((chunk_rows * cols).max(1)).enumerate() {
            sc.spawn(move || {
                let mut r = rng(seed.wrapping_mul(0x9E37_79B9).wrapping_add(ci as u64));
                let normal = rand_distr::Normal::new(0.0f32, std).unwrap();
                for row in chunk.chunks_mut(cols.max(1)) {
                    let s = if specials {
                        2f32.powi(r.random_range(-12..12))
                    } else {
                        1.0
                    };
                    for x in row {
                        *x = normal.sample(&mut r) * s;
                    }
                }
            });
        }
    });
    let mut r = rng(seed ^ 0x5151);
    if specials && !v.is_empty() {
        let n = v.len();
        let specials = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            1e-40,
            3e38,
            -2.5e-45,
        ];
        for sp in specials {
            let i = r.random_range(0..n);
            v[i] = sp;
        }
        if cols >= 64 && rows >= 2 {
            v[..64].iter_mut().for_each(|x| *x = 0.0);
            v[cols + 32..cols + 64].iter_mut().for_each(|x| *x = 62.0);
        }
    }
    v
}

fn bytes_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub(super) fn bytes_bf16(v: &[f32]) -> Vec<u8> {
    v.iter()
        .flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes())
        .collect()
}

/// The same values on the CPU and on the GPU.
pub(super) fn pair(
    ctx: &Ctx,
    shape: &[u64],
    dtype: DType,
    v: &[f32],
) -> OpResult<(Tensor, Tensor)> {
    let b = if dtype == DType::Bf16 {
        bytes_bf16(v)
    } else {
        bytes_f32(v)
    };
    Ok((
        Tensor::from_bytes_on(Device::Cpu, shape.to_vec(), dtype, &b)?,
        Tensor::from_bytes_on(ctx.gpu, shape.to_vec(), dtype, &b)?,
    ))
}
