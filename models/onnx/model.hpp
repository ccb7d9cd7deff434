// PyTorch models through ONNX: the forward graph of a `torch.onnx.export`ed
// model, imported as a memfit model (memfit adds the loss, the backward pass
// and the optimizer, and plans the step as for any model).
//
//   torch.onnx.export(model, example, "model.onnx", export_params=True,
//                     do_constant_folding=False,
//                     training=torch.onnx.TrainingMode.TRAINING,
//                     input_names=["image"], output_names=["logits"])
//
// The initializers become the parameters, under their ONNX names (PyTorch's
// state_dict names when exported this way: "layer1.0.conv1.weight"), and
// their values are the initial weights; batch-norm running statistics become
// buffers under theirs, so the weights memfit saves load back into the
// PyTorch model with load_state_dict. The batch size is memfit's --batch
// whatever the file's batch axis says.
//
// One input: an image f32 [N, C, H, W] (or token ids [N, T], read through
// Gather as an embedding; that path has no PyTorch check yet); one output: the logits [N, classes] ([N, T,
// vocab] for a language model). Ops memfit cannot train are refused when the
// file is read, naming the node and the ops it can (onnx_supported_ops).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/model.hpp"

namespace memfit::models {

// True for a path ending in ".onnx" (how `--model` tells an ONNX file from
// a memfit model file).
bool is_onnx_path(const std::string& path);

// Reads and checks the file: every node's op and attributes, and the graph's
// shapes at the file's own input size. Throws ModelFileError naming the file
// (and the node) for a missing, truncated or unsupported file. The returned
// model's build throws GraphError where the data does not fit it (channels,
// image size, classes). Each call reads the file: a run resolves its model
// once and shares it (train/run_context.hpp), so that one copy of the
// initial weights is held, which the model's release_import lets go.
Model load_onnx_model(const std::string& path, const std::vector<std::string>& dropout = {});

// Dropout an inference export left out (torch writes none for a module in
// eval mode, with either exporter), put back by the user's word: each spec
// "[after:]MODULE=P" puts dropout of probability P on the input of the
// layer MODULE (by its parameters' names: "classifier.1" reads
// "classifier.1.weight"; a glob such as "layer*.fc" names several), or with
// "after:" on its output (Hugging Face's dropout after a dense layer). A
// spec that names no layer, or the input of an embedding (token ids), or a
// place where the file already drops, is a ModelFileError.
// A spec that is a bare probability P (0 <= P < 1) sets a zoo GPT's
// dropout instead (bare_dropout: P, or nullopt for any other spec).
// dropout_spec_error: "" for a well-formed spec of either form, else what
// is wrong with it.
std::optional<double> bare_dropout(const std::string& spec);
std::string dropout_spec_error(const std::string& spec);

// "AveragePool, BatchNormalization, ..." as refusals list them.
std::string onnx_supported_ops();


}  // namespace memfit::models
