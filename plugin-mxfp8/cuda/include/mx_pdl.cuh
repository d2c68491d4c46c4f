// mx_pdl.cuh — programmatic dependent launch (sm_90 `griddepcontrol`): the kernels that the
// plugin may launch with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
// (src/backend/cuda/device.rs, `Call::launch_dependent`) begin with mx_pdl_enter(). Such a
// launch lets the kernel's CTAs be scheduled while the previous kernel in the stream still
// runs (on the SMs its tail leaves idle); griddepcontrol.wait then holds every thread until
// that kernel has completed and its writes are visible, so no global memory is touched early
// and each kernel completes after its predecessor (the ordering stays transitive). The
// trigger lets this kernel's own dependents be scheduled as early. Launched without the
// attribute both instructions are no-ops.
// Needs MX_DEV (mx_ptx.cuh, or the host harness); the host harness (MX_HOST_SIMT) runs the
// kernels one after another, where both are empty.
#pragma once

// The portable build (below sm_90, where no launch is dependent) compiles it empty too.
#if defined(MX_HOST_SIMT) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 900
MX_DEV void mx_pdl_enter() {}
#else
MX_DEV void mx_pdl_enter() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
#endif
