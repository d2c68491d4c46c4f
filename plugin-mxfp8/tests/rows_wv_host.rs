//! The fused default-path quantizer `mx_quantize_rows_wv_bf16_*` (`cuda/include/mx_quant_rows_wv.cuh`:
//! X's 1×32 quantization along rows and wgrad's fake-quantized values along M from one read), run
//! on the host through `tests/host/simt.hpp` and compared with the CPU references on fresh random
//! bf16 input: q and s with `quantize_mx` (1×32 blocks along rows), wv with `fake_quantize` in
//! 32×1 blocks along rows from row 0 (what `mx_fakequant_m32_*` writes with the blocks
//! (32 k, min(32, R − 32 k))), and in the VALS build (`mx_quantize_rows_vals_wv_bf16_*`) the row
//! values with `fake_quantize` in 1×32 blocks along rows. Every output is poisoned first and compared whole, for both
//! formats and all three scale modes, on inputs whose 32×1 and 1×32 blocks draw zeros, tiny
//! values (the fake quantizer's reference decode), huge ones, NaN and ±Inf; R not a multiple of
//! 32, C from one warp's 32 columns to 4096, grid y below the row blocks (the grid-stride loop)
//! and at them.

use half::bf16;
use mxhost_plugin_abi::{MxFormat, ScaleMode};

mod host;

#[test]
fn the_fused_rows_and_wgrad_values_kernel_equals_the_cpu_references() {
    let Some((exe, mut rng, seed)) = host::setup("rows_wv_host", "rows_wv_driver.cpp") else {
        return;
    };
    let modes = [ScaleMode::Rceil, ScaleMode::Floor, ScaleMode::Even];
    for (r, c, gy) in [(200, 32, 7), (1016, 96, 5), (200, 2880, 3), (40, 4096, 2)] {
        let x: Vec<bf16> = host::two_axis_test_values(&mut rng, r, c)
            .into_iter()
            .map(bf16::from_f32)
            .collect();
        let input: Vec<u8> = x.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
        for (fmt, format) in [MxFormat::E4m3, MxFormat::E5m2].into_iter().enumerate() {
            for (m, mode) in modes.into_iter().enumerate() {
                // (the VALS build on alternate cases: each format and mode gets both builds
                // over the four shapes)
                let vals = (r + fmt + m) % 2;
                let ctx =
                    format!("{r} x {c} {format:?} {mode:?}, grid y {gy}, vals {vals}, seed {seed}");
                let o = host::run_driver(&exe, &[r, c, fmt, m, gy, vals], &[&input]);
                let (n, kb) = (r * c, c / 32);
                assert_eq!(o.len(), (3 + 2 * vals) * n + r * kb, "{ctx}: output size");
                let (q, s) = host::rows_reference(&x, (r, c), format, mode);
                host::first_difference(&format!("{ctx}: q"), &o[..n], &q, c);
                host::first_difference(&format!("{ctx}: s"), &o[n..n + r * kb], &s, kb);
                let (wv, rest) = o[n + r * kb..].split_at(2 * n);
                let want = host::wgrad_values(&x, (r, c), format, mode);
                host::same_bf16_values(&format!("{ctx}: wv"), wv, &want, c);
                if vals == 1 {
                    let want = host::row_values(&x, (r, c), format, mode);
                    host::same_bf16_values(&format!("{ctx}: vals"), rest, &want, c);
                }
            }
        }
    }
}
