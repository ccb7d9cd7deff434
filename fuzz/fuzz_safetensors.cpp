// safetensors files: load (header and offsets validated), then read every
// tensor's bytes, which must lie inside the mapping.
#include "fuzz/harness.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memfit::fuzz::input_file(data, size);
  return memfit::fuzz::run_one([&] {
    auto f = memfit::io::SafetensorsFile::load(path);
    unsigned sum = 0;
    for (const auto& t : f.tensors()) {
      const auto* p = static_cast<const unsigned char*>(f.data(t));
      for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
    }
    for (const auto& [k, v] : f.metadata()) sum += unsigned(k.size() + v.size());
    volatile unsigned sink = sum;
    (void)sink;
  });
}
