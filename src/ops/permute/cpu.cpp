#include "ops/permute/cpu.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.hpp"

namespace memfit::kernels::cpu {
namespace {

// dims and perm with extent-1 axes dropped and input axes that stay
// neighbours in the output merged; a permutation of nothing becomes [n], [0].
PermuteParams simplify(const PermuteParams& p) {
  std::vector<int64_t> pos(p.dims.size(), -1);  // input axis -> axis after dropping
  PermuteParams s;
  for (size_t i = 0; i < p.dims.size(); ++i)
    if (p.dims[i] != 1) {
      pos[i] = static_cast<int64_t>(s.dims.size());
      s.dims.push_back(p.dims[i]);
    }
  for (int64_t a : p.perm)
    if (pos[static_cast<size_t>(a)] >= 0) s.perm.push_back(pos[static_cast<size_t>(a)]);
  for (size_t k = 0; k + 1 < s.perm.size();) {
    const int64_t a = s.perm[k];
    if (s.perm[k + 1] != a + 1) {
      ++k;
      continue;
    }
    // Input axes a and a + 1 are output axes k and k + 1: one axis.
    s.dims[static_cast<size_t>(a)] *= s.dims[static_cast<size_t>(a + 1)];
    s.dims.erase(s.dims.begin() + a + 1);
    s.perm.erase(s.perm.begin() + static_cast<int64_t>(k) + 1);
    for (int64_t& q : s.perm)
      if (q > a) --q;
  }
  if (s.dims.empty()) {
    s.dims = {1};
    s.perm = {0};
  }
  return s;
}

constexpr int64_t kTile = 32;

// E: an unsigned integer of the element's size.
template <class E>
class Permute final : public Kernel {
 public:
  explicit Permute(const PermuteParams& simple) : rank_(simple.dims.size()) {
    std::vector<int64_t> stride(rank_, 1);
    for (size_t i = rank_; i-- > 1;) stride[i - 1] = stride[i] * simple.dims[i];
    n_ = 1;
    for (int64_t d : simple.dims) n_ *= d;
    const size_t last = rank_ - 1;
    const auto a = static_cast<size_t>(simple.perm[last]);  // the input axis that ends up last
    if (rank_ == 1) {
      mode_ = Mode::Copy;
      return;
    }
    mode_ = a == last ? Mode::Rows : Mode::Tiles;
    row_ = simple.dims[last];
    // The outer axes, in output order: every output axis but the last and,
    // for tiles, but the one that holds the input's last axis (it runs
    // inside a tile).
    std::vector<int64_t> ostride(rank_, 1);
    for (size_t k = rank_; k-- > 1;) ostride[k - 1] = ostride[k] * simple.dims[static_cast<size_t>(simple.perm[k])];
    for (size_t k = 0; k < last; ++k) {
      const auto in_axis = static_cast<size_t>(simple.perm[k]);
      if (mode_ == Mode::Tiles && in_axis == last) {
        out_j_ = ostride[k];
        continue;
      }
      outer_.push_back({simple.dims[in_axis], stride[in_axis], ostride[k]});
    }
    if (mode_ == Mode::Tiles) {
      jn_ = simple.dims[last];  // along the input's contiguous axis
      kn_ = simple.dims[a];     // along the output's contiguous axis
      in_k_ = stride[a];
      bands_ = (kn_ + kTile - 1) / kTile;
    }
    outer_n_ = 1;
    for (const Axis& x : outer_) outer_n_ *= x.n;
  }
  const char* name() const override { return "cpu.permute"; }
  void run(const StepContext&) override {
    const E* x = in<E>(0);
    E* y = out<E>(0);
    if (mode_ == Mode::Copy) {
      const int64_t chunks = std::min<int64_t>(64, (n_ + 4095) / 4096);
      parallel_for(chunks, n_, [&](int64_t c) {
        const int64_t b = c * n_ / chunks, e = (c + 1) * n_ / chunks;
        std::memcpy(y + b, x + b, static_cast<size_t>(e - b) * sizeof(E));
      });
      return;
    }
    // Items: outer index x band (rows: one band). A chunk walks a contiguous
    // range of items with an odometer over the outer axes.
    const int64_t bands = mode_ == Mode::Rows ? 1 : bands_;
    const int64_t items = outer_n_ * bands;
    const int64_t chunks = std::min<int64_t>(items, 256);
    parallel_for(chunks, n_, [&](int64_t c) {
      const int64_t b = c * items / chunks, e = (c + 1) * items / chunks;
      std::array<int64_t, kMaxPermuteRank> idx{};
      int64_t o = b / bands, in_off = 0, out_off = 0;
      for (size_t k = outer_.size(); k-- > 0;) {
        idx[k] = o % outer_[k].n;
        o /= outer_[k].n;
        in_off += idx[k] * outer_[k].in;
        out_off += idx[k] * outer_[k].out;
      }
      int64_t band = b % bands;
      for (int64_t it = b; it < e; ++it) {
        if (mode_ == Mode::Rows) std::memcpy(y + out_off, x + in_off, static_cast<size_t>(row_) * sizeof(E));
        else tile_band(x + in_off, y + out_off, band);
        if (++band < bands) continue;
        band = 0;
        for (size_t k = outer_.size(); k-- > 0;) {  // the next outer index
          in_off += outer_[k].in;
          out_off += outer_[k].out;
          if (++idx[k] < outer_[k].n) break;
          in_off -= outer_[k].in * outer_[k].n;
          out_off -= outer_[k].out * outer_[k].n;
          idx[k] = 0;
        }
      }
    });
  }

 private:
  // y[j * out_j + k] = x[k * in_k + j] for k in the band's kTile values and
  // every j, tile by tile.
  void tile_band(const E* x, E* y, int64_t band) const {
    const int64_t k0 = band * kTile, k1 = std::min(kn_, k0 + kTile);
    for (int64_t j0 = 0; j0 < jn_; j0 += kTile) {
      const int64_t j1 = std::min(jn_, j0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        E* yr = y + j * out_j_;
        const E* xc = x + j;
        for (int64_t k = k0; k < k1; ++k) yr[k] = xc[k * in_k_];
      }
    }
  }
  enum class Mode { Copy, Rows, Tiles };
  struct Axis {
    int64_t n, in, out;  // extent, input stride, output stride
  };
  size_t rank_;
  Mode mode_ = Mode::Copy;
  int64_t n_ = 1, row_ = 1, outer_n_ = 1;
  std::vector<Axis> outer_;
  int64_t jn_ = 1, kn_ = 1, in_k_ = 1, out_j_ = 1, bands_ = 1;
};

template <class E>
std::unique_ptr<Kernel> make_typed(const PermuteParams& s) {
  return std::make_unique<Permute<E>>(s);
}

}  // namespace

std::unique_ptr<Kernel> make_permute(const PermuteParams& p, size_t elem_bytes) {
  const PermuteParams s = simplify(p);
  if (s.dims.size() > kMaxPermuteRank) return nullptr;
  switch (elem_bytes) {
    case 1: return make_typed<uint8_t>(s);
    case 2: return make_typed<uint16_t>(s);
    case 4: return make_typed<uint32_t>(s);
    case 8: return make_typed<uint64_t>(s);
    default: return nullptr;
  }
}

}  // namespace memfit::kernels::cpu
