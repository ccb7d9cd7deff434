// Fast CPU kernels register here, one function per op family
// (runtime/lower_cpu/<family>.cpp). Ops without one run the f32 reference.
namespace memfit {

void register_cpu_eltwise_kernels();
void register_cpu_linear_kernels();
void register_cpu_conv_kernels();
void register_cpu_pool_kernels();
void register_cpu_batchnorm_kernels();
void register_cpu_dropout_kernels();
void register_cpu_loss_kernels();
void register_cpu_optim_kernels();
void register_cpu_embedding_kernels();
void register_cpu_last_axis_kernels();
void register_cpu_metrics_kernels();
void register_cpu_broadcast_kernels();
void register_cpu_attention_kernels();
void register_cpu_lstm_kernels();
void register_cpu_xent_rows_kernels();

void register_cpu_kernels() {
  register_cpu_eltwise_kernels();
  register_cpu_linear_kernels();
  register_cpu_conv_kernels();
  register_cpu_pool_kernels();
  register_cpu_batchnorm_kernels();
  register_cpu_dropout_kernels();
  register_cpu_loss_kernels();
  register_cpu_optim_kernels();
  register_cpu_embedding_kernels();
  register_cpu_last_axis_kernels();
  register_cpu_metrics_kernels();
  register_cpu_broadcast_kernels();
  register_cpu_attention_kernels();
  register_cpu_lstm_kernels();
  register_cpu_xent_rows_kernels();
}

}  // namespace memfit
