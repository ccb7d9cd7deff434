// Every op family's lowering registers here. A family that is not listed has
// no kernels yet and make_kernel reports it by name.
namespace memfit {

void register_eltwise_kernels();
void register_optim_kernels();
void register_linear_kernels();

void register_builtin_kernels() {
  register_eltwise_kernels();
  register_optim_kernels();
  register_linear_kernels();
}

}  // namespace memfit
