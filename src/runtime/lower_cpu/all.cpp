// Fast CPU kernels register here, one function per op family
// (runtime/lower_cpu/<family>.cpp). Ops without one run the f32 reference.
namespace memfit {

void register_cpu_kernels() {}

}  // namespace memfit
