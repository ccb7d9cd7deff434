// Saved tokenizer files (a run directory's tokenizer.json, any kind):
// load_tokenizer must accept the bytes or throw std::runtime_error; a loaded
// tokenizer must encode a fixed text (or refuse it, as char does for a
// character outside its alphabet) and decode its own ids without an error.
#include <string>

#include "data/tokenizer.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memfit::fuzz::input_file(data, size);
  return memfit::fuzz::run_one([&] {
    const auto t = memfit::data::load_tokenizer(path);
    const std::vector<int32_t> ids = t->encode("Hello, world! caf\xC3\xA9 \xE4\xB8\xAD 123\n", "fuzz");
    for (int32_t id : ids)
      if (id < 0 || static_cast<size_t>(id) >= t->vocab_size()) std::abort();
    t->decode(ids);  // std::out_of_range here would be a bug: the ids are its own
  });
}
