#include "kernels/cpu/engine.hpp"

#include <fstream>
#include <vector>

#include "kernels/cpu/bf16_simd.hpp"

namespace memfit::kernels::cpu {

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  static dnnl::stream s(engine());
  return s;
}

bool bf16_kernels_available() { return MEMFIT_BF16_SIMD != 0; }

bool onednn_bf16_compute() {
  // The ISA values are nested bit sets: avx512_core's bits all set means
  // avx512_core or a superset (vnni, bf16, amx); avx2_vnni has not.
  const unsigned core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & core) == core;
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

void warm_gemm_code() {
  static const bool done = [] {
    // Large enough for the packed (copy) path in every transposition, so
    // that each of the driver's code paths has run once.
    constexpr dnnl_dim_t n = 128;
    std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
    (void)dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    return true;
  }();
  (void)done;
}

namespace {
// "AMD EPYC (family 26, model 2)": the name, and the family and model that
// tell processor generations apart where the name does not (a virtual
// machine often shows only "AMD EPYC").
std::string read_cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [](const std::string& l) {
    const size_t c = l.find(':');
    const size_t b = c == std::string::npos ? std::string::npos : l.find_first_not_of(" \t", c + 1);
    return b == std::string::npos ? std::string() : l.substr(b);
  };
  while (std::getline(f, line) && !line.empty()) {  // the first processor's block
    if (line.rfind("model name", 0) == 0) name = value(line);
    else if (line.rfind("cpu family", 0) == 0) family = value(line);
    else if (line.rfind("model", 0) == 0 && line.find(':') != std::string::npos &&
             line.substr(0, line.find(':')).find_last_not_of(" \t") == 4)
      model = value(line);
  }
  if (name.empty()) name = "unknown";
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

const char* build_vector_isa() {
#if MEMFIT_BF16_SIMD && defined(__AVX512BF16__)
  return "avx512-bf16";
#elif MEMFIT_BF16_SIMD
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#else
  return "sse2";
#endif
}
}  // namespace

const MachineInfo& machine_info() {
  static const MachineInfo m = [] {
    MachineInfo i;
    i.cpu_model = read_cpu_model();
    i.onednn_isa = isa_name(dnnl::get_effective_cpu_isa());
    i.vector_isa = build_vector_isa();
    i.onednn_bf16 = onednn_bf16_compute();
    const dnnl_version_t* v = dnnl_version();
    i.onednn_version = std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    return i;
  }();
  return m;
}

void drop_primitive_cache() {
  const int cap = dnnl::get_primitive_cache_capacity();
  dnnl::set_primitive_cache_capacity(0);
  dnnl::set_primitive_cache_capacity(cap);
}

}  // namespace memfit::kernels::cpu
