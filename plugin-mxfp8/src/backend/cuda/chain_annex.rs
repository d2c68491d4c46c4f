//! Annexes (plugin ABI 1.3–1.4): host-allocated memory beside a quantized tensor that holds
//! its chain form, written by the quantize call so that the chained GEMM ([`super::chain`])
//! reads it instead of re-encoding the operand per call. This module says which tensors get
//! one and how many words (from the shape alone, so the host can allocate it before the
//! call), checks an annex a call hands over, fills it after the quantizer, and picks the
//! annexes a GEMM can read.

use super::chain::{mode, MAX_E, STATUS_UNALIGNED};
use super::chain_block;
use super::chain_form::{self, BtAt};
use super::chain_memory::OperandKey;
use super::device::Call;
use super::fmt_code;
use super::gemm::{AMat, BMat};
use super::tma::tensor_map_available;
use crate::kernels;
use cudarc::driver::result as cr;
use cudarc::driver::sys as drv_sys;
use mxhost_plugin_abi::plugin_support::{PluginError, PluginResult};
use mxhost_plugin_abi::{DeviceKind, MxFormat};
use mxhost_plugin_common::args::{AnnexSpec, Blocking, MxArg, TensorArg};
use mxhost_plugin_common::cuda::driver_present;
use std::sync::OnceLock;

/// Which chained-GEMM operand a quantized tensor can be, from its shape alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AnnexRole {
    /// `[rows][red]` in 1×32 blocks along `red`: X of forward, dY of dgrad.
    A { rows: usize, red: usize },
    /// `[E][cols][red]` in 32×32 tiles, E4M3: the weight as forward (or, for a transposed
    /// copy, dgrad) reads it.
    B { e: usize, cols: usize, red: usize },
}

fn annex_role(shape: &[u64], block: Blocking, format: MxFormat) -> Option<AnnexRole> {
    let ok = |v: u64| v > 0 && v.is_multiple_of(16);
    match (shape, block) {
        (&[rows, red], Blocking::Vector { axis: 1 }) if ok(rows) && ok(red) => Some(AnnexRole::A {
            rows: rows as usize,
            red: red as usize,
        }),
        (&[e, cols, red], Blocking::Tile)
            if format == MxFormat::E4m3 && e > 0 && e as usize <= MAX_E && ok(cols) && ok(red) =>
        {
            Some(AnnexRole::B {
                e: e as usize,
                cols: cols as usize,
                red: red as usize,
            })
        }
        _ => None,
    }
}

/// The chain form's size in bytes for a tensor of this role (a B form holding its
/// transposed bytes, or referring to its partner's: [`BtAt`]).
fn role_bytes(role: AnnexRole, bt: BtAt) -> usize {
    match role {
        AnnexRole::A { rows, red } => chain_form::a_layout(rows, red).bytes,
        AnnexRole::B { e, cols, red } => b_annex_layout((e, cols, red), bt).bytes,
    }
}

/// The layout of a B-side annex (`[E][cols][red]`, 32×32 tiles in the quantizer's layout).
pub(super) fn b_annex_layout(
    (e, cols, red): (usize, usize, usize),
    bt: BtAt,
) -> chain_form::BLayout {
    let (ise, _, _) = chain_form::tile_strides(cols, red);
    chain_form::b_layout((e, cols, red), e * ise as usize, bt)
}

/// Which layout an annex of `words` i32 words has for a tensor of this role: holding Bᵀ (any
/// role), or, for a B form where `partner` allows it, referring to the partner's bytes. The
/// sizes differ, so the size alone tells them apart.
fn annex_bt_of(role: AnnexRole, words: usize, partner: bool) -> Option<BtAt> {
    [BtAt::Held, BtAt::Partner]
        .into_iter()
        .filter(|&bt| bt == BtAt::Held || (partner && matches!(role, AnnexRole::B { .. })))
        .find(|&bt| words == chain_form::annex_words(role_bytes(role, bt)))
}

/// The B annex layout a quantize call asks for: referring to the partner's bytes when the
/// host keeps the partner alive (ABI 1.4), else holding a copy. `MXHOST_MX_CHAIN_PARTNER=0`
/// keeps the copies (for A/B timing).
fn b_annex_bt(partner_kept: bool) -> BtAt {
    static REFER: OnceLock<bool> = OnceLock::new();
    let refer = *REFER.get_or_init(|| super::env_flag("MXHOST_MX_CHAIN_PARTNER", true));
    if partner_kept && refer {
        BtAt::Partner
    } else {
        BtAt::Held
    }
}

/// ABI 1.3: the annex, in i32 words, that a quantize call fills with the tensor's chain form.
/// It is 0 when `MXHOST_MX_CHAIN` is off, under `auto` (the default) when the call did not
/// ask for a GEMM form (ABI 1.6 `for_gemm`), when the call keeps the values (such a weight
/// stays on cuBLAS), and when no chained GEMM could read the tensor.
pub(super) fn annex_words(spec: &AnnexSpec) -> PluginResult<u64> {
    if !mode()?.applies(spec.for_gemm)
        || spec.keeps_values
        || spec.device != DeviceKind::Cuda
        || !some_device_fills_annexes()
    {
        return Ok(0);
    }
    let bt = b_annex_bt(spec.partner_kept);
    Ok(annex_role(&spec.shape, spec.block, spec.format)
        .map_or(0, |r| chain_form::annex_words(role_bytes(r, bt)) as u64))
}

/// Whether any CUDA device of this machine gets the sm_90a build ([`kernels::select_arch`],
/// as the backend chooses it, `MXHOST_MX_PORTABLE` included) with a driver that has tensor
/// maps, i.e. could fill annexes and run the chained GEMM. Without one an annex would be
/// allocated and never written, so `annex_words` asks for none. (The query names no device:
/// on a machine that mixes Hopper with other GPUs the others' tensors still get annexes,
/// unused.) Asked of the driver without creating a context.
pub(super) fn some_device_fills_annexes() -> bool {
    static S: OnceLock<bool> = OnceLock::new();
    *S.get_or_init(|| {
        if !driver_present() || cr::init().is_err() {
            return false;
        }
        let mut driver = 0;
        // SAFETY: plain out-parameter.
        unsafe { drv_sys::cuDriverGetVersion(&mut driver) };
        let forced = std::env::var("MXHOST_MX_PORTABLE").ok();
        let count = cr::device::get_count().unwrap_or(0);
        driver >= 12000
            && (0..count).any(|i| {
                let Ok(dev) = cr::device::get(i) else {
                    return false;
                };
                use drv_sys::CUdevice_attribute::*;
                // SAFETY: a device handle from cuDeviceGet; plain attribute queries.
                let attr = |a| unsafe { cr::device::get_attribute(dev, a) }.unwrap_or(0);
                let cc = (
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                    attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
                );
                // (only Hopper gets the sm_90a build; asking no further spares loading NVRTC)
                cc == (9, 0)
                    && kernels::select_arch(cc, forced.as_deref(), kernels::nvrtc_supported_archs)
                        .is_ok_and(|arch| !kernels::is_portable(&arch))
            })
    })
}

/// The role of the tensor `m` that `annex` is for, the annex's address and, for a B form,
/// where it keeps the transposed bytes, checked: a size this plugin's `annex_words` asks for
/// (a B annex that refers to its partner only when the call writes one), 256-byte aligned.
pub(super) fn checked_annex(
    m: &MxArg,
    annex: &TensorArg,
    has_partner: bool,
) -> PluginResult<(AnnexRole, u64, BtAt)> {
    let block = Blocking::from_abi(m.block).expect("checked by MxArg::parse");
    let role = annex_role(&m.data.shape, block, m.format).ok_or_else(|| {
        PluginError::invalid(format!(
            "quantize: an annex for a tensor of shape {:?} that no chained GEMM reads (this plugin's annex_words gives 0 words for it)",
            m.data.shape
        ))
    })?;
    let base = annex.ptr as u64;
    match annex_bt_of(role, annex.numel, has_partner) {
        Some(bt) if base.is_multiple_of(256) => Ok((role, base, bt)),
        _ => Err(PluginError::invalid(format!(
            "quantize: annex of {} words at {base:#x}; this tensor's needs {} words, 256-byte aligned",
            annex.numel,
            chain_form::annex_words(role_bytes(role, BtAt::Held))
        ))),
    }
}

/// The gate memory's view of an annex a quantize call got for `m` (quantized from `input`;
/// `transposed`: the call's transposed result): the operand, the annex's address and that
/// of its status words.
pub(super) fn annex_operand(
    call: &Call,
    m: &MxArg,
    annex: &TensorArg,
    (input, transposed): (u64, bool),
    has_partner: bool,
) -> PluginResult<(OperandKey, u64, u64)> {
    let (role, base, bt) = checked_annex(m, annex, has_partner)?;
    let status = match role {
        AnnexRole::A { rows, red } => chain_form::a_layout(rows, red).status,
        AnnexRole::B { e, cols, red } => b_annex_layout((e, cols, red), bt).status,
    };
    let key = OperandKey::new(call, input, role, transposed);
    Ok((key, base, base + status as u64))
}

/// Whether this device's quantize calls fill annexes: only where the chained GEMM runs
/// (sm_90a kernels and tensor maps).
pub(super) fn annex_filled_here(call: &Call) -> bool {
    !call.dev.portable && tensor_map_available(call.dev)
}

/// Fills `annex` with the chain form of `m`, which this quantize call has just written (on
/// the same stream, so in order); `partner`: the other result of a transposing quantize
/// (its bytes are `m`'s transposed), which a B annex of ABI 1.4 refers to. Skipped on
/// devices the chained GEMM never runs on (no sm_90a kernels or tensor maps): there
/// `operand_refusal` turns every GEMM away before it reads an annex.
pub(super) fn fill_annex(
    call: &mut Call,
    m: &MxArg,
    annex: &TensorArg,
    partner: Option<&MxArg>,
) -> PluginResult<()> {
    let (role, base, bt) = checked_annex(m, annex, partner.is_some())?;
    if !annex_filled_here(call) {
        return Ok(());
    }
    let (q, s, fmt) = (m.data.ptr as u64, m.scales.ptr as u64, fmt_code(m.format));
    match role {
        AnnexRole::A { rows, red } => {
            let a = AMat { q, s, fmt, rdiv: 1 };
            chain_block::form_a(call, &a, (rows, red), base)?;
        }
        AnnexRole::B { e, cols, red } => {
            let (ise, isr, isc) = chain_form::tile_strides(cols, red);
            let b = BMat {
                q,
                s,
                ise,
                isr,
                isc,
                w2d: true,
                fmt,
            };
            let partner = partner.map_or(0, |t| t.data.ptr as u64);
            let l = chain_form::prepare_b(call, &b, (e, cols, red), (bt, partner), base)?;
            if bt == BtAt::Partner && !partner.is_multiple_of(16) {
                // The gatherers' bulk copies read Bᵀ in 16-byte aligned pieces: close the gate
                // of every GEMM that reads this annex (the per-k32 kernel computes them).
                call.put_u64(base + l.status as u64, STATUS_UNALIGNED)?;
            }
        }
    }
    Ok(())
}

/// The operands' annexes (ABI 1.3) that hold their chain forms, as device addresses.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(super) struct Annexes {
    pub(super) a: Option<u64>,
    /// B's annex and where it keeps the transposed bytes (held, or its partner's address).
    pub(super) b: Option<(u64, BtAt)>,
    /// A dense A quantized with its form in the call: the operand the gate memory follows.
    pub(super) dense_a: Option<OperandKey>,
}

impl Annexes {
    /// The annexes of this GEMM's operands that hold a chain form it can read: A's when it is
    /// the tensor passed (`[rows][red]`, 1×32), B's when the weight is read as stored
    /// (`[E][cols][red]` in 32×32 tiles, no transposed copy made: `bt` is `None`). Each must
    /// have exactly its layout's size and a 256-byte aligned address (the layout's
    /// alignment); anything else is left alone and made per call.
    pub(super) fn pick(
        (a_annex, b_annex): (Option<&TensorArg>, Option<&TensorArg>),
        b: &BMat,
        b_as_stored: bool,
        (e, rows, cols, red): (usize, usize, usize, usize),
    ) -> Annexes {
        let fits = |t: &TensorArg, bytes: usize| {
            t.numel == chain_form::annex_words(bytes) && (t.ptr as u64).is_multiple_of(256)
        };
        let a = a_annex
            .filter(|t| fits(t, chain_form::a_layout(rows, red).bytes))
            .map(|t| t.ptr as u64);
        let b = b_annex
            .filter(|_| b_as_stored && b.w2d)
            .filter(|_| (b.ise, b.isr, b.isc) == chain_form::tile_strides(cols, red))
            .filter(|t| (t.ptr as u64).is_multiple_of(256))
            .and_then(|t| {
                let role = AnnexRole::B { e, cols, red };
                annex_bt_of(role, t.numel, true).map(|bt| (t.ptr as u64, bt))
            });
        Annexes {
            a,
            b,
            dense_a: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annexes_go_to_tensors_a_chained_gemm_reads() {
        use mxhost_plugin_abi::MxFormat::{E4m3, E5m2};
        let rows = Blocking::Vector { axis: 1 };
        assert_eq!(
            annex_role(&[4096, 2880], rows, E5m2),
            Some(AnnexRole::A {
                rows: 4096,
                red: 2880
            })
        );
        assert_eq!(
            annex_role(&[8, 4096, 2048], Blocking::Tile, E4m3),
            Some(AnnexRole::B {
                e: 8,
                cols: 4096,
                red: 2048
            })
        );
        // no chained kernel reads these
        assert_eq!(annex_role(&[8, 4096, 2048], Blocking::Tile, E5m2), None);
        assert_eq!(annex_role(&[4096, 2880], Blocking::Tile, E4m3), None);
        assert_eq!(
            annex_role(&[4096, 2880], Blocking::Vector { axis: 0 }, E4m3),
            None
        );
        assert_eq!(annex_role(&[4100, 2880], rows, E4m3), None);
        assert_eq!(annex_role(&[0, 2880], rows, E4m3), None);
        assert_eq!(annex_role(&[257, 64, 64], Blocking::Tile, E4m3), None);
        // an annex holds the whole chain form, Bᵀ included unless the host keeps the partner
        // (ABI 1.4): then only its address
        let b = AnnexRole::B {
            e: 8,
            cols: 4096,
            red: 4096,
        };
        let n = 8 * 4096 * 4096;
        assert!(role_bytes(b, BtAt::Held) > 2 * n);
        assert_eq!(
            role_bytes(b, BtAt::Held) - role_bytes(b, BtAt::Partner),
            n - 256
        );
        assert_eq!(b_annex_bt(true), BtAt::Partner);
        assert_eq!(b_annex_bt(false), BtAt::Held);
    }

    /// The annex size says which B layout a quantize call got: the partner-referring one
    /// (ABI 1.4) only where the call writes the partner; anything else is refused.
    #[test]
    fn an_annex_refers_to_its_partner_only_beside_one() {
        let tensor = super::super::test_tensor;
        let (e, cols, red) = (2usize, 64usize, 96usize);
        let w = MxArg {
            data: tensor(vec![e as u64, cols as u64, red as u64], 0x1000),
            scales: tensor(vec![e as u64, 2, 3], 0x2000),
            format: MxFormat::E4m3,
            mode: mxhost_plugin_abi::ScaleMode::Floor,
            block: mxhost_plugin_abi::BlockLayout::tile(),
            values: None,
            annex: None,
        };
        let role = AnnexRole::B { e, cols, red };
        let words = |bt| chain_form::annex_words(role_bytes(role, bt));
        let annex = |numel: usize, ptr: usize| tensor(vec![numel as u64], ptr);
        let held = annex(words(BtAt::Held), 0x10000);
        let partner = annex(words(BtAt::Partner), 0x10000);
        assert_eq!(checked_annex(&w, &held, false).unwrap().2, BtAt::Held);
        assert_eq!(checked_annex(&w, &held, true).unwrap().2, BtAt::Held);
        assert_eq!(checked_annex(&w, &partner, true).unwrap().2, BtAt::Partner);
        assert!(
            checked_annex(&w, &partner, false).is_err(),
            "no partner written"
        );
        let odd = annex(words(BtAt::Held) - 1, 0x10000);
        assert!(checked_annex(&w, &odd, true).is_err());
        let unaligned = annex(words(BtAt::Partner), 0x10080);
        assert!(checked_annex(&w, &unaligned, true).is_err());
    }
}
