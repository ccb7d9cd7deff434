// Times the 3x3 stride-1 convolutions of a network's shapes (default:
// ResNet-18's on 28 x 28 at batch 64) forward and backward-data, oneDNN's
// direct kernel against memfit's Winograd F(2x2, 3x3) and F(4x4, 3x3), and
// backward-weights against the transpose of F(2x2, 3x3) (in both F
// columns of the total), and
// measures the kernels' error against the double reference on the same f32 inputs (on
// the first `check` images).
//
//   conv_bench [batch=64] [threads: the process's] [check=2] [channels: only that shape]
//
// Activations blocked (nChw16c), inputs uniform in [-1, 1). Each time is the
// fastest of 10 runs after one warm-up, wall clock. The errors: the largest
// |got - exact| over the outputs, relative to the largest |exact|.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/engine.hpp"
#include "ops/conv/cpu.hpp"
#include "ops/conv/ref.hpp"

using namespace memfit;
using kernels::ConvParams;
using kernels::cpu::Layout;

namespace {

double best_of(kernels::Kernel& k, std::vector<void*> in, void* out, std::vector<std::byte>& scratch) {
  scratch.resize(std::max(scratch.size(), k.scratch_bytes() + 64));
  k.bind(std::move(in), {out}, scratch.data());
  kernels::StepContext ctx;
  k.run(ctx);
  double best = 1e30;
  for (int r = 0; r < 10; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    k.run(ctx);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

std::vector<float> blocked(const std::vector<float>& p, int64_t N, int64_t C, int64_t HW) {
  std::vector<float> b(p.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) b[size_t(((n * (C / 16) + c / 16) * HW + i) * 16 + c % 16)] = p[size_t((n * C + c) * HW + i)];
  return b;
}

// The largest |got - exact| over the first n images' outputs (got blocked,
// exact plain), relative to the largest |exact|.
double rel_error(const std::vector<float>& got, const std::vector<double>& exact, int64_t n, int64_t C, int64_t HW) {
  double err = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < HW; ++j) {
        const double e = exact[size_t((i * C + c) * HW + j)];
        const double g = got[size_t(((i * (C / 16) + c / 16) * HW + j) * 16 + c % 16)];
        err = std::max(err, std::abs(g - e));
        mag = std::max(mag, std::abs(e));
      }
  return err / mag;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  if (argc > 2) omp_set_num_threads(std::atoi(argv[2]));
  const int64_t check = std::min<int64_t>(batch, argc > 3 ? std::atoll(argv[3]) : 2);
  const int64_t only = argc > 4 ? std::atoll(argv[4]) : 0;
  const auto& mi = kernels::cpu::machine_info();
  std::printf("oneDNN %s (%s), memfit's loops for %s, %d threads, batch %lld\n", mi.onednn_version.c_str(),
              mi.onednn_isa.c_str(), mi.vector_isa.c_str(), omp_get_max_threads(), static_cast<long long>(batch));
  std::printf("%-16s %-8s %9s %8s %8s %7s %7s %10s %10s %10s\n", "shape", "dir", "direct ms", "F2 ms", "F4 ms",
              "F2 x", "F4 x", "direct err", "F2 err", "F4 err");
  struct S {
    int64_t C, HW, K;
  };
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  std::vector<std::byte> scratch;
  double total[3] = {0, 0, 0};
  for (const S& s : {S{64, 28, 64}, S{128, 14, 128}, S{256, 7, 256}, S{512, 4, 512}}) {
    if (only && s.C != only) continue;
    ConvParams p{batch, s.C, s.HW, s.HW, s.K, 3, 3, s.HW, s.HW};
    p.pad_h = p.pad_w = 1;
    const int64_t hw = s.HW * s.HW;
    std::vector<float> x(size_t(batch * s.C * hw)), w(size_t(s.K * s.C * 9)), dy(size_t(batch * s.K * hw));
    for (float& v : x) v = U(gen);
    for (float& v : w) v = U(gen) / std::sqrt(float(s.C * 9));
    for (float& v : dy) v = U(gen);
    const auto xb = blocked(x, batch, s.C, hw), dyb = blocked(dy, batch, s.K, hw);
    for (int dir = 0; dir < 2; ++dir) {
      const bool bwd = dir == 1;
      auto direct = bwd ? kernels::cpu::make_conv2d_bwd_data(p, Layout::Blocked16, Layout::Blocked16)
                        : kernels::cpu::make_conv2d(p, Layout::Blocked16, Layout::Blocked16);
      std::unique_ptr<kernels::Kernel> wino[2];
      for (int t = 0; t < 2; ++t)
        wino[t] = bwd ? kernels::cpu::make_conv2d_bwd_data_winograd(p, 2 + 2 * t)
                      : kernels::cpu::make_conv2d_winograd(p, 2 + 2 * t);
      if (!direct || !wino[0] || !wino[1]) continue;
      const auto& in = bwd ? dyb : xb;
      std::vector<float> out_d(bwd ? x.size() : dy.size()), out_w[2] = {out_d, out_d};
      const double td = best_of(*direct, {const_cast<float*>(in.data()), w.data()}, out_d.data(), scratch);
      double tw[2];
      for (int t = 0; t < 2; ++t)
        tw[t] = best_of(*wino[t], {const_cast<float*>(in.data()), w.data()}, out_w[t].data(), scratch);
      total[0] += td;
      total[1] += tw[0];
      total[2] += tw[1];
      // The double reference on the first `check` images.
      ConvParams q = p;
      q.N = check;
      std::vector<double> xd(x.begin(), x.begin() + check * s.C * hw), dyd(dy.begin(), dy.begin() + check * s.K * hw),
          wd(w.begin(), w.end()), exact(size_t(check * (bwd ? s.C : s.K) * hw));
      std::unique_ptr<kernels::Kernel> ref;
      if (bwd) ref = std::make_unique<kernels::ref::Conv2dBwdData<double>>(q);
      else ref = std::make_unique<kernels::ref::Conv2d<double>>(q);
      ref->bind({bwd ? dyd.data() : xd.data(), wd.data()}, {exact.data()}, nullptr);
      ref->run(kernels::StepContext{});
      const int64_t oc = bwd ? s.C : s.K;
      char name[64];
      std::snprintf(name, sizeof name, "%lld->%lld %lldx%lld", static_cast<long long>(s.C),
                    static_cast<long long>(s.K), static_cast<long long>(s.HW), static_cast<long long>(s.HW));
      std::printf("%-16s %-8s %9.2f %8.2f %8.2f %6.2fx %6.2fx %10.2e %10.2e %10.2e\n", name,
                  bwd ? "bwd-data" : "forward", td * 1e3, tw[0] * 1e3, tw[1] * 1e3, td / tw[0], td / tw[1],
                  rel_error(out_d, exact, check, oc, hw), rel_error(out_w[0], exact, check, oc, hw),
                  rel_error(out_w[1], exact, check, oc, hw));
    }
    // Backward-weights: oneDNN's direct kernel against the transpose of F(2x2, 3x3).
    {
      auto direct = kernels::cpu::make_conv2d_bwd_weight(p, Layout::Blocked16, Layout::Blocked16);
      auto wino = kernels::cpu::make_conv2d_bwd_weight_winograd(p);
      if (direct && wino) {
        std::vector<float> dw_d(w.size()), dw_w(w.size());
        const double td = best_of(*direct, {const_cast<float*>(xb.data()), const_cast<float*>(dyb.data())},
                                  dw_d.data(), scratch);
        const double tw = best_of(*wino, {const_cast<float*>(xb.data()), const_cast<float*>(dyb.data())},
                                  dw_w.data(), scratch);
        total[0] += td;
        total[1] += tw;
        total[2] += tw;
        // The error: both kernels and the double reference on the first `check` images.
        ConvParams q = p;
        q.N = check;
        std::vector<double> xd(x.begin(), x.begin() + check * s.C * hw), dyd(dy.begin(), dy.begin() + check * s.K * hw),
            exact(w.size());
        kernels::ref::Conv2dBwdWeight<double> ref(q);
        ref.bind({xd.data(), dyd.data()}, {exact.data()}, nullptr);
        ref.run(kernels::StepContext{});
        auto dq = kernels::cpu::make_conv2d_bwd_weight(q, Layout::Blocked16, Layout::Blocked16);
        auto wq = kernels::cpu::make_conv2d_bwd_weight_winograd(q);
        double err[2] = {0, 0}, mag = 0;
        for (int t = 0; t < 2; ++t) {
          kernels::Kernel& k = t == 0 ? *dq : *wq;
          std::vector<float> got(w.size());
          scratch.resize(std::max(scratch.size(), k.scratch_bytes() + 64));
          k.bind({const_cast<float*>(xb.data()), const_cast<float*>(dyb.data())}, {got.data()}, scratch.data());
          k.run(kernels::StepContext{});
          for (size_t i = 0; i < got.size(); ++i) {
            err[t] = std::max(err[t], std::abs(got[i] - exact[i]));
            mag = std::max(mag, std::abs(exact[i]));
          }
        }
        char name[64];
        std::snprintf(name, sizeof name, "%lld->%lld %lldx%lld", static_cast<long long>(s.C),
                      static_cast<long long>(s.K), static_cast<long long>(s.HW), static_cast<long long>(s.HW));
        std::printf("%-16s %-8s %9.2f %8.2f %8s %6.2fx %7s %10.2e %10.2e %10s\n", name, "bwd-wei", td * 1e3, tw * 1e3,
                    "-", td / tw, "-", err[0] / mag, err[1] / mag, "-");
      }
    }
  }
  std::printf("all: direct %.2f ms, F(2,3) %.2f ms (%.2fx), F(4,3) %.2f ms (%.2fx)\n", total[0] * 1e3, total[1] * 1e3,
              total[0] / total[1], total[2] * 1e3, total[0] / total[2]);
  return 0;
}
