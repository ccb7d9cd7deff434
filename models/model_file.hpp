// memfit model files: a small text format for sequential and residual CNNs.
//
//   # comment                       (also after any line)
//   conv NAME out=C k=K [stride=S] [pad=P] [dilation=D] [groups=G] [bias=0|1]
//   linear NAME out=N|classes [bias=0|1]
//   batchnorm NAME [eps=E] [momentum=M]
//   dropout NAME p=P
//   relu | flatten | gap            (gap: global average pool -> [N, C])
//   maxpool k=K [stride=S] [pad=P]
//   avgpool k=K [stride=S] [pad=P] [count_include_pad=0|1]
//   save LABEL                      label the current value
//   load LABEL                      make a labelled value current
//   add LABEL                       current + labelled value
//   scope NAME ... end              prefix parameter names with "NAME."
//
// Each layer reads the current value and makes its output current. NAME is
// the module name inside the current scope, so parameter names follow
// PyTorch's state_dict ("layer1.0.conv1.weight"). `out=classes` takes the
// number of classes of the dataset. Errors name the file and line.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "memfit/builder.hpp"

namespace memfit::models {

using ModelBuilder = std::function<ValueId(Builder&, ValueId, int64_t)>;

// A mistake in a model file's text: an unknown layer or option, a value out
// of range (stride >= 1, kernel >= 1, pad >= 0, channels 1..2^20, ...),
// scopes nested deeper than 64, a file over 1 MiB. The message is
// "FILE:LINE: ..." and names the fix. Not a GraphError: the command reports
// it as a bad file (exit code 1), not as a bad command line.
struct ModelFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses the text, checking syntax and every attribute's range now. Throws
// ModelFileError. Shapes are checked when the returned builder runs, which
// throws GraphError("FILE:LINE: ...").
ModelBuilder parse_model_text(const std::string& text, const std::string& source);
ModelBuilder load_model_file(const std::string& path);

// A zoo name or a path to a model file. Throws GraphError if neither,
// ModelFileError if the file is bad.
ModelBuilder resolve_model(const std::string& name_or_path);

}  // namespace memfit::models
