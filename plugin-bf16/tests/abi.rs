//! The exported C ABI of the bf16 plugin: its table, a GEMM through the entry, and the
//! requests it must answer Unsupported (quantize, dequantize, MX operands, devices).

use mxhost_plugin_abi::*;
use mxhost_plugin_bf16::mxhost_plugin_entry;
use mxhost_plugin_common::testing::{call_entry as call, view, Rng};
use std::ffi::CStr;

fn api() -> &'static PluginApi {
    // SAFETY: the entry returns a pointer to a static table.
    unsafe { &*mxhost_plugin_entry() }
}

fn empty_mx() -> MxTensorView {
    MxTensorView {
        struct_size: std::mem::size_of::<MxTensorView>(),
        data: TensorView::empty(),
        scales: TensorView::empty(),
        format: 0,
        mode: 0,
        block: BlockLayout::vector(0),
    }
}

fn dense(t: TensorView) -> Operand {
    Operand {
        struct_size: std::mem::size_of::<Operand>(),
        kind: OperandKind::Dense as u32,
        dense: t,
        mx: empty_mx(),
    }
}

#[test]
fn the_table_describes_the_plugin() {
    let t = api();
    assert_eq!(t.magic, PLUGIN_MAGIC);
    assert_eq!((t.abi_major, t.abi_minor), (ABI_MAJOR, ABI_MINOR));
    assert_eq!(t.struct_size, std::mem::size_of::<PluginApi>());
    // SAFETY: static NUL-terminated strings.
    unsafe {
        assert_eq!(CStr::from_ptr(t.name).to_str().unwrap(), "bf16");
        assert_eq!(
            CStr::from_ptr(t.precision).to_str().unwrap(),
            "BF16 operands, FP32 accumulation"
        );
    }
    assert_eq!(
        t.capabilities,
        caps::GROUPED_GEMM
            | caps::DENSE_OPERANDS
            | caps::DEVICE_CPU
            | if cfg!(feature = "cuda") {
                caps::DEVICE_CUDA
            } else {
                0
            }
    );
}

#[test]
fn quantize_and_dequantize_are_unsupported() {
    // SAFETY: these entries do not read the descriptor.
    let (st, msg) = call(|e| unsafe { (api().quantize)(std::ptr::null(), e) });
    assert_eq!(st, Status::Unsupported);
    assert!(msg.contains("does not quantize"), "{msg}");
    // SAFETY: as above.
    let (st, _) = call(|e| unsafe { (api().dequantize)(std::ptr::null(), e) });
    assert_eq!(st, Status::Unsupported);
}

#[test]
fn gemm_through_the_abi_and_its_rejections() {
    let mut rng = Rng::new(1);
    let mut a = rng.normals(100 * 64, 1.0);
    let mut w = rng.normals(2 * 48 * 64, 0.1);
    let mut out = vec![f32::NAN; 100 * 48];
    let offs = [40i32, 90];
    let desc = GroupedGemmDesc {
        struct_size: std::mem::size_of::<GroupedGemmDesc>(),
        pass: GemmPass::Forward as u32,
        a: dense(view(&mut a, DType::F32, &[100, 64])),
        b: dense(view(&mut w, DType::F32, &[2, 48, 64])),
        offs_host: offs.as_ptr(),
        offs_device: std::ptr::null(),
        num_groups: 2,
        out: view(&mut out, DType::F32, &[100, 48]),
        options: GemmOptions {
            struct_size: std::mem::size_of::<GemmOptions>(),
            format: 0,
            mode: 0,
            weight_blocks_2d: 0,
            weight_layout: WeightLayout::Nk as u32,
            hadamard: 0,
            dge: 0,
            bias: 0,
        },
        rows: 100,
        n: 48,
        k: 64,
        stream: std::ptr::null_mut(),
    };
    // SAFETY: descriptors over live buffers; variations only make them inconsistent.
    let gemm = |d: &GroupedGemmDesc| call(|e| unsafe { (api().grouped_gemm)(d, e) });

    let mut d = desc;
    d.b.kind = OperandKind::Mx as u32;
    let mut wd = vec![0u8; 2 * 48 * 64];
    let mut ws = vec![127u8; 2 * 48 * 2];
    d.b.mx.data = view(&mut wd, DType::E4m3, &[2, 48, 64]);
    d.b.mx.scales = view(&mut ws, DType::E8m0, &[2, 48, 2]);
    d.b.mx.block = BlockLayout::vector(2);
    let (st, msg) = gemm(&d);
    assert_eq!(st, Status::Unsupported, "{msg}");
    assert!(msg.contains("MX"), "{msg}");

    let mut d = desc;
    d.options.bias = 1;
    assert_eq!(gemm(&d).0, Status::Unsupported);

    let mut d = desc;
    for v in [&mut d.a.dense, &mut d.b.dense, &mut d.out] {
        v.device = DeviceKind::Cuda as u32;
    }
    if !cfg!(feature = "cuda") {
        assert_eq!(
            gemm(&d),
            (
                Status::Unsupported,
                "CUDA backend not built/available".to_string()
            )
        );
    } else if !mxhost_plugin_bf16::backend::cuda_driver_present() {
        // Built with CUDA, run without a driver: a clear Unsupported, no panic.
        let (st, msg) = gemm(&d);
        assert_eq!(st, Status::Unsupported, "{msg}");
        assert!(msg.contains("libcuda"), "{msg}");
    }
    // (With a real driver, host pointers must not reach the GPU backend.)

    // MX operands are Unsupported on the CUDA backend too, before any CUDA call.
    let mut d = desc;
    d.b.kind = OperandKind::Mx as u32;
    d.b.mx.data = view(&mut wd, DType::E4m3, &[2, 48, 64]);
    d.b.mx.scales = view(&mut ws, DType::E8m0, &[2, 48, 2]);
    d.b.mx.block = BlockLayout::vector(2);
    for v in [
        &mut d.a.dense,
        &mut d.b.mx.data,
        &mut d.b.mx.scales,
        &mut d.out,
    ] {
        v.device = DeviceKind::Cuda as u32;
    }
    if cfg!(feature = "cuda") {
        let (st, msg) = gemm(&d);
        assert_eq!(st, Status::Unsupported, "{msg}");
        assert!(msg.contains("MX"), "{msg}");
    }

    let mut d = desc;
    d.k = 65;
    assert_eq!(gemm(&d).0, Status::InvalidArgument);
    assert!(
        out.iter().all(|v| v.is_nan()),
        "rejected calls write nothing"
    );

    // The bf16 plugin ignores format/mode (it does not quantize), even if unknown.
    let mut d = desc;
    d.options.format = 99;
    let (st, msg) = gemm(&d);
    assert_eq!(st, Status::Ok, "{msg}");
    assert!(out[..90 * 48].iter().all(|v| v.is_finite()));
    assert!(out[90 * 48..].iter().all(|&v| v == 0.0));
}
