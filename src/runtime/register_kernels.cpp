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

// The families with CUDA kernels (ops/<family>/cuda.cu, lower_cuda.cpp),
// compiled where the build has CUDA (MEMFIT_HAVE_CUDA).
#define MEMFIT_CUDA_FAMILIES(X) \
  X(activation) X(batchnorm) X(conv) X(dropout) X(eltwise) X(linear) X(loss) X(metrics) X(optim) X(pool) X(shape) \
  X(tier)
#ifdef MEMFIT_HAVE_CUDA
#define MEMFIT_DECLARE_CUDA(f) void register_##f##_cuda_kernels();
MEMFIT_CUDA_FAMILIES(MEMFIT_DECLARE_CUDA)
#endif

void register_cuda_kernels() {
#ifdef MEMFIT_HAVE_CUDA
#define MEMFIT_REGISTER_CUDA(f) register_##f##_cuda_kernels();
  MEMFIT_CUDA_FAMILIES(MEMFIT_REGISTER_CUDA)
#endif
}

}  // namespace memfit
