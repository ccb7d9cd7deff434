// Every op family's lowering registers here. A family that is not listed has
// no kernels yet and make_kernel reports it by name.
namespace memfit {

void register_eltwise_kernels();
void register_optim_kernels();
void register_linear_kernels();
void register_matmul_kernels();
void register_conv_kernels();
void register_pool_kernels();
void register_batchnorm_kernels();
void register_dropout_kernels();
void register_shape_kernels();
void register_loss_kernels();
void register_embedding_kernels();
void register_last_axis_kernels();
void register_metrics_kernels();
void register_broadcast_kernels();
void register_attention_kernels();
void register_lstm_kernels();
void register_xent_rows_kernels();

void register_builtin_kernels() {
  register_eltwise_kernels();
  register_optim_kernels();
  register_linear_kernels();
  register_matmul_kernels();
  register_conv_kernels();
  register_pool_kernels();
  register_batchnorm_kernels();
  register_dropout_kernels();
  register_shape_kernels();
  register_loss_kernels();
  register_embedding_kernels();
  register_last_axis_kernels();
  register_metrics_kernels();
  register_broadcast_kernels();
  register_attention_kernels();
  register_lstm_kernels();
  register_xent_rows_kernels();
}

}  // namespace memfit
