//! `mxhost quantize` against hand-computed E4M3/E5M2 bytes and E8M0 scales (worked out
//! from the rules in docs/numerics.md, independently of the plugin's code).

use mxhost_integration_tests::*;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::PathBuf;

fn input_file() -> PathBuf {
    // Row 0: block 0 = [1.0, 0.5, -1.0, 0…], block 1 = [480, 0…]
    // Row 1: block 0 = [496, 0…], block 1 = all zeros.
    let mut w = vec![0f32; 128];
    w[0] = 1.0;
    w[1] = 0.5;
    w[2] = -1.0;
    w[32] = 480.0;
    w[64] = 496.0;
    let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let ids: Vec<u8> = [1i32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        (
            "w",
            safetensors::tensor::TensorView::new(Dtype::F32, vec![2, 64], &bytes).unwrap(),
        ),
        (
            "ids",
            safetensors::tensor::TensorView::new(Dtype::I32, vec![3], &ids).unwrap(),
        ),
    ];
    // Tests run on threads of one process: each call gets its own file.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "mxhost-q-in-{}-{n}.safetensors",
        std::process::id()
    ));
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, &path).unwrap();
    path
}

fn quantize(args: &[&str]) -> (Vec<u8>, Vec<u8>, Vec<usize>, Dtype) {
    let input = input_file();
    let output = std::env::temp_dir().join(format!(
        "mxhost-q-out-{}-{}.safetensors",
        std::process::id(),
        args.join("_")
    ));
    let r = run(mxhost()
        .arg("quantize")
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .args(args));
    assert_eq!(r.code, Some(0), "{}", r.both());
    assert!(r.stderr.contains("skipping `ids`"), "{}", r.stderr);
    let bytes = std::fs::read(&output).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let data = st.tensor("w").unwrap();
    let scales = st.tensor("w.scales").unwrap();
    assert_eq!(scales.dtype(), Dtype::U8);
    let out = (
        data.data().to_vec(),
        scales.data().to_vec(),
        scales.shape().to_vec(),
        data.dtype(),
    );
    std::fs::remove_file(&output).ok();
    std::fs::remove_file(&input).ok();
    out
}

#[test]
fn e4m3_rows_in_each_scale_mode() {
    // (mode, scales [row0 b0, row0 b1, row1 b0, row1 b1], byte of 480, byte of 496)
    for (mode, scales, b480, b496) in [
        ("rceil", [119u8, 128, 128, 0], 0x77u8, 0x78u8), // 480/2 = 240; 496/2 = 248 → tie → 256
        ("floor", [119, 127, 127, 0], 0x7E, 0x7E),       // X = 1: both saturate to 448
        ("even", [119, 127, 128, 1], 0x7E, 0x78),        // the reference's rule; zero block → 1
    ] {
        let (data, s, shape, dtype) = quantize(&["--mode", mode]);
        assert_eq!(dtype, Dtype::F8_E4M3);
        assert_eq!(shape, vec![2, 2]);
        assert_eq!(s, scales, "{mode}");
        assert_eq!(
            &data[0..4],
            &[0x78, 0x70, 0xF8, 0x00],
            "{mode}: 1.0, 0.5, -1.0, 0 at X = 2^-8"
        );
        assert_eq!(data[32], b480, "{mode}: 480");
        assert_eq!(data[64], b496, "{mode}: 496");
        assert!(data[96..].iter().all(|&b| b == 0), "{mode}: zero block");
    }
}

#[test]
fn e5m2_axis_and_tile_layouts() {
    let (data, s, shape, dtype) = quantize(&["--format", "e5m2"]);
    assert_eq!(dtype, Dtype::F8_E5M2);
    assert_eq!(shape, vec![2, 2]);
    assert_eq!(s[0], 112, "amax 1.0 / 57344 rounded up to 2^-15");
    assert_eq!(data[0], 0x78, "1.0 · 2^15 = 2^15 → exponent field 30");
    let (_, _, shape, _) = quantize(&["--axis", "0"]);
    assert_eq!(shape, vec![1, 64]);
    let (_, s, shape, _) = quantize(&["--block", "32x32"]);
    assert_eq!(shape, vec![1, 2]);
    // Columns 0–31 of rows 0–1 hold 1.0 and 496 (amax 496), columns 32–63 hold 480.
    assert_eq!(s, vec![128, 128]);
}
