namespace memfit {

void register_conv_ops();
void register_linear_ops();
void register_eltwise_ops();
void register_pool_ops();
void register_batchnorm_ops();
void register_dropout_ops();
void register_shape_ops();
void register_loss_ops();
void register_optim_ops();
void register_embedding_ops();
void register_permute_ops();
void register_layernorm_ops();
void register_gelu_ops();
void register_softmax_ops();
void register_metrics_ops();
void register_broadcast_ops();
void register_attention_ops();
void register_lstm_ops();
void register_xent_rows_ops();

void register_builtin_ops() {
  register_conv_ops();
  register_linear_ops();
  register_eltwise_ops();
  register_pool_ops();
  register_batchnorm_ops();
  register_dropout_ops();
  register_shape_ops();
  register_loss_ops();
  register_optim_ops();
  register_embedding_ops();
  register_permute_ops();
  register_layernorm_ops();
  register_gelu_ops();
  register_softmax_ops();
  register_metrics_ops();
  register_broadcast_ops();
  register_attention_ops();
  register_lstm_ops();
  register_xent_rows_ops();
}

}  // namespace memfit
