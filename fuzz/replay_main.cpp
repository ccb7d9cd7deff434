// Replays files (or every file under directories) through the harness's
// LLVMFuzzerTestOneInput without libFuzzer: the CTest entries fuzz_replay_*
// run the committed seed corpora and regressions this way. Exits non-zero if
// an input throws anything but memfit's std::runtime_error (the harness
// catches that); a crash or sanitizer report fails the test by itself.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// A harness may define this to write its seed corpus (`--write-seed DIR`).
extern "C" __attribute__((weak)) int memfit_fuzz_write_seed(const char* dir);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc == 3 && std::string(argv[1]) == "--write-seed") {
    if (!memfit_fuzz_write_seed) {
      std::fprintf(stderr, "replay: this harness writes no seeds\n");
      return 2;
    }
    return memfit_fuzz_write_seed(argv[2]);
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file() && e.path().filename().string()[0] != '.') files.push_back(e.path());
    } else if (fs::exists(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "replay: no inputs\n");
    return 2;
  }
  int bad = 0;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "FAIL %s: uncaught %s\n", f.c_str(), e.what());
      ++bad;
    } catch (...) {
      std::fprintf(stderr, "FAIL %s: uncaught non-std exception\n", f.c_str());
      ++bad;
    }
  }
  std::printf("replayed %zu inputs, %d failed\n", files.size(), bad);
  return bad ? 1 : 0;
}
