#include "compile/step_policy.hpp"

namespace memfit::train {

std::string StepPolicy::describe() const {
  std::string s = "micro-batch " + std::to_string(batch) + " x " + std::to_string(accumulation);
  s += precision == DType::bf16 ? ", bf16"
       : precision == DType::f16 ? ", fp16"
       : saved == DType::bf16    ? ", fp32 with bf16 saved activations"
                                 : ", fp32";
  s += ", recompute " + recompute;
  if (update_in_backward) s += ", update in backward";
  else if (shard_gradients) s += ", sharded gradients";
  if (!optimizer_state.empty() && optimizer_state != "fp32") s += ", " + optimizer_state + " optimizer state";
  if (master_weights == DType::bf16) s += ", bf16 master weights";
  if (accumulation > 1 && accumulated_grads == DType::bf16) s += ", bf16 accumulated gradients";
  if (!offload.empty())
    s += ", " + offload + " offloaded to disk" +
         (offload_ahead > 0 ? " (moved " + std::to_string(offload_ahead) + " ahead, overlapped)" : " (moved when used)");
  if (data_in == "disk") s += ", dataset streamed from disk";
  else if (data_in == "memory") s += ", dataset in memory";
  return s;
}

std::string StepPolicy::key() const {
  return "micro-batch " + std::to_string(batch) + " x " + std::to_string(accumulation) + ", recompute " + recompute +
         ", precision " + precision_name(precision) + ", saved " + precision_name(saved) + ", optimizer state " +
         optimizer_state + ", master weights " + precision_name(master_weights) + ", accumulated gradients " +
         precision_name(accumulated_grads) + ", gradients " +
         (shard_gradients ? "sharded" : "whole") + (update_in_backward ? ", update in backward" : "") +
         (offload.empty() ? "" : ", offload " + offload + " ahead " + std::to_string(offload_ahead));
}

}  // namespace memfit::train
