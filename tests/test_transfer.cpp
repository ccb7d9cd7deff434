// Transfer learning: --init-from (memfit's or PyTorch's weights), --reinit a
// new head, --freeze the backbone. Frozen parts keep no gradients or
// optimizer state and, since nothing before them trains, save no
// activations: the plan shrinks by exactly those bytes, the measured peak
// follows, and the new head still learns.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "cli_util.hpp"
#include "io/safetensors.hpp"

using namespace memfit::testing;

TEST(Transfer, FrozenBackboneNewHeadLearnsInLessMemory) {
  const std::string base = temp_dir("transfer-base"), tuned = temp_dir("transfer-tuned");
  RunResult pre = run_memfit("train --subset 2000 --test-subset 1000 --epochs 2 --batch 32 --out " + base);
  ASSERT_EQ(pre.code, 0) << pre.out;

  const std::string freeze = " --freeze conv1 --freeze conv2 --freeze fc1";
  RunResult full = run_memfit("plan --batch 32 --json");
  RunResult frozen = run_memfit("plan --batch 32 --json" + freeze);
  ASSERT_EQ(full.code, 0) << full.out;
  ASSERT_EQ(frozen.code, 0) << frozen.out;
  // Only fc2 (1024*10 + 10 floats) keeps a gradient and a momentum buffer.
  EXPECT_NEAR(json_number(frozen.out, "by_class/gradients"), 10250 * 4, 128);  // two tensors, 64-byte aligned
  EXPECT_NEAR(json_number(frozen.out, "by_class/optimizer_state"), 10250 * 4, 128);
  EXPECT_LT(json_number(frozen.out, "by_class/saved_activations"), 0.2 * json_number(full.out, "by_class/saved_activations"));
  EXPECT_LT(json_number(frozen.out, "total_bytes"), json_number(full.out, "total_bytes") - 2 * 3.2e6 * 4);

  RunResult ft = run_memfit("train --subset 2000 --test-subset 1000 --epochs 1 --batch 32 --json --init-from " + base +
                            "/model.safetensors --reinit fc2" + freeze + " --out " + tuned);
  ASSERT_EQ(ft.code, 0) << ft.out;
  EXPECT_NE(ft.out.find("initialised 6 tensors from"), std::string::npos) << ft.out;
  EXPECT_GE(json_field(ft.out, "test_accuracy"), 0.7) << ft.out;
  // The frozen layers did not move; the head did.
  auto a = memfit::io::SafetensorsFile::load(base + "/model.safetensors");
  auto b = memfit::io::SafetensorsFile::load(tuned + "/model.safetensors");
  for (const char* n : {"conv1.weight", "conv2.bias", "fc1.weight"})
    EXPECT_EQ(std::memcmp(a.data(a.at(n)), b.data(b.at(n)), a.at(n).nbytes()), 0) << n;
  EXPECT_NE(std::memcmp(a.data(a.at("fc2.weight")), b.data(b.at("fc2.weight")), a.at("fc2.weight").nbytes()), 0);
}

// --freeze '!fc2' freezes everything but fc2: the plan keeps gradients and
// state for fc2 alone, as --freeze of every other layer does.
TEST(Transfer, FreezeAllButAHead) {
  RunResult all_but = run_memfit("plan --batch 32 --json --freeze '!fc2'");
  RunResult listed = run_memfit("plan --batch 32 --json --freeze conv1 --freeze conv2 --freeze fc1");
  ASSERT_EQ(all_but.code, 0) << all_but.out;
  ASSERT_EQ(listed.code, 0) << listed.out;
  // (The totals differ by each process's measured baseline.)
  for (const char* c : {"by_class/gradients", "by_class/optimizer_state", "by_class/activations_arena"})
    EXPECT_EQ(json_number(all_but.out, c), json_number(listed.out, c)) << c;
  RunResult none = run_memfit("plan --batch 32 --freeze '!nosuchlayer'");
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.out.find("--freeze '!nosuchlayer' matches no parameter"), std::string::npos) << none.out;
}

TEST(Transfer, InitFromErrorsNameTheTensor) {
  const std::string d = temp_dir("transfer-err");
  RunResult pre = run_memfit("train --subset 256 --test-subset 64 --steps 1 --batch 32 --out " + d);
  ASSERT_EQ(pre.code, 0) << pre.out;
  RunResult r = run_memfit("train --model resnet18 --subset 256 --steps 1 --batch 8 --init-from " + d +
                           "/model.safetensors --out " + temp_dir("transfer-err2"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("model.safetensors: tensor 'conv1.weight' is F32 [32, 1, 5, 5] but the model expects F32 [64, 1, 3, 3]"),
            std::string::npos)
      << r.out;
  RunResult f = run_memfit("train --subset 256 --steps 1 --freeze nosuchlayer --out " + temp_dir("transfer-err3"));
  EXPECT_NE(f.code, 0);
  EXPECT_NE(f.out.find("--freeze 'nosuchlayer' matches no parameter"), std::string::npos) << f.out;
}

// Weights saved inside a wrapper (Hugging Face's BertForSequenceClassification
// keeps its encoder under "bert.") load by the one tensor whose name ends
// in the model's; two such tensors are an error naming both.
TEST(Transfer, InitFromFindsAPrefixedName) {
  const std::string d = temp_dir("transfer-prefix");
  RunResult pre = run_memfit("train --subset 256 --test-subset 64 --steps 1 --batch 32 --out " + d + "/base");
  ASSERT_EQ(pre.code, 0) << pre.out;
  auto base = memfit::io::SafetensorsFile::load(d + "/base/model.safetensors");
  auto rewrite = [&](const std::string& path, const std::vector<std::string>& prefixes) {
    std::vector<memfit::io::TensorView> views;
    std::vector<std::string> names;
    for (const auto& n : base.names())
      for (const auto& p : prefixes) names.push_back(p + n);
    size_t k = 0;
    for (const auto& n : base.names())
      for (size_t p = 0; p < prefixes.size(); ++p, ++k) {
        const auto& t = base.at(n);
        views.push_back({names[k], t.dtype, t.shape, base.data(t)});
      }
    memfit::io::write_safetensors(path, views, {});
  };
  rewrite(d + "/wrapped.safetensors", {"net."});
  RunResult r = run_memfit("train --subset 256 --test-subset 64 --steps 1 --batch 32 --init-from " + d +
                           "/wrapped.safetensors --out " + d + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("initialised 8 tensors from"), std::string::npos) << r.out;
  rewrite(d + "/twice.safetensors", {"a.", "b."});
  RunResult two = run_memfit("train --subset 256 --steps 1 --batch 32 --init-from " + d + "/twice.safetensors --out " +
                             d + "/run2");
  EXPECT_EQ(two.code, 1) << two.out;
  EXPECT_NE(two.out.find("has no tensor 'conv1.weight' but two that end in it ('a.conv1.weight', 'b.conv1.weight')"),
            std::string::npos)
      << two.out;
}

TEST(Transfer, LoadsWeightsSavedByPyTorch) {
  if (run_cmd("/usr/bin/python3 -c 'import torch'").code != 0) GTEST_SKIP() << "python3-torch not installed";
  const std::string d = temp_dir("transfer-torch");
  // A PyTorch ResNet-18 state_dict (with num_batches_tracked) written as safetensors by hand.
  const std::string py = std::string(MEMFIT_TEST_DATA) + "/golden/torch_state_dict.py";
  RunResult w = run_cmd("/usr/bin/python3 " + py + " " + d + "/resnet18_torch.safetensors");
  ASSERT_EQ(w.code, 0) << w.out;
  RunResult r = run_memfit("train --model resnet18 --subset 64 --test-subset 32 --steps 1 --batch 16 --init-from " + d +
                           "/resnet18_torch.safetensors --out " + d + "/run");
  ASSERT_EQ(r.code, 0) << r.out;
  // 62 parameters and 40 running statistics; num_batches_tracked is not needed.
  EXPECT_NE(r.out.find("initialised 102 tensors"), std::string::npos) << r.out;
}
