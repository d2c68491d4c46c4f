// mx_chain_status.cuh — the gate's two status words of one chained GEMM from its operands' own
// (flags ORed, residual counts added, saturating so that a huge sum still closes the gate), and
// their copy into a slot of mapped pinned host memory for the plugin's gate memory
// (src/backend/cuda/chain_memory.rs reads it at the operand's next quantize call, without
// waiting: the count is written first and the flags last, so a slot whose flags word has left
// its sentinel -1 is complete). One thread runs it (mx_chain_status_merge in mx_chain_gemm.cu).
// Split out so that the host compiles and checks it (tests/chain_status_host.rs).
// Requires mx_ptx.cuh (MX_DEV). NVRTC-clean.
#pragma once

MX_DEV void mx_chain_status_words(const int* a, const int* b, int* out, int* host) {
  const long long n = (long long)(unsigned)a[1] + (long long)(unsigned)b[1];
  const int flags = a[0] | b[0], count = n > 0x7FFFFFFF ? 0x7FFFFFFF : (int)n;
  out[0] = flags;
  out[1] = count;
  if (host != nullptr) {
    *(volatile int*)(host + 1) = count;
    __threadfence_system();
    *(volatile int*)host = flags;
  }
}
