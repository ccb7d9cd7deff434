#include <algorithm>
#include "data/dataset.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "data/draw.hpp"

namespace memfit::data {

float Normalize::mean_at(int c) const {
  return mean.empty() ? 0.0f : mean[std::min<size_t>(size_t(c), mean.size() - 1)];
}
float Normalize::std_at(int c) const {
  return stddev.empty() ? 1.0f : stddev[std::min<size_t>(size_t(c), stddev.size() - 1)];
}
void Normalize::validate() const {
  if (mean.empty() || stddev.empty())
    throw std::invalid_argument("normalisation needs at least one mean and one std value");
  for (float s : stddev)
    if (!(s > 0.0f) || !std::isfinite(s))
      throw std::invalid_argument("normalisation std must be positive and finite, got " +
                                  std::to_string(s));
  for (float m : mean)
    if (!std::isfinite(m)) throw std::invalid_argument("normalisation mean must be finite");
}

// ---------------------------------------------------------------------------

std::vector<TensorSpec> Dataset::tensors() const {
  const SampleShape s = sample_shape();
  return {{"image", DType::f32, {s[0], s[1], s[2]}, 0.0, 0}, {"labels", DType::i32, {}, -1.0, num_classes()}};
}

void Dataset::get_tensors(size_t i, void* const* out) const {
  get(i, static_cast<float*>(out[0]), static_cast<int32_t*>(out[1]));
}

SampleShape Dataset::sample_shape() const {
  throw std::logic_error("this dataset holds " + describe(tensors()) + ", not images");
}

void Dataset::get(size_t, float*, int32_t*) const {
  throw std::logic_error("this dataset holds " + describe(tensors()) + ", not images");
}

bool Dataset::is_image() const {
  const std::vector<TensorSpec> t = tensors();
  return t.size() == 2 && t[0].dtype == DType::f32 && t[0].shape.size() == 3 && t[1].dtype == DType::i32 &&
         t[1].shape.empty();
}

// ---------------------------------------------------------------------------

MemoryDataset::MemoryDataset(std::vector<float> data, std::vector<int32_t> labels,
                             SampleShape shape, int num_classes)
    : data_(std::move(data)), labels_(std::move(labels)), shape_(shape),
      num_classes_(num_classes) {
  if (shape[0] <= 0 || shape[1] <= 0 || shape[2] <= 0)
    throw std::invalid_argument("MemoryDataset: sample shape must be positive");
  if (num_classes <= 0) throw std::invalid_argument("MemoryDataset: num_classes must be positive");
  if (data_.size() != labels_.size() * sample_numel(shape))
    throw std::invalid_argument("MemoryDataset: " + std::to_string(data_.size()) +
                                " floats do not hold " + std::to_string(labels_.size()) +
                                " samples of " + std::to_string(sample_numel(shape)));
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] < 0 || labels_[i] >= num_classes)
      throw std::invalid_argument("MemoryDataset: label " + std::to_string(labels_[i]) +
                                  " at index " + std::to_string(i) + " is out of range for " +
                                  std::to_string(num_classes) + " classes");
}

void MemoryDataset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= labels_.size())
    throw std::out_of_range("MemoryDataset: index " + std::to_string(i) + " >= size " +
                            std::to_string(labels_.size()));
  const size_t n = sample_numel(shape_);
  std::memcpy(out_chw, data_.data() + i * n, n * sizeof(float));
  *label = labels_[i];
}

size_t MemoryDataset::resident_bytes() const {
  return data_.capacity() * sizeof(float) + labels_.capacity() * sizeof(int32_t);
}

// ---------------------------------------------------------------------------

size_t SubsetSpec::resolve(size_t n) const {
  switch (kind) {
    case All:
      return n;
    case Count:
      if (count > n)
        throw std::invalid_argument("subset of " + std::to_string(count) +
                                    " samples is larger than the dataset (" + std::to_string(n) +
                                    " samples)");
      return count;
    case Fraction: {
      if (n == 0) return 0;
      const size_t k = size_t(std::llround(fraction * double(n)));
      return std::clamp<size_t>(k, 1, n);
    }
  }
  return n;
}

SubsetSpec parse_subset(const std::string& text) {
  const auto bad = [&](const char* why) {
    return std::invalid_argument("bad subset '" + text + "': " + why +
                                 " (use a count like 2000, a fraction like 0.1 or 10%, "
                                 "optionally prefixed first: to take the first samples)");
  };
  SubsetSpec s;
  std::string t = text;
  if (t.rfind("first:", 0) == 0) {
    s.random = false;
    t = t.substr(6);
  }
  if (t.empty()) throw bad("empty");
  const bool percent = t.back() == '%';
  if (percent) t.pop_back();
  const bool is_fraction = percent || t.find_first_of(".eE") != std::string::npos;
  const char* b = t.c_str();
  char* e = nullptr;
  if (is_fraction) {
    double f = std::strtod(b, &e);
    if (e == b || *e != '\0' || !std::isfinite(f)) throw bad("not a number");
    if (percent) f /= 100.0;
    if (!(f > 0.0 && f <= 1.0)) throw bad("a fraction must be in (0, 1]");
    s.kind = SubsetSpec::Fraction;
    s.fraction = f;
  } else {
    if (t.find_first_not_of("0123456789") != std::string::npos) throw bad("not a count");
    errno = 0;
    const unsigned long long c = std::strtoull(b, &e, 10);
    if (errno != 0 || *e != '\0') throw bad("not a count");
    if (c == 0) throw bad("a count must be at least 1");
    s.kind = SubsetSpec::Count;
    s.count = size_t(c);
  }
  return s;
}

Subset::Subset(const Dataset& base, std::vector<size_t> indices)
    : base_(&base), indices_(std::move(indices)) {
  for (size_t i : indices_)
    if (i >= base.size())
      throw std::invalid_argument("Subset: index " + std::to_string(i) +
                                  " is outside the base dataset of " +
                                  std::to_string(base.size()) + " samples");
}

Subset Subset::first(const Dataset& base, size_t n) {
  if (n > base.size())
    throw std::invalid_argument("subset of the first " + std::to_string(n) +
                                " samples is larger than the dataset (" +
                                std::to_string(base.size()) + " samples)");
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  return Subset(base, std::move(idx));
}

Subset Subset::random(const Dataset& base, size_t n, uint64_t seed) {
  const size_t total = base.size();
  if (n > total)
    throw std::invalid_argument("random subset of " + std::to_string(n) +
                                " samples is larger than the dataset (" +
                                std::to_string(total) + " samples)");
  // Selection sampling (Knuth, Algorithm S): index i is kept with probability
  // (still needed)/(still left). Exact, sorted output, no scratch memory.
  const uint64_t key = rng::stream_key(seed, detail::kSubsetStream, total);
  std::vector<size_t> idx;
  idx.reserve(n);
  for (size_t i = 0; i < total && idx.size() < n; ++i)
    if (detail::draw_below(key, i, total - i) < n - idx.size()) idx.push_back(i);
  return Subset(base, std::move(idx));
}

Subset Subset::from_spec(const Dataset& base, const SubsetSpec& spec, uint64_t seed) {
  const size_t n = spec.resolve(base.size());
  return spec.random && spec.kind != SubsetSpec::All ? random(base, n, seed) : first(base, n);
}

void Subset::get(size_t i, float* out_chw, int32_t* label) const {
  if (i >= indices_.size())
    throw std::out_of_range("Subset: index " + std::to_string(i) + " >= size " +
                            std::to_string(indices_.size()));
  base_->get(indices_[i], out_chw, label);
}

void Subset::get_tensors(size_t i, void* const* out) const {
  if (i >= indices_.size())
    throw std::out_of_range("Subset: index " + std::to_string(i) + " >= size " + std::to_string(indices_.size()));
  base_->get_tensors(indices_[i], out);
}

void Subset::get_tensors_at(size_t i, uint64_t epoch, void* const* out) const {
  if (i >= indices_.size())
    throw std::out_of_range("Subset: index " + std::to_string(i) + " >= size " + std::to_string(indices_.size()));
  base_->get_tensors_at(indices_[i], epoch, out);
}

size_t Subset::resident_bytes() const {
  return indices_.capacity() * sizeof(size_t) + base_->resident_bytes();
}

}  // namespace memfit::data
