// `memfit plan` states the machine the plan is for: the processor, the
// instruction set oneDNN runs (after ONEDNN_MAX_CPU_ISA), the target of
// memfit's own loops, and for bf16/fp16 runs how the convolutions and linear
// layers compute. Here checked against this process's own view of the
// machine, and with oneDNN limited to AVX2 (no bf16 compute), where the
// plan must name the fallback: f32 between conversions.
#include <gtest/gtest.h>

#include <string>

#include "cli_util.hpp"
#include "kernels/cpu/engine.hpp"

using namespace memfit;
using memfit::testing::json_at;
using memfit::testing::json_string_field;
using memfit::testing::run_cmd;

namespace {

std::string plan(const std::string& env, const std::string& args) {
  const auto r = run_cmd(env + " " + std::string(MEMFIT_BINARY) + " plan " + args);
  EXPECT_EQ(r.code, 0) << r.out;
  return r.out;
}

bool has(const std::string& out, const std::string& s) { return out.find(s) != std::string::npos; }

}  // namespace

TEST(PlanMachine, TextAndJsonNameThisMachine) {
  const auto& m = kernels::cpu::machine_info();
  const std::string out = plan("", "--precision bf16");
  EXPECT_TRUE(has(out, "  cpu: " + m.cpu_model + "; oneDNN " + m.onednn_version + " " + m.onednn_isa)) << out;
  EXPECT_TRUE(has(out, "memfit loops " + m.vector_isa)) << out;
  // The choice between native bf16 and f32 is measured in each process (the
  // two differ by ~2x on every CPU seen, so they agree), hence its reason:
  EXPECT_TRUE(has(out, m.onednn_bf16 ? " (measured faster here)\n" : " (no bf16 compute on this CPU)\n")) << out;
  EXPECT_TRUE(has(out, "bf16 convolutions and linear layers: native bf16") ||
              has(out, "bf16 convolutions and linear layers: f32 between conversions"))
      << out;

  const std::string js = plan("", "--precision bf16 --json");
  EXPECT_EQ(json_string_field(js, "cpu/onednn_isa"), m.onednn_isa) << js;
  EXPECT_EQ(json_at(js, "cpu/bf16_compute"), m.onednn_bf16) << js;
  EXPECT_EQ(json_string_field(js, "cpu/vector_isa"), m.vector_isa) << js;
}

TEST(PlanMachine, Fp32PlanNamesNoLowPrecisionPath) {
  const std::string js = plan("", "--json");
  EXPECT_TRUE(json_at(js, "cpu/model").is_string()) << js;
  EXPECT_TRUE(json_at(js, "cpu/products").is_null()) << js;
}

TEST(PlanMachine, WithoutBf16ComputeThePlanNamesTheFallback) {
  const std::string env = "ONEDNN_MAX_CPU_ISA=AVX2";
  const std::string out = plan(env, "--precision bf16");
  EXPECT_TRUE(has(out, " avx2 (no bf16 compute)")) << out;
  EXPECT_TRUE(has(out, "bf16 convolutions and linear layers: f32 between conversions (no bf16 compute on this CPU)"))
      << out;
  // Forcing native bf16 cannot make compute that oneDNN does not have.
  const std::string js = plan(env, "--precision bf16 --bf16-convs native --json");
  EXPECT_EQ(json_string_field(js, "cpu/onednn_isa"), "avx2") << js;
  EXPECT_EQ(json_at(js, "cpu/bf16_compute"), false) << js;
  EXPECT_EQ(json_string_field(js, "cpu/products"), "f32 between conversions (no bf16 compute on this CPU)") << js;
}

TEST(PlanMachine, Fp16RunsBetweenConversions) {
  const std::string out = plan("", "--precision fp16");
  EXPECT_TRUE(has(out, "fp16 convolutions and linear layers: f32 between conversions (no f16 arithmetic on the CPU)"))
      << out;
}
