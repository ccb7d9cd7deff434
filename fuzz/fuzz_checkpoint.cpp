// Checkpoints: the input is checkpoint.safetensors of a tiny model (linear 4->3
// then batch norm: parameters and buffers). load_checkpoint must accept it or
// throw std::runtime_error, and a refused checkpoint must leave every
// parameter and buffer exactly as it was (everything is validated, metadata
// and checksum included, before anything is copied).
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "fuzz/harness.hpp"
#include "memfit/builder.hpp"
#include "memfit/runtime.hpp"
#include "persist/checkpoint.hpp"

namespace {

struct Model {
  memfit::Graph g;
  std::unique_ptr<memfit::Executor> ex;
  std::string dir;
  Model() {
    memfit::Builder b(g);
    memfit::ValueId x = g.input("input", {2, 4});
    x = memfit::linear(b, x, 3, {.name = "fc"});
    memfit::batch_norm(b, x, {.name = "bn"});
    g.model_name = "fuzz";
    memfit::ExecConfig cfg;
    cfg.backend = memfit::Backend::Cpu;
    ex = std::make_unique<memfit::Executor>(g, cfg);
    ex->init_params(1);
  }
  std::vector<unsigned char> state() {
    std::vector<unsigned char> s;
    for (size_t i = 0; i < g.num_values(); ++i) {
      const memfit::Value& v = g.value(memfit::ValueId(i));
      if (v.cls != memfit::VClass::Param && v.cls != memfit::VClass::Buffer) continue;
      const auto* p = static_cast<const unsigned char*>(ex->data(memfit::ValueId(i)));
      s.insert(s.end(), p, p + v.bytes());
    }
    return s;
  }
};

Model& model() {
  static Model m;
  return m;
}

std::string temp_dir() {
  std::string t = (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + std::string("/memfit-fuzz-ckpt-XXXXXX");
  if (!mkdtemp(t.data())) std::abort();
  return t;
}

}  // namespace

// Writes a valid checkpoint of the tiny model to dir (the seed corpus).
extern "C" int memfit_fuzz_write_seed(const char* dir) {
  memfit::train::TrainState st;
  st.step = 12;
  st.epoch = 1;
  st.sample = 34;
  st.seed = 5;
  st.model = "fuzz";
  st.extra["optimizer"] = "sgd";
  memfit::train::save_checkpoint(dir, *model().ex, st);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Model& m = model();
  static const std::string dir = temp_dir();
  {
    std::ofstream f(dir + "/checkpoint.safetensors", std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  m.ex->init_params(1);
  const std::vector<unsigned char> before = m.state();
  try {
    memfit::train::load_checkpoint(dir, *m.ex);
  } catch (const std::runtime_error&) {
    if (m.state() != before) {
      std::fprintf(stderr, "a refused checkpoint changed the model's state\n");
      std::abort();
    }
  }
  return 0;
}
