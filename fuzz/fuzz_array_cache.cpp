// memfit's array cache files (src/data/array_dataset.hpp): ArrayFileDataset
// opens the file (header, sizes against the file's, every label, the
// normalisation), then every sample it claims is read through get() (one
// pread per f32 sample, chunked preads through the tables for u8), and each
// channel's fill value; the samples must be finite where the tables made
// them from u8 pixels.
#include <cmath>
#include <vector>

#include "data/array_dataset.hpp"
#include "fuzz/harness.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = memfit::fuzz::input_file(data, size);
  return memfit::fuzz::run_one([&] {
    auto d = memfit::data::ArrayFileDataset::open(path, "fuzz");
    const memfit::data::SampleShape s = d->sample_shape();
    std::vector<float> out(memfit::data::sample_numel(s));
    double sum = 0;
    for (size_t i = 0; i < d->size(); ++i) {
      int32_t label = -1;
      d->get(i, out.data(), &label);
      if (label < 0 || label >= d->num_classes()) {
        std::fprintf(stderr, "sample %zu: label %d outside [0, %d) after open checked them\n", i, label, d->num_classes());
        std::abort();
      }
      for (float v : out) {
        if (d->type() == memfit::data::ElemType::U8 && !std::isfinite(v)) {
          std::fprintf(stderr, "sample %zu: a u8 pixel normalised to %f\n", i, double(v));
          std::abort();
        }
        sum += v;
      }
    }
    for (int c = 0; c < s[0]; ++c) sum += d->fill_value(c);
    sum += double(d->fingerprint().size() + d->resident_bytes() + d->transient_bytes());
    volatile double sink = sum;
    (void)sink;
  });
}
