// mx_types.cuh — the kernels' integer types. Apart from mx_ptx.cuh (which includes it first) so
// that the host tests' CUDA stand-in (tests/host/simt.hpp) defines its shims with the same
// types before it includes mx_ptx.cuh. NVRTC-clean.
#pragma once

typedef unsigned char      mx_u8;
typedef unsigned short     mx_u16;
typedef unsigned int       mx_u32;
typedef unsigned long long mx_u64;
typedef long long          mx_i64;
