//! The exported C ABI: the function table, calls through it matching the Rust API,
//! and malformed or unsupported requests answered with the right status and message
//! (never a panic or an out-of-bounds read).

mod common;

use common::Rng;
use mxhost_plugin_abi::*;
use mxhost_plugin_common::testing::{call_entry as call, view};
use mxhost_plugin_mxfp8::{dequantize_mx, mxhost_plugin_entry, quantize_mx, scale_count};
use std::ffi::{c_void, CStr};

fn api() -> &'static PluginApi {
    // SAFETY: the entry returns a pointer to a static table.
    unsafe { &*mxhost_plugin_entry() }
}

fn mx_view(
    data: &mut [u8],
    scales: &mut [u8],
    shape: &[u64],
    format: MxFormat,
    block: BlockLayout,
) -> MxTensorView {
    let sshape = scale_shape(shape, block).unwrap();
    MxTensorView {
        struct_size: std::mem::size_of::<MxTensorView>(),
        data: view(data, format.dtype(), shape),
        scales: view(scales, DType::E8m0, &sshape),
        format: format as u32,
        mode: ScaleMode::Rceil as u32,
        block,
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
        assert_eq!(CStr::from_ptr(t.name).to_str().unwrap(), "mxfp8");
        assert_eq!(
            CStr::from_ptr(t.precision).to_str().unwrap(),
            "MXFP8 (E4M3/E5M2, E8M0 scales)"
        );
        assert_eq!(
            CStr::from_ptr(t.version).to_str().unwrap(),
            env!("CARGO_PKG_VERSION")
        );
    }
    assert_eq!(
        t.capabilities,
        caps::QUANTIZE
            | caps::GROUPED_GEMM
            | caps::MX_OPERANDS
            | caps::DENSE_OPERANDS
            | caps::DEVICE_CPU
            | if cfg!(feature = "cuda") {
                caps::DEVICE_CUDA
            } else {
                0
            }
    );
}

fn quantize_desc(input: TensorView, output: MxTensorView) -> QuantizeDesc {
    QuantizeDesc {
        struct_size: std::mem::size_of::<QuantizeDesc>(),
        input,
        output,
        stream: std::ptr::null_mut(),
        transposed: MxTensorView::absent(),
        values: TensorView::absent(),
        annex: TensorView::absent(),
        transposed_annex: TensorView::absent(),
        wgrad_values: TensorView::absent(),
        wgrad_offs: std::ptr::null(),
        wgrad_num_groups: 0,
        bytes_on_demand: 0,
        weight: MxTensorView::absent(),
        weight_annex: TensorView::absent(),
    }
}

/// The 32 × 64 f32 → E4M3 case (1×32 blocks along rows) that the descriptor tests start
/// from: its buffers, and a quantize descriptor over them.
struct RowCase {
    x: Vec<f32>,
    d: Vec<u8>,
    s: Vec<u8>,
}

impl RowCase {
    const SHAPE: [u64; 2] = [32, 64];

    fn filled(value: f32) -> RowCase {
        RowCase {
            x: vec![value; 32 * 64],
            d: vec![0; 32 * 64],
            s: vec![0; 64],
        }
    }

    fn desc(&mut self) -> QuantizeDesc {
        quantize_desc(
            view(&mut self.x, DType::F32, &Self::SHAPE),
            mx_view(
                &mut self.d,
                &mut self.s,
                &Self::SHAPE,
                MxFormat::E4m3,
                BlockLayout::vector(1),
            ),
        )
    }
}

/// The transposed copy (ABI 1.1) equals quantizing xᵀ directly, for every block layout
/// (the transposed layout's blocks are the same sets of elements), on [3, 70, 45].
#[test]
fn the_transposed_copy_is_the_quantization_of_the_transpose() {
    let mut rng = Rng::new(7);
    let shape = [3u64, 70, 45];
    let shape_t = [3u64, 45, 70];
    let mut x = rng.normals(3 * 70 * 45, 3.0);
    x[5] = f32::NAN;
    x[100] = 0.0;
    let mut xt = vec![0f32; x.len()];
    for b in 0..3 {
        for i in 0..70 {
            for j in 0..45 {
                xt[b * 3150 + j * 70 + i] = x[b * 3150 + i * 45 + j];
            }
        }
    }
    for block in [
        BlockLayout::vector(2),
        BlockLayout::vector(1),
        BlockLayout::tile(),
    ] {
        let block_t = transposed_block(block, 3);
        let ns = scale_count(&shape, block).unwrap();
        let (mut d, mut s) = (vec![0u8; x.len()], vec![0u8; ns]);
        let (mut dt, mut st_) = (vec![0xAAu8; x.len()], vec![0xAAu8; ns]);
        let mut desc = quantize_desc(
            view(&mut x, DType::F32, &shape),
            mx_view(&mut d, &mut s, &shape, MxFormat::E4m3, block),
        );
        desc.transposed = mx_view(&mut dt, &mut st_, &shape_t, MxFormat::E4m3, block_t);
        // SAFETY: valid descriptor over live, disjoint buffers.
        let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
        assert_eq!(st, Status::Ok, "{msg}");
        let (mut d2, mut s2) = (vec![0u8; x.len()], vec![0u8; ns]);
        quantize_mx(
            &xt,
            &shape_t,
            block_t,
            MxFormat::E4m3,
            ScaleMode::Rceil,
            &mut d2,
            &mut s2,
        )
        .unwrap();
        assert_eq!(dt, d2, "{block:?}: transposed data");
        assert_eq!(st_, s2, "{block:?}: transposed scales");

        // A transposed copy with the wrong block layout is refused.
        desc.transposed.block = block;
        if block != block_t {
            let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
            assert_eq!(st, Status::InvalidArgument, "{msg}");
            assert!(msg.contains("quantize.transposed"), "{msg}");
        }
    }
}

/// A host of ABI 1.0 writes a shorter QuantizeDesc (no `transposed`): still accepted.
#[test]
fn an_abi_1_0_quantize_descriptor_is_accepted() {
    let mut case = RowCase::filled(1.5);
    let mut desc = case.desc();
    desc.struct_size = QUANTIZE_DESC_SIZE_1_0;
    // Garbage where a 1.0 host's descriptor has ended must not be read.
    desc.transposed.struct_size = 12345;
    // SAFETY: valid descriptor; the plugin reads only struct_size bytes.
    let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
    assert_eq!(st, Status::Ok, "{msg}");
    let d = &case.d;
    assert!(d.iter().all(|&b| b == d[0]) && d[0] != 0);
}

#[test]
fn quantize_and_dequantize_through_the_abi_match_the_rust_api() {
    let mut rng = Rng::new(1);
    let shape = [70u64, 45];
    let mut x = rng.normals(70 * 45, 2.0);
    for block in [
        BlockLayout::vector(1),
        BlockLayout::vector(0),
        BlockLayout::tile(),
    ] {
        let ns = scale_count(&shape, block).unwrap();
        let (mut d, mut s) = (vec![0u8; x.len()], vec![0u8; ns]);
        let desc = quantize_desc(
            view(&mut x, DType::F32, &shape),
            mx_view(&mut d, &mut s, &shape, MxFormat::E4m3, block),
        );
        // SAFETY: valid descriptor over live buffers.
        let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
        assert_eq!(st, Status::Ok, "{msg}");
        let (mut d2, mut s2) = (vec![0u8; x.len()], vec![0u8; ns]);
        quantize_mx(
            &x,
            &shape,
            block,
            MxFormat::E4m3,
            ScaleMode::Rceil,
            &mut d2,
            &mut s2,
        )
        .unwrap();
        assert_eq!((&d, &s), (&d2, &s2));

        let mut y = vec![half::bf16::ZERO; x.len()];
        let desc = DequantizeDesc {
            struct_size: std::mem::size_of::<DequantizeDesc>(),
            input: mx_view(&mut d, &mut s, &shape, MxFormat::E4m3, block),
            output: view(&mut y, DType::Bf16, &shape),
            stream: std::ptr::null_mut(),
        };
        // SAFETY: valid descriptor over live buffers.
        let (st, msg) = call(|e| unsafe { (api().dequantize)(&desc, e) });
        assert_eq!(st, Status::Ok, "{msg}");
        let mut y2 = vec![half::bf16::ZERO; x.len()];
        dequantize_mx(&d2, &s2, &shape, block, MxFormat::E4m3, &mut y2).unwrap();
        assert_eq!(y, y2);
    }
}

#[test]
fn malformed_quantize_requests_are_rejected() {
    let shape = [64u64, 64];
    let mut x = vec![1.0f32; 64 * 64];
    let (mut d, mut s) = (vec![0u8; 64 * 64], vec![0u8; 128]);
    let good = quantize_desc(
        view(&mut x, DType::F32, &shape),
        mx_view(
            &mut d,
            &mut s,
            &shape,
            MxFormat::E4m3,
            BlockLayout::vector(1),
        ),
    );
    let run = |desc: &QuantizeDesc| {
        // SAFETY: every descriptor below points at live buffers at least as large as
        // the good one's; the plugin must reject the inconsistent ones before reading.
        call(|e| unsafe { (api().quantize)(desc, e) })
    };
    assert_eq!(run(&good).0, Status::Ok);

    // SAFETY: null descriptor is part of the contract.
    assert_eq!(
        call(|e| unsafe { (api().quantize)(std::ptr::null(), e) }).0,
        Status::InvalidArgument
    );

    let mut bad = good;
    bad.output.scales.shape[1] = 3;
    let (st, msg) = run(&bad);
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("scales"), "{msg}");

    let mut bad = good;
    bad.output.data.dtype = DType::E5m2 as u32; // disagrees with format E4M3
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.dtype = DType::I32 as u32;
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.dtype = 77;
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.output.data.shape[0] = 65; // not the input's shape
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.output.block = BlockLayout { kind: 1, axis: 0 };
    bad.output.scales.shape = [2, 2, 0, 0];
    assert_eq!(run(&bad).0, Status::Ok, "tiles are a valid layout");

    let mut bad = good;
    bad.output.block = BlockLayout { kind: 5, axis: 0 };
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.data = std::ptr::null_mut();
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.data = (bad.input.data as usize + 1) as *mut c_void; // misaligned f32
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.rank = 9;
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.shape = [u64::MAX, 2, 0, 0];
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.input.struct_size = 8;
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.struct_size = 8;
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.output.data.data = bad.input.data; // output overlaps the input
    assert_eq!(run(&bad).0, Status::InvalidArgument);

    let mut bad = good;
    bad.output.scales.device = DeviceKind::Cuda as u32;
    assert_eq!(run(&bad).0, Status::InvalidArgument, "mixed devices");

    let mut cuda = good;
    for v in [
        &mut cuda.input,
        &mut cuda.output.data,
        &mut cuda.output.scales,
    ] {
        v.device = DeviceKind::Cuda as u32;
    }
    // Host pointers labelled as CUDA: only safe to send where no GPU backend can run.
    if !mxhost_plugin_mxfp8::backend::cuda_driver_present() {
        let (st, msg) = run(&cuda);
        assert_eq!(st, Status::Unsupported);
        assert!(msg.contains("CUDA backend"), "{msg}");
    }
}

struct Gemm {
    a: Vec<f32>,
    w: Vec<f32>,
    out: Vec<f32>,
    offs: Vec<i32>,
}

impl Gemm {
    fn forward() -> Self {
        let mut rng = Rng::new(3);
        Gemm {
            a: rng.normals(100 * 64, 1.0),
            w: rng.normals(2 * 48 * 64, 0.1),
            out: vec![f32::NAN; 100 * 48],
            offs: vec![40, 90],
        }
    }
    fn desc(&mut self) -> GroupedGemmDesc {
        let operand = |t: TensorView| Operand {
            struct_size: std::mem::size_of::<Operand>(),
            kind: OperandKind::Dense as u32,
            dense: t,
            mx: MxTensorView {
                struct_size: std::mem::size_of::<MxTensorView>(),
                data: TensorView::empty(),
                scales: TensorView::empty(),
                format: 0,
                mode: 0,
                block: BlockLayout::vector(0),
            },
        };
        GroupedGemmDesc {
            struct_size: std::mem::size_of::<GroupedGemmDesc>(),
            pass: GemmPass::Forward as u32,
            a: operand(view(&mut self.a, DType::F32, &[100, 64])),
            b: operand(view(&mut self.w, DType::F32, &[2, 48, 64])),
            offs_host: self.offs.as_ptr(),
            offs_device: std::ptr::null(),
            num_groups: 2,
            out: view(&mut self.out, DType::F32, &[100, 48]),
            options: GemmOptions {
                struct_size: std::mem::size_of::<GemmOptions>(),
                format: MxFormat::E4m3 as u32,
                mode: ScaleMode::Rceil as u32,
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
        }
    }
}

fn gemm(desc: &GroupedGemmDesc) -> (Status, String) {
    // SAFETY: descriptors built by `Gemm::desc` over live buffers; the variations only
    // make them inconsistent, never larger than the buffers.
    call(|e| unsafe { (api().grouped_gemm)(desc, e) })
}

#[test]
fn grouped_gemm_through_the_abi() {
    let mut g = Gemm::forward();
    let desc = g.desc();
    let (st, msg) = gemm(&desc);
    assert_eq!(st, Status::Ok, "{msg}");
    // Every row written (finite); coarse FP8 products can cancel to an exact zero, so
    // only require that almost all are nonzero.
    assert!(g.out[..90 * 48].iter().all(|v| v.is_finite()));
    assert!(g.out[..90 * 48].iter().filter(|&&v| v == 0.0).count() < 10);
    assert!(g.out[90 * 48..].iter().all(|&v| v == 0.0), "padding rows");
}

#[test]
fn malformed_or_unsupported_gemms_are_rejected() {
    let mut g = Gemm::forward();
    let good = g.desc();
    let expect = |d: &GroupedGemmDesc, status: Status, needle: &str| {
        let (st, msg) = gemm(d);
        assert_eq!(st, status, "{msg}");
        assert!(msg.contains(needle), "{msg:?} lacks {needle:?}");
    };
    for (name, set) in [("hadamard", 0usize), ("dge", 1), ("bias", 2)] {
        let mut d = good;
        let f = [
            &mut d.options.hadamard,
            &mut d.options.dge,
            &mut d.options.bias,
        ];
        *f.into_iter().nth(set).unwrap() = 1;
        expect(&d, Status::Unsupported, name);
    }
    let mut d = good;
    d.options.hadamard = 2;
    expect(&d, Status::InvalidArgument, "hadamard");

    let mut d = good;
    d.pass = 3;
    expect(&d, Status::InvalidArgument, "pass");

    let mut d = good;
    d.rows = 101;
    expect(&d, Status::InvalidArgument, "shape");

    let mut d = good;
    d.num_groups = 3; // the weights have 2 experts
    expect(&d, Status::InvalidArgument, "shape");

    let mut offs = vec![60i32, 40];
    let mut d = good;
    d.offs_host = offs.as_mut_ptr();
    expect(&d, Status::InvalidArgument, "non-decreasing");

    let mut offs = vec![-1i32, 40];
    let mut d = good;
    d.offs_host = offs.as_mut_ptr();
    expect(&d, Status::InvalidArgument, "negative");

    let mut offs = vec![40i32, 101];
    let mut d = good;
    d.offs_host = offs.as_mut_ptr();
    expect(&d, Status::InvalidArgument, "exceeds rows");

    let mut d = good;
    d.offs_host = std::ptr::null();
    expect(&d, Status::InvalidArgument, "offs");

    let mut d = good;
    d.options.format = 9;
    expect(&d, Status::InvalidArgument, "format");

    let mut d = good;
    d.options.weight_layout = 9;
    expect(&d, Status::InvalidArgument, "layout");

    let mut d = good;
    d.out.dtype = DType::E4m3 as u32;
    expect(&d, Status::InvalidArgument, "dtype");

    let mut d = good;
    d.a.kind = 7;
    expect(&d, Status::InvalidArgument, "operand kind");

    let mut d = good;
    d.out.data = d.a.dense.data;
    expect(&d, Status::InvalidArgument, "overlaps");

    let mut d = good;
    d.b.kind = OperandKind::Mx as u32; // its mx member is empty: shape mismatch
    expect(&d, Status::InvalidArgument, "");

    let mut d = good;
    for v in [&mut d.a.dense, &mut d.b.dense, &mut d.out] {
        v.device = DeviceKind::Cuda as u32;
    }
    if !mxhost_plugin_mxfp8::backend::cuda_driver_present() {
        expect(&d, Status::Unsupported, "CUDA backend");
    }

    let mut d = good;
    d.options.struct_size = 4;
    expect(&d, Status::InvalidArgument, "struct_size");

    // Nothing above wrote the output.
    assert!(g.out.iter().all(|v| v.is_nan()));
}

#[test]
fn mx_operands_through_the_abi() {
    let mut g = Gemm::forward();
    let mut reference = g.desc();
    assert_eq!(gemm(&reference).0, Status::Ok);
    let want = g.out.clone();

    // Pre-quantize the weights canonically (along K) and pass them as an Mx operand:
    // the result must be bitwise the same as quantizing inside the call.
    let shape = [2u64, 48, 64];
    let block = BlockLayout::vector(2);
    let (mut d, mut s) = (
        vec![0u8; g.w.len()],
        vec![0u8; scale_count(&shape, block).unwrap()],
    );
    quantize_mx(
        &g.w,
        &shape,
        block,
        MxFormat::E4m3,
        ScaleMode::Rceil,
        &mut d,
        &mut s,
    )
    .unwrap();
    g.out.fill(f32::NAN);
    reference = g.desc();
    reference.b.kind = OperandKind::Mx as u32;
    reference.b.mx = mx_view(&mut d, &mut s, &shape, MxFormat::E4m3, block);
    reference.b.dense = TensorView::empty();
    let (st, msg) = gemm(&reference);
    assert_eq!(st, Status::Ok, "{msg}");
    assert_eq!(g.out, want);
}

/// ABI 1.2: the values a quantize call keeps are its output dequantized to bf16, for
/// every block layout; a 1.1 descriptor (no `values`) is read without the field.
#[test]
fn kept_values_are_the_dequantized_output() {
    let mut rng = Rng::new(7);
    let shape = [70u64, 96];
    let mut x = rng.normals(70 * 96, 3.0);
    for block in [
        BlockLayout::vector(1),
        BlockLayout::vector(0),
        BlockLayout::tile(),
    ] {
        let ns = scale_count(&shape, block).unwrap();
        let (mut d, mut s) = (vec![0u8; x.len()], vec![0u8; ns]);
        let mut v = vec![half::bf16::from_f32(f32::NAN); x.len()];
        let mut desc = quantize_desc(
            view(&mut x, DType::F32, &shape),
            mx_view(&mut d, &mut s, &shape, MxFormat::E4m3, block),
        );
        desc.values = view(&mut v, DType::Bf16, &shape);
        // SAFETY: valid descriptor over live buffers.
        let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
        assert_eq!(st, Status::Ok, "{msg}");
        let mut want = vec![half::bf16::ZERO; x.len()];
        dequantize_mx(&d, &s, &shape, block, MxFormat::E4m3, &mut want).unwrap();
        assert_eq!(v, want, "{block:?}");

        // An ABI 1.1 host's descriptor ends before `values`: garbage there is not read.
        let mut v2 = vec![half::bf16::ZERO; x.len()];
        desc.values = view(&mut v2, DType::Bf16, &shape);
        desc.struct_size = QUANTIZE_DESC_SIZE_1_1;
        // SAFETY: as above.
        let (st, msg) = call(|e| unsafe { (api().quantize)(&desc, e) });
        assert_eq!(st, Status::Ok, "{msg}");
        assert!(v2.iter().all(|b| *b == half::bf16::ZERO));
    }
}

/// Kept values must be bf16 with the input's shape and may not overlap the outputs;
/// a GEMM operand's values must match its data's shape (or the swapped one) in bf16.
#[test]
fn malformed_kept_values_are_rejected() {
    let shape = RowCase::SHAPE;
    let mut case = RowCase::filled(1.0);
    let mut vf = vec![0f32; 32 * 64];
    let mut vb = vec![half::bf16::ZERO; 32 * 64];
    let mut desc = case.desc();
    let run = |desc: &QuantizeDesc| {
        // SAFETY: every buffer is live and as large as its view says.
        call(|e| unsafe { (api().quantize)(desc, e) })
    };
    desc.values = view(&mut vf, DType::F32, &shape);
    assert_eq!(run(&desc).0, Status::InvalidArgument, "f32 values");
    desc.values = view(&mut vb, DType::Bf16, &[64, 32]);
    assert_eq!(run(&desc).0, Status::InvalidArgument, "wrong shape");
    // The f32 input's first half seen as the bf16 values: large enough, but it overlaps.
    desc.values = TensorView {
        dtype: DType::Bf16 as u32,
        ..desc.input
    };
    assert_eq!(run(&desc).0, Status::InvalidArgument, "overlaps the input");

    // A GEMM operand with values of the wrong shape.
    let mut g = Gemm::forward();
    let wshape = [2u64, 48, 64];
    let block = BlockLayout::vector(2);
    let (mut wd, mut ws) = (
        vec![0u8; g.w.len()],
        vec![0u8; scale_count(&wshape, block).unwrap()],
    );
    let mut wv = vec![half::bf16::ZERO; g.w.len()];
    let mut desc = g.desc();
    desc.b.kind = OperandKind::MxWithValues as u32;
    desc.b.mx = mx_view(&mut wd, &mut ws, &wshape, MxFormat::E4m3, block);
    desc.b.dense = view(&mut wv, DType::Bf16, &[2, 64, 48]);
    assert_eq!(
        gemm(&desc).0,
        Status::InvalidArgument,
        "values not the data's shape"
    );
    desc.b.kind = OperandKind::MxWithValuesSwapped as u32;
    assert_eq!(
        gemm(&desc).0,
        Status::Ok,
        "swapped values have the swapped shape"
    );
}

fn annex_query(shape: &[u64], block: BlockLayout, device: DeviceKind) -> AnnexQuery {
    let mut s = [0u64; MAX_RANK];
    s[..shape.len()].copy_from_slice(shape);
    AnnexQuery {
        struct_size: std::mem::size_of::<AnnexQuery>(),
        rank: shape.len() as u32,
        shape: s,
        format: MxFormat::E4m3 as u32,
        block,
        device: device as u32,
        keeps_values: 0,
        partner_kept: 0,
        for_gemm: 0,
    }
}

fn annex_words_of(q: &AnnexQuery) -> (Status, String, u64) {
    let f = api()
        .annex_words
        .expect("ABI 1.3: the plugin reports annex sizes");
    let mut words = u64::MAX;
    // SAFETY: a live query and a writable u64.
    let (st, msg) = call(|e| unsafe { f(q, &mut words, e) });
    (st, msg, words)
}

/// ABI 1.3: the CPU backend keeps no annex (0 words); malformed queries are refused with a
/// message, never read out of bounds.
#[test]
fn annex_sizes_are_answered_and_bad_queries_refused() {
    let q = annex_query(&[256, 4096], BlockLayout::vector(1), DeviceKind::Cpu);
    let (st, msg, words) = annex_words_of(&q);
    assert_eq!((st, words), (Status::Ok, 0), "{msg}");
    let mut bad = q;
    bad.rank = 0;
    assert_eq!(annex_words_of(&bad).0, Status::InvalidArgument);
    let mut bad = q;
    bad.block = BlockLayout::tile();
    bad.rank = 1;
    let (st, msg, _) = annex_words_of(&bad);
    assert_eq!(st, Status::InvalidArgument, "tiles of a vector");
    assert!(msg.contains("block layout"), "{msg}");
    let mut bad = q;
    bad.struct_size = 8;
    assert_eq!(annex_words_of(&bad).0, Status::InvalidArgument);
    // ABI 1.4 hosts say whether the partner of a transposing quantize is kept; a 1.3 query
    // ends before that field and is still answered.
    let mut older = q;
    older.struct_size = ANNEX_QUERY_SIZE_1_3;
    older.partner_kept = 1;
    assert_eq!(annex_words_of(&older).0, Status::Ok);
    let mut kept = q;
    kept.partner_kept = 1;
    assert_eq!(annex_words_of(&kept), (Status::Ok, String::new(), 0));
    // ABI 1.6 hosts say whether the tensor is quantized for a GEMM; a 1.4-1.5 query ends
    // before that field and is still answered (a CPU tensor gets no annex either way).
    let mut older = q;
    older.struct_size = ANNEX_QUERY_SIZE_1_5;
    older.for_gemm = 1;
    assert_eq!(annex_words_of(&older), (Status::Ok, String::new(), 0));
    let mut for_gemm = q;
    for_gemm.for_gemm = 1;
    assert_eq!(annex_words_of(&for_gemm), (Status::Ok, String::new(), 0));
    let f = api().annex_words.unwrap();
    // SAFETY: null output pointer: refused before anything is written.
    let (st, _) = call(|e| unsafe { f(&q, std::ptr::null_mut(), e) });
    assert_eq!(st, Status::InvalidArgument);
}

/// An annex must be an i32 vector disjoint from the outputs; a GEMM operand of kind
/// `MxWithAnnex` computes what the plain MX operand computes (the CPU backend ignores it).
#[test]
fn annexes_are_checked_and_never_change_a_result() {
    let mut case = RowCase::filled(1.0);
    let mut desc = case.desc();
    let run = |desc: &QuantizeDesc| {
        // SAFETY: every buffer is live and as large as its view says.
        call(|e| unsafe { (api().quantize)(desc, e) })
    };
    let mut words = vec![0i32; 64];
    desc.annex = view(&mut words, DType::I32, &[8, 8]);
    let (st, msg) = run(&desc);
    assert_eq!(st, Status::InvalidArgument, "two axes");
    assert!(msg.contains("one axis"), "{msg}");
    desc.annex = view(&mut words, DType::I32, &[64]);
    assert_eq!(
        run(&desc).0,
        Status::Ok,
        "the CPU backend leaves an annex alone"
    );
    desc.annex = TensorView {
        dtype: DType::I32 as u32,
        rank: 1,
        shape: [64, 0, 0, 0],
        ..desc.input
    };
    assert_eq!(run(&desc).0, Status::InvalidArgument, "overlaps the input");
    desc.annex = TensorView::absent();
    desc.transposed_annex = view(&mut words, DType::I32, &[64]);
    let (st, msg) = run(&desc);
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("without quantize.transposed"), "{msg}");

    // The same forward with the weight as Mx and as MxWithAnnex: the same bits.
    let mut g = Gemm::forward();
    let wshape = [2u64, 48, 64];
    let block = BlockLayout::tile();
    let mut wd = vec![0u8; g.w.len()];
    let mut ws = vec![0u8; scale_count(&wshape, block).unwrap()];
    let wdesc = quantize_desc(
        view(&mut g.w, DType::F32, &wshape),
        mx_view(&mut wd, &mut ws, &wshape, MxFormat::E4m3, block),
    );
    assert_eq!(run(&wdesc).0, Status::Ok);
    let mut desc = g.desc();
    desc.b.kind = OperandKind::Mx as u32;
    desc.b.mx = mx_view(&mut wd, &mut ws, &wshape, MxFormat::E4m3, block);
    let (st, msg) = gemm(&desc);
    assert_eq!(st, Status::Ok, "{msg}");
    let plain = g.out.clone();
    g.out.fill(f32::NAN);
    desc.b.kind = OperandKind::MxWithAnnex as u32;
    desc.b.dense = view(&mut words, DType::I32, &[64]);
    let (st, msg) = gemm(&desc);
    assert_eq!(st, Status::Ok, "{msg}");
    assert!(plain.iter().all(|v| v.is_finite()));
    assert_eq!(
        plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        g.out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    desc.b.dense = view(&mut words, DType::F32, &[64]);
    let (st, msg) = gemm(&desc);
    assert_eq!(st, Status::InvalidArgument, "an f32 annex");
    assert!(msg.contains("annex"), "{msg}");
}

/// ABI 1.5: a quantize call's wgrad values are each expert's rows quantized along axis 0 as
/// their own matrix (the padding rows after the last offset as one more), dequantized to
/// bf16; a 1.4 descriptor writes none; bad requests are refused. Passed to wgrad as
/// `DenseMxValues` they give the output the dense originals give.
#[test]
fn wgrad_values_are_each_experts_quantization_along_rows() {
    let mut rng = Rng::new(11);
    let (rows, c) = (70usize, 96usize);
    let shape = [rows as u64, c as u64];
    let offs = [20i32, 20, 64];
    let mut x = rng.normals(rows * c, 2.0);
    x[3 * c + 5] = 1e6;
    let mut xb: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let (mut d, mut s) = (vec![0u8; rows * c], vec![0u8; rows * c / 32]);
    let mut v = vec![half::bf16::from_f32(f32::NAN); rows * c];
    let mut desc = quantize_desc(
        view(&mut xb, DType::Bf16, &shape),
        mx_view(
            &mut d,
            &mut s,
            &shape,
            MxFormat::E4m3,
            BlockLayout::vector(1),
        ),
    );
    desc.wgrad_values = view(&mut v, DType::Bf16, &shape);
    desc.wgrad_offs = offs.as_ptr();
    desc.wgrad_num_groups = offs.len() as u32;
    let run = |desc: &QuantizeDesc| {
        // SAFETY: every buffer is live and as large as its view says; offs holds 3 i32s.
        call(|e| unsafe { (api().quantize)(desc, e) })
    };
    let (st, msg) = run(&desc);
    assert_eq!(st, Status::Ok, "{msg}");
    // Expected, segment by segment: [0, 20), [20, 20), [20, 64), [64, 70).
    let mut want = vec![half::bf16::ZERO; rows * c];
    for (lo, hi) in [(0usize, 20usize), (20, 64), (64, 70)] {
        let sub = [(hi - lo) as u64, c as u64];
        let (mut sd, mut ss) = (
            vec![0u8; (hi - lo) * c],
            vec![0u8; (hi - lo).div_ceil(32) * c],
        );
        let xs = &xb[lo * c..hi * c];
        quantize_mx(
            xs,
            &sub,
            BlockLayout::vector(0),
            MxFormat::E4m3,
            ScaleMode::Rceil,
            &mut sd,
            &mut ss,
        )
        .unwrap();
        let out = &mut want[lo * c..hi * c];
        dequantize_mx(&sd, &ss, &sub, BlockLayout::vector(0), MxFormat::E4m3, out).unwrap();
    }
    assert_eq!(v, want);
    // Not one quantization from row 0: the expert starting at row 20 has its own blocks.
    let (mut fd, mut fs) = (vec![0u8; rows * c], vec![0u8; rows.div_ceil(32) * c]);
    let (l0, f, m) = (BlockLayout::vector(0), MxFormat::E4m3, ScaleMode::Rceil);
    quantize_mx(&xb, &shape, l0, f, m, &mut fd, &mut fs).unwrap();
    let mut from_row0 = vec![half::bf16::ZERO; rows * c];
    dequantize_mx(&fd, &fs, &shape, l0, f, &mut from_row0).unwrap();
    assert_ne!(
        v, from_row0,
        "the outlier at row 3 sets the scale of rows 0..32 only from row 0"
    );

    // An ABI 1.4 host's descriptor ends before `wgrad_values`: nothing is written.
    let mut v14 = vec![half::bf16::ZERO; rows * c];
    desc.wgrad_values = view(&mut v14, DType::Bf16, &shape);
    desc.struct_size = QUANTIZE_DESC_SIZE_1_4;
    assert_eq!(run(&desc).0, Status::Ok);
    assert!(v14.iter().all(|b| *b == half::bf16::ZERO));
    desc.struct_size = std::mem::size_of::<QuantizeDesc>();

    // Refused: f32 values, a wrong shape, offsets past the rows, null offsets.
    let mut vf = vec![0f32; rows * c];
    let mut bad = desc;
    bad.wgrad_values = view(&mut vf, DType::F32, &shape);
    assert_eq!(run(&bad).0, Status::InvalidArgument, "f32 values");
    let mut bad = desc;
    bad.wgrad_values = view(&mut v14, DType::Bf16, &[c as u64, rows as u64]);
    assert_eq!(run(&bad).0, Status::InvalidArgument, "transposed shape");
    let past = [20i32, 71];
    let mut bad = desc;
    (bad.wgrad_offs, bad.wgrad_num_groups) = (past.as_ptr(), 2);
    let (st, msg) = run(&bad);
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("exceeds rows"), "{msg}");
    let mut bad = desc;
    bad.wgrad_offs = std::ptr::null();
    assert_eq!(run(&bad).0, Status::InvalidArgument, "null offsets");

    // ABI 1.9: a weight named beside the wgrad values (a hint: the CPU backend writes the
    // same bytes); refused without its annex or when its shape does not fit x; ignored in a
    // 1.8 descriptor, which ends before it.
    let (e, cols) = (offs.len(), 64usize);
    let wshape = [e as u64, cols as u64, c as u64];
    let (mut wd, mut ws) = (vec![0u8; e * cols * c], vec![0u8; e * cols * c / 1024]);
    let mut wannex = vec![0i32; 64];
    let (mut d19, mut s19, mut v19) = (d.clone(), s.clone(), v.clone());
    let mut named = desc;
    named.output = mx_view(
        &mut d19,
        &mut s19,
        &shape,
        MxFormat::E4m3,
        BlockLayout::vector(1),
    );
    named.wgrad_values = view(&mut v19, DType::Bf16, &shape);
    named.weight = mx_view(
        &mut wd,
        &mut ws,
        &wshape,
        MxFormat::E4m3,
        BlockLayout::tile(),
    );
    named.weight_annex = view(&mut wannex, DType::I32, &[64]);
    let (st, msg) = run(&named);
    assert_eq!(st, Status::Ok, "{msg}");
    assert_eq!(
        (&d19, &s19, &v19),
        (&d, &s, &want),
        "the same bytes as without the weight"
    );
    let mut bad = named;
    bad.weight_annex = TensorView::absent();
    let (st, msg) = run(&bad);
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("weight_annex"), "{msg}");
    let (mut wd2, mut ws2) = (vec![0u8; e * cols * 32], vec![0u8; e * cols * 32 / 1024]);
    let short = [e as u64, cols as u64, 32];
    let mut bad = named;
    bad.weight = mx_view(
        &mut wd2,
        &mut ws2,
        &short,
        MxFormat::E4m3,
        BlockLayout::tile(),
    );
    let (st, msg) = run(&bad);
    assert_eq!(
        st,
        Status::InvalidArgument,
        "a weight of reduction 32 for x of 96 columns"
    );
    assert!(msg.contains("quantize.weight"), "{msg}");
    bad.struct_size = QUANTIZE_DESC_SIZE_1_8;
    assert_eq!(run(&bad).0, Status::Ok, "a 1.8 descriptor has no weight");

    // wgrad: the values as DenseMxValues against the dense originals.
    let n = 48usize;
    let mut dyb: Vec<half::bf16> = rng
        .normals(rows * n, 1.0)
        .iter()
        .map(|&v| half::bf16::from_f32(v))
        .collect();
    let (mut dd, mut ds) = (vec![0u8; rows * n], vec![0u8; rows * n.div_ceil(32)]);
    let mut dyv = vec![half::bf16::ZERO; rows * n];
    let dshape = [rows as u64, n as u64];
    let mut qd = quantize_desc(
        view(&mut dyb, DType::Bf16, &dshape),
        mx_view(
            &mut dd,
            &mut ds,
            &dshape,
            MxFormat::E4m3,
            BlockLayout::vector(1),
        ),
    );
    qd.wgrad_values = view(&mut dyv, DType::Bf16, &dshape);
    (qd.wgrad_offs, qd.wgrad_num_groups) = (offs.as_ptr(), 3);
    assert_eq!(run(&qd).0, Status::Ok);
    let wgrad = |dy: TensorView, x: TensorView, kind: OperandKind, out: &mut Vec<f32>| {
        let mut g = Gemm::forward();
        let mut desc = g.desc();
        desc.pass = GemmPass::Wgrad as u32;
        (desc.a.dense, desc.b.dense) = (dy, x);
        (desc.a.kind, desc.b.kind) = (kind as u32, kind as u32);
        (desc.offs_host, desc.num_groups) = (offs.as_ptr(), 3);
        desc.out = view(out, DType::F32, &[3, n as u64, c as u64]);
        (desc.rows, desc.n, desc.k) = (rows as u64, n as u64, c as u64);
        gemm(&desc)
    };
    let (mut from_values, mut from_dense) = (vec![0f32; 3 * n * c], vec![0f32; 3 * n * c]);
    let dv = view(&mut dyv, DType::Bf16, &dshape);
    let xv = view(&mut v, DType::Bf16, &shape);
    let (st, msg) = wgrad(dv, xv, OperandKind::DenseMxValues, &mut from_values);
    assert_eq!(st, Status::Ok, "{msg}");
    let (dy0, x0) = (
        view(&mut dyb, DType::Bf16, &dshape),
        view(&mut xb, DType::Bf16, &shape),
    );
    let (st, msg) = wgrad(dy0, x0, OperandKind::Dense, &mut from_dense);
    assert_eq!(st, Status::Ok, "{msg}");
    assert_eq!(from_values, from_dense);
    // The same values passed as plain Dense are quantized again: still the same numbers.
    let mut again = vec![0f32; 3 * n * c];
    assert_eq!(wgrad(dv, xv, OperandKind::Dense, &mut again).0, Status::Ok);
    assert_eq!(again, from_dense);
    // DenseMxValues is a wgrad operand only.
    let mut g = Gemm::forward();
    let mut fwd = g.desc();
    fwd.a.kind = OperandKind::DenseMxValues as u32;
    assert_eq!(gemm(&fwd).0, Status::InvalidArgument);
}

/// ABI 1.7: the table has `fill_bytes`; on the CPU a quantize call told the host fills bytes on
/// demand (and, 1.8, scales) still writes every byte (nothing is left out there), `fill_bytes`
/// on such a tensor does nothing, and malformed requests are refused with a reason.
#[test]
fn bytes_on_demand_change_nothing_on_the_cpu() {
    let fill = api().fill_bytes.expect("mxfp8 has fill_bytes (ABI 1.7)");
    let mut rng = Rng::new(17);
    let x = rng.normals(32 * 64, 2.0);
    let quantized = |on_demand: u32| {
        let mut c = RowCase::filled(0.0);
        c.x.copy_from_slice(&x);
        let mut d = c.desc();
        d.bytes_on_demand = on_demand;
        // SAFETY: the descriptor's views point at `c`'s live buffers.
        let r = call(|e| unsafe { (api().quantize)(&d, e) });
        (r, c.d, c.s)
    };
    let (r0, d0, s0) = quantized(0);
    let (r1, d1, s1) = quantized(1);
    let (r2, d2, s2) = quantized(2);
    assert_eq!(
        (r0.0, r1.0, r2.0),
        (Status::Ok, Status::Ok, Status::Ok),
        "{} / {} / {}",
        r0.1,
        r1.1,
        r2.1
    );
    assert!(
        d0 == d1 && s0 == s1 && d0 == d2 && s0 == s2,
        "bytes (or scales, ABI 1.8) on demand changed the CPU's bytes"
    );
    let (st, msg) = quantized(3).0;
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("bytes_on_demand"), "{msg}");
    // fill_bytes on the CPU tensor and an annex: nothing to write
    let mut c = RowCase::filled(1.0);
    let mut annex = vec![0i32; 64];
    let desc = |c: &mut RowCase, annex: &mut [i32], dtype: DType| FillBytesDesc {
        struct_size: std::mem::size_of::<FillBytesDesc>(),
        tensor: mx_view(
            &mut c.d,
            &mut c.s,
            &RowCase::SHAPE,
            MxFormat::E4m3,
            BlockLayout::vector(1),
        ),
        annex: view(annex, dtype, &[64]),
        stream: std::ptr::null_mut(),
    };
    let d = desc(&mut c, &mut annex, DType::I32);
    // SAFETY: live buffers.
    let (st, msg) = call(|e| unsafe { fill(&d, e) });
    assert_eq!(st, Status::Ok, "{msg}");
    assert!(
        c.d.iter().all(|&b| b == 0),
        "fill_bytes wrote bytes on the CPU"
    );
    let d = desc(&mut c, &mut annex, DType::F32);
    // SAFETY: live buffers.
    let (st, msg) = call(|e| unsafe { fill(&d, e) });
    assert_eq!(st, Status::InvalidArgument);
    assert!(msg.contains("fill_bytes.annex"), "{msg}");
}
