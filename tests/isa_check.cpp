// Linked into the *_v3 test executables (tests/CMakeLists.txt): proves that
// the engine under test is the one built for the target the entry claims,
// and that oneDNN runs the instruction set the entry limits it to, so an
// AVX2 entry can never pass on AVX-512 code by accident.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli_util.hpp"
#include "kernels/cpu/engine.hpp"

TEST(IsaCheck, EngineBuiltForTheExpectedTarget) {
  const auto& m = memfit::kernels::cpu::machine_info();
  EXPECT_EQ(m.vector_isa, MEMFIT_EXPECT_VECTOR_ISA) << "memfit's loops were built for another target";
  EXPECT_FALSE(memfit::kernels::cpu::bf16_kernels_available()) << "an AVX2 build has no bf16 vector kernels";
  if (const char* lim = std::getenv("ONEDNN_MAX_CPU_ISA"); lim && std::string(lim) == "AVX2") {
    EXPECT_EQ(m.onednn_isa, "avx2");
    EXPECT_FALSE(m.onednn_bf16);
  }
}

// The command these entries run (MEMFIT_BINARY, for the suites that start
// it) is the x86-64-v3 one too.
TEST(IsaCheck, CommandBuiltForTheExpectedTarget) {
  const auto r = memfit::testing::run_memfit("plan --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(memfit::testing::json_string_field(r.out, "cpu/vector_isa"), MEMFIT_EXPECT_VECTOR_ISA) << r.out;
}
