// The process-wide oneDNN CPU engine and stream.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>

namespace memfit::kernels::cpu {

dnnl::engine& engine();
dnnl::stream& stream();

// Drops oneDNN's cache of created primitives (their JIT code): a fit search
// creates primitives for many plans that will not run, and their code would
// otherwise stay in the process's memory. Kernels keep their own primitives.
void drop_primitive_cache();

// True if this build has the hand-written bf16 kernels (they need AVX-512;
// a build for another target, such as the sanitizer build, has none, and
// bf16 nodes then run as f32 kernels between conversions).
bool bf16_kernels_available();

// True if oneDNN creates bf16 compute primitives (convolution, matmul,
// eltwise) on this CPU: oneDNN 2.6 needs avx512_core for them. False on an
// AVX2-only CPU, or where ONEDNN_MAX_CPU_ISA limits oneDNN below AVX-512;
// bf16 nodes then run as f32 kernels between conversions.
bool onednn_bf16_compute();

// Generates oneDNN's gemm JIT kernels now, if this CPU's primitives use
// them. oneDNN's gemm driver (its matmul and some convolutions without
// AVX-512's brgemm, i.e. on AVX2) generates all its f32 kernels at its first
// call, ~2-5 MiB of code and driver pages; called before the process
// baseline is measured, they are part of it instead of growing the first
// step past the plan. Where oneDNN has AVX-512 (brgemm) only convolutions
// with few channels use it (x64:gemm:jit: 3 to 7 MiB of a MnasNet's first
// step); CpuDevice::settle calls this for a plan with such a kernel.
void warm_gemm_code();

// What this process computes on, as the plan and the bench tables state it.
struct MachineInfo {
  std::string cpu_model;   // the processor's name (/proc/cpuinfo), "unknown" if unreadable
  std::string onednn_isa;  // the instruction set oneDNN uses (after ONEDNN_MAX_CPU_ISA)
  std::string vector_isa;  // the target memfit's own loops were built for: avx512-bf16, avx512, avx2, sse2
  bool onednn_bf16 = false;  // onednn_bf16_compute()
  std::string onednn_version;
};
const MachineInfo& machine_info();
// oneDNN's name for an instruction set ("avx512_core_bf16", "avx2", ...).
const char* isa_name(dnnl::cpu_isa isa);

}  // namespace memfit::kernels::cpu
