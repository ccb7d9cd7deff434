#include "infer/generate.hpp"


#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <stdexcept>

#include "data/tokenizer.hpp"
#include "kernels/kernel.hpp"
#include "runtime/device.hpp"
#include "memfit/rng.hpp"
#include "memfit/runtime.hpp"
#include "models/model.hpp"
#include "persist/checkpoint.hpp"
#include "base/process.hpp"
#include "fit/budget.hpp"
#include "compile/step_graph.hpp"
#include "compile/resolve.hpp"

namespace fs = std::filesystem;

namespace memfit::train {
namespace {

// An index drawn from softmax(logits / temperature), among the top_k largest
// when top_k > 0, with the uniform u in [0, 1).
int32_t sample(const float* logits, int64_t V, double temperature, int64_t top_k, double u) {
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  size_t k = static_cast<size_t>(V);
  if (top_k > 0 && top_k < V) {
    k = static_cast<size_t>(top_k);
    std::partial_sort(order.begin(), order.begin() + static_cast<ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  }
  double mx = -INFINITY;
  for (size_t i = 0; i < k; ++i) mx = std::max(mx, static_cast<double>(logits[order[i]]));
  std::vector<double> p(k);
  double sum = 0.0;
  for (size_t i = 0; i < k; ++i) sum += p[i] = std::exp((logits[order[i]] - mx) / temperature);
  double acc = 0.0;
  for (size_t i = 0; i < k; ++i) {
    acc += p[i] / sum;
    if (u < acc) return order[i];
  }
  return order[k - 1];
}

}  // namespace

GenerateResult generate(const GenerateOptions& o, std::ostream& log,
                        const std::function<void(const std::string&)>& on_text) {
  if (o.tokens < 1) throw std::invalid_argument("--tokens must be positive");
  if (!(o.temperature > 0)) throw std::invalid_argument("--temperature must be positive");
  if (o.top_k < 0) throw std::invalid_argument("--top-k must not be negative");
  const auto meta = checkpoint_metadata(o.run);
  const fs::path weights = fs::path(o.run) / "model.safetensors", tok_file = fs::path(o.run) / "tokenizer.json";
  if (meta.empty() || !fs::exists(weights))
    throw std::runtime_error(o.run + " holds no trained run (checkpoint.safetensors and model.safetensors): pass "
                             "the --out directory of memfit train");
  if (!fs::exists(tok_file))
    throw std::runtime_error(o.run + " has no tokenizer.json: it is not a language model's run");
  const std::string model_name = meta.at("model");
  const models::Model model = models::resolve(model_name);
  if (model.task != models::Task::LanguageModel)
    throw std::runtime_error("the run in " + o.run + " trained '" + model_name + "', not a language model");
  const std::unique_ptr<data::Tokenizer> tokp = data::load_tokenizer(tok_file.string());
  const data::Tokenizer& tok = *tokp;
  const int64_t V = static_cast<int64_t>(tok.vocab_size());
  int64_t T = model.max_sequence;
  if (auto it = meta.find("block_size"); it != meta.end() && std::stoll(it->second) > 0) T = std::stoll(it->second);

  StepSpec spec;
  spec.model = model_name;
  spec.batch = 1;
  spec.data = {{"tokens", DType::i32, {T}, 0.0, V}, {"targets", DType::i32, {T}, -1.0, V}};
  spec.classes = V;
  spec.training = false;
  spec.with_loss = false;
  const auto sg = build_step_graph(spec);
  // The baseline as memfit train measures it: after the kernels exist and
  // the threads have started, before any arena.
  ExecConfig cfg;
  cfg.defer_allocation = true;
  Executor ex(sg->g, cfg);
  start_threads();
  ex.device().settle(ex.runs_library_gemm());
  const size_t baseline = current_rss();
  ex.allocate();
  ex.init_params(o.seed);
  load_weights(weights.string(), ex);

  GenerateResult r;
  MemoryInputs mi;
  mi.baseline = baseline;
  mi.data_note = "the prompt and the sampled ids";
  r.report = make_report(sg->g, ex.plan(), mi);
  describe_machine(r.report, ex.device(), DType::f32);
  log << format_report(r.report, detect_budget(std::nullopt), model_name + " (generate)", 1, "no optimizer", "cpu fp32");

  std::vector<int32_t> ids = o.prompt.empty() ? std::vector<int32_t>{} : tok.encode(o.prompt, "--prompt");
  if (ids.empty()) {  // a new line, as a document starts after one; else end-of-text (gpt2) or id 0
    try {
      ids = tok.encode("\n", "the start");
    } catch (const std::runtime_error&) {
    }
    if (ids.empty()) ids.push_back(tok.eot_id() >= 0 ? tok.eot_id() : 0);
  }
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  std::vector<float> logits(static_cast<size_t>(T * V));
  const uint64_t key = rng::stream_key(o.seed, rng::name_hash("generate"), 0);
  const ValueId tokens_in = sg->inputs.at(0).value;
  kernels::StepContext ctx;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> out;
  for (int64_t n = 0; n < o.tokens; ++n) {
    const size_t len = std::min<size_t>(ids.size(), static_cast<size_t>(T));
    std::copy(ids.end() - static_cast<ptrdiff_t>(len), ids.end(), window.begin());
    std::fill(window.begin() + static_cast<ptrdiff_t>(len), window.end(), 0);
    ex.feed(tokens_in, window.data(), window.size() * sizeof(int32_t));
    ex.run(ctx);
    ex.fetch(sg->logits, logits.data(), logits.size() * sizeof(float));
    const int32_t next = sample(logits.data() + (len - 1) * static_cast<size_t>(V), V, o.temperature, o.top_k,
                                rng::uniform01(key, static_cast<uint64_t>(n)));
    ids.push_back(next);
    out.push_back(next);
    if (on_text) on_text(tok.decode({next}));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens = o.tokens;
  r.text = tok.decode(out);
  return r;
}

}  // namespace memfit::train
