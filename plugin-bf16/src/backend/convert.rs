//! The f32 → bf16 operand conversion of the CUDA backend, as CUDA C source for NVRTC
//! and as the same expression in Rust (checked against `half::bf16::from_f32`, the
//! rounding the CPU backend uses, in the tests below).
//!
//! The kernel works on the bit patterns with integer arithmetic only — no
//! `cuda_bf16.h` (NVRTC needs no include path), no floating-point mode (FTZ or fast-math
//! flags cannot change it) and no architecture-specific instruction, so it compiles for
//! any `compute_XX` NVRTC accepts. Rounding: to nearest, ties to even; overflow carries
//! into the exponent and gives ±Inf; subnormals round like any other value; NaN keeps
//! its sign and top payload bits and is made quiet — bit for bit what `half` does.

/// Name of the kernel in [`SOURCE`].
pub const KERNEL: &str = "mxhost_bf16_from_f32_rne";

/// Threads per block of a launch (grid-stride loop).
pub const BLOCK: u32 = 256;

/// CUDA C source of the conversion kernel: `out[i] = bf16_rne(in[i])` for `i < n`.
pub const SOURCE: &str = r#"
extern "C" __global__ void mxhost_bf16_from_f32_rne(const unsigned int* __restrict__ in,
                                                     unsigned short* __restrict__ out,
                                                     unsigned long long n) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        const unsigned int u = in[i];
        unsigned int r;
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            r = (u >> 16) | 0x40u;                      /* NaN: quiet, payload top kept */
        } else {
            r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* RNE; overflow -> Inf */
        }
        out[i] = (unsigned short)r;
    }
}
"#;

/// The kernel's expression in Rust (bits of an f32 → bits of the bf16).
pub fn bf16_bits_rne(u: u32) -> u16 {
    if u & 0x7fff_ffff > 0x7f80_0000 {
        ((u >> 16) | 0x40) as u16
    } else {
        ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16
    }
}

/// NVRTC options for the device architecture `compute_XY` (virtual: PTX, JIT-compiled
/// by the driver at module load).
pub fn nvrtc_options(major: i32, minor: i32) -> Vec<String> {
    vec![format!("--gpu-architecture=compute_{major}{minor}")]
}

/// Blocks for converting `n` elements (at least 1, at most 2^20: grid-stride loop).
pub fn grid(n: usize) -> u32 {
    n.div_ceil(BLOCK as usize).clamp(1, 1 << 20) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn same(u: u32) {
        assert_eq!(
            bf16_bits_rne(u),
            bf16::from_f32(f32::from_bits(u)).to_bits(),
            "f32 bits {u:#010x}"
        );
    }

    #[test]
    fn matches_half_on_special_and_tie_values() {
        for u in [
            0u32,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7f7f_ffff,
            0xff7f_ffff,
            0x7fc0_0000,
            0x7f80_0001,
            0xffc1_2345,
            0x7fbf_ffff,
            0x0000_0001,
            0x0000_8000,
            0x0000_8001,
            0x0001_8000,
            0x007f_ffff,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_7fff,
            0x3f80_8001,
            0x7f7f_8000,
            0x7f7e_8000,
        ] {
            same(u);
        }
        // Every low-half pattern around ties, for a few high halves (incl. odd/even LSB,
        // subnormals, the largest finite, negative values).
        for hi in [
            0x0000u32, 0x0001, 0x3f80, 0x3f81, 0x7f7f, 0x7f7e, 0x8000, 0xbf81, 0xff7f,
        ] {
            for lo in 0..=0xffffu32 {
                same((hi << 16) | lo);
            }
        }
    }

    #[test]
    fn matches_half_on_a_sweep_of_all_bit_patterns() {
        let mut u = 0u32;
        loop {
            same(u);
            match u.checked_add(65_521) {
                Some(v) => u = v,
                None => break,
            }
        }
    }

    #[test]
    fn launch_geometry() {
        assert_eq!(grid(0), 1);
        assert_eq!(grid(1), 1);
        assert_eq!(grid(256), 1);
        assert_eq!(grid(257), 2);
        assert_eq!(grid(usize::MAX), 1 << 20);
        assert_eq!(
            nvrtc_options(9, 0),
            vec!["--gpu-architecture=compute_90".to_string()]
        );
        assert!(SOURCE.contains(KERNEL));
    }
}
