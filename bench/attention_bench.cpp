// Times the fused attention kernels (forward and backward): by default at
// GPT-2-small shapes (B 4, H 12, D 64, T 256 and 1024, full and causal); with
// arguments one shape, for instance gpt-char's (B 16, H 6, T 256, causal,
// dropout 0.2). The best of a few runs each, with the threads OpenMP gives
// the process (attention_bench_v3: the x86-64-v3 engine, AVX2).
//
//   attention_bench [B H T causal(0|1) dropout]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "ops/attention/cpu.hpp"

using namespace memfit;
using kernels::AttentionParams;

namespace {

void time_shape(int64_t B, int64_t H, int64_t T, bool causal, double dropout) {
  using clk = std::chrono::steady_clock;
  std::mt19937_64 gen(1);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  AttentionParams p{B, H, T, T, 64, 64};
  p.scale = 1.0 / std::sqrt(64.0);
  p.causal = causal;
  p.dropout = dropout;
  p.stream = 12345;
  const size_t n = static_cast<size_t>(B * H * T * 64);
  std::vector<float> q(n), k(n), v(n), dout(n), out(n), lse(static_cast<size_t>(B * H * T)), dq(n), dk(n), dv(n);
  for (auto* x : {&q, &k, &v, &dout})
    for (float& e : *x) e = U(gen);
  auto f = kernels::cpu::make_attention(p);
  auto b = kernels::cpu::make_attention_bwd(p);
  std::vector<double> s1(f->scratch_bytes() / 8 + 8), s2(b->scratch_bytes() / 8 + 8);
  f->bind({q.data(), k.data(), v.data()}, {out.data(), lse.data()}, s1.data());
  b->bind({q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data()}, {dq.data(), dk.data(), dv.data()},
          s2.data());
  f->run({});  // warm-up
  b->run({});
  double tf = 1e30, tb = 1e30;
  for (int it = 0; it < (T > 256 ? 3 : 6); ++it) {
    const auto t0 = clk::now();
    f->run({});
    const auto t1 = clk::now();
    b->run({});
    const auto t2 = clk::now();
    tf = std::min(tf, std::chrono::duration<double, std::milli>(t1 - t0).count());
    tb = std::min(tb, std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  const double fl = 4.0 * double(B * H) * double(T) * double(T) * 64 * (causal ? 0.5 : 1.0);
  std::printf("attention B=%ld H=%ld T=%ld D=64 %s dropout %g, %d threads: fwd %.2f ms (%.1f GFLOP/s), bwd %.2f ms "
              "(%.1f GFLOP/s)\n",
              static_cast<long>(B), static_cast<long>(H), static_cast<long>(T), causal ? "causal" : "full", dropout,
              omp_get_max_threads(), tf, fl / tf * 1e-6, tb, 2.5 * fl / tb * 1e-6);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6) {
    time_shape(std::atoll(argv[1]), std::atoll(argv[2]), std::atoll(argv[3]), std::atoi(argv[4]) != 0,
               std::atof(argv[5]));
    return 0;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: attention_bench [B H T causal(0|1) dropout]\n");
    return 2;
  }
  for (int64_t T : {256, 1024})
    for (bool causal : {false, true}) time_shape(4, 12, T, causal, 0.0);
  return 0;
}
