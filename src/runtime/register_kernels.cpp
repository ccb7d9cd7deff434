// The kernels of every op family (src/ops/families.def) register here: the
// reference lowerings, and the fast CPU lowerings of the families that have
// them (ops without one run the f32 reference on the CPU device).
namespace memfit {

#define MEMFIT_OP_FAMILY(f) void register_##f##_ref_kernels(); void register_##f##_cpu_kernels();
#define MEMFIT_OP_FAMILY_REF_CPU(f) void register_##f##_ref_kernels();
#include "ops/families.def"

void register_builtin_kernels() {
#define MEMFIT_OP_FAMILY(f) register_##f##_ref_kernels();
#define MEMFIT_OP_FAMILY_REF_CPU(f) MEMFIT_OP_FAMILY(f)
#include "ops/families.def"
}

void register_cpu_kernels() {
#define MEMFIT_OP_FAMILY(f) register_##f##_cpu_kernels();
#define MEMFIT_OP_FAMILY_REF_CPU(f)
#include "ops/families.def"
}

}  // namespace memfit
