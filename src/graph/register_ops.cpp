// The ops of every family (src/ops/families.def) register here.
namespace memfit {

#define MEMFIT_OP_FAMILY(f) void register_##f##_ops();
#define MEMFIT_OP_FAMILY_REF_CPU(f) MEMFIT_OP_FAMILY(f)
#include "ops/families.def"

void register_builtin_ops() {
#define MEMFIT_OP_FAMILY(f) register_##f##_ops();
#define MEMFIT_OP_FAMILY_REF_CPU(f) MEMFIT_OP_FAMILY(f)
#include "ops/families.def"
}

}  // namespace memfit
