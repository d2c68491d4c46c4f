//! FP64 reference computations for checking results inside a guest: the three grouped
//! GEMM passes in the `_grouped_mm` convention (weights `[E, N, K]`), and SNR.
//!
//! Plain Rust with no host calls, so it is unit-tested natively.

/// Row range `[start, end)` of each expert from cumulative end offsets.
pub fn groups(offs: &[i32]) -> Vec<(usize, usize)> {
    let mut start = 0usize;
    offs.iter()
        .map(|&end| {
            let g = (start, end as usize);
            start = end as usize;
            g
        })
        .collect()
}

/// y[rows, n] = x_e · w_eᵀ; x: [rows, k], w: [E, n, k]. Padding rows stay zero.
pub fn forward(x: &[f32], w: &[f32], offs: &[i32], rows: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; rows * n];
    for (e, (s, t)) in groups(offs).into_iter().enumerate() {
        let we = &w[e * n * k..(e + 1) * n * k];
        for r in s..t {
            for j in 0..n {
                let mut acc = 0.0f64;
                for c in 0..k {
                    acc += x[r * k + c] as f64 * we[j * k + c] as f64;
                }
                y[r * n + j] = acc;
            }
        }
    }
    y
}

/// dx[rows, k] = dy_e · w_e; dy: [rows, n], w: [E, n, k].
pub fn dgrad(dy: &[f32], w: &[f32], offs: &[i32], rows: usize, n: usize, k: usize) -> Vec<f64> {
    let mut dx = vec![0.0f64; rows * k];
    for (e, (s, t)) in groups(offs).into_iter().enumerate() {
        let we = &w[e * n * k..(e + 1) * n * k];
        for r in s..t {
            for j in 0..n {
                let g = dy[r * n + j] as f64;
                for c in 0..k {
                    dx[r * k + c] += g * we[j * k + c] as f64;
                }
            }
        }
    }
    dx
}

/// dw[E, n, k] = dy_eᵀ · x_e; dy: [rows, n], x: [rows, k].
pub fn wgrad(dy: &[f32], x: &[f32], offs: &[i32], n: usize, k: usize) -> Vec<f64> {
    let mut dw = vec![0.0f64; offs.len() * n * k];
    for (e, (s, t)) in groups(offs).into_iter().enumerate() {
        let out = &mut dw[e * n * k..(e + 1) * n * k];
        for r in s..t {
            for j in 0..n {
                let g = dy[r * n + j] as f64;
                for c in 0..k {
                    out[j * k + c] += g * x[r * k + c] as f64;
                }
            }
        }
    }
    dw
}

/// SNR in dB: 10·log10(Σ ref² / Σ (ref − out)²). Infinite when identical.
pub fn snr_db(reference: &[f64], out: &[f32]) -> f64 {
    assert_eq!(reference.len(), out.len(), "snr_db: length mismatch");
    let (mut signal, mut noise) = (0.0f64, 0.0f64);
    for (&r, &o) in reference.iter().zip(out) {
        signal += r * r;
        let d = r - o as f64;
        noise += d * d;
    }
    if noise == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (signal / noise).log10()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_agree_on_a_tiny_case() {
        // Two experts, rows 0..1 and 1..3, one padding row; n = 2, k = 3.
        let offs = [1, 3];
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let w: Vec<f32> = (0..12).map(|v| (v as f32) * 0.5).collect();
        let y = forward(&x, &w, &offs, 4, 2, 3);
        // row 0 with expert 0: w0 = [[0,.5,1],[1.5,2,2.5]] → x0 = [0,1,2] → [2.5, 7]
        assert_eq!(&y[0..2], &[2.5, 7.0]);
        assert_eq!(&y[6..8], &[0.0, 0.0], "padding row is zero");
        let dy: Vec<f32> = vec![1.0; 8];
        let dx = dgrad(&dy, &w, &offs, 4, 2, 3);
        assert_eq!(&dx[0..3], &[1.5, 2.5, 3.5]);
        let dw = wgrad(&dy, &x, &offs, 2, 3);
        assert_eq!(&dw[0..3], &[0.0, 1.0, 2.0]);
        assert_eq!(&dw[6..9], &[3.0 + 6.0, 4.0 + 7.0, 5.0 + 8.0]);
    }

    #[test]
    fn snr_of_identical_is_infinite_and_of_noise_finite() {
        assert!(snr_db(&[1.0, 2.0], &[1.0, 2.0]).is_infinite());
        let s = snr_db(&[1.0, 1.0], &[1.1, 0.9]);
        assert!((s - 20.0).abs() < 1e-4, "{s}");
    }
}
