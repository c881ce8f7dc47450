// test_compiler.cpp — NVRTC compiles every spec of the matrix for sm_90a; failures carry the log.
#include <doctest/doctest.h>

#include <regex>
#include <string>
#include <vector>

#include "compiler/nvrtc_compiler.hpp"
#include "families/topk/heuristics.hpp"
#include "generator/generator.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "tests/parallel.hpp"
#include "tests/spec_matrix.hpp"

using namespace nsajit;

namespace {
bool is_elf(const std::vector<char>& bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}
}  // namespace

TEST_CASE("NVRTC's version is reported") {
  const NvrtcVersion v = nvrtc_version_numbers();
  CHECK(v.major >= 12);
  CHECK(nvrtc_version() == std::to_string(v.major) + "." + std::to_string(v.minor));
}

TEST_CASE("every spec of the DeepSeek-V3.2 matrix compiles under NVRTC for sm_90a") {
  const std::vector<KernelSpec> specs = test::deepseek_v32_matrix();
  const auto outcomes = test::run_in_parallel<CompileResult>(specs.size(), [&](std::size_t i) {
    return compile_cubin(readable_name(specs[i]), render_source(specs[i]), nvrtc_options(specs[i].arch));
  });
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(readable_name(specs[i]));
    CHECK(outcomes[i].error == "");
    if (outcomes[i].error.empty()) CHECK(is_elf(outcomes[i].value.cubin));
  }
}

TEST_CASE("a compile error names the kernel, the options and carries NVRTC's log") {
  const std::string bad = "extern \"C\" __global__ void k() { undeclared_identifier_xyz = 1; }\n";
  try {
    compile_cubin("broken_kernel.sm_90a", bad, nvrtc_options({90, 'a'}));
    FAIL("compile_cubin accepted a broken source");
  } catch (const CompileError& e) {
    const std::string what = e.what();
    CHECK(what.find("broken_kernel.sm_90a") != std::string::npos);
    CHECK(what.find("--gpu-architecture=sm_90a") != std::string::npos);
    CHECK(what.find("undeclared_identifier_xyz") != std::string::npos);  // from the log
  }
}

// ptxas silently serialises every wgmma of a kernel (C7511/C7512/C7515, "Potential Performance
// Loss") when a warpgroup's register budget (setmaxnreg) is too small or an in-flight accumulator
// is touched: the kernel stays correct and gets ~15 % slower (docs/notes/sparse_mla.md).
// Spills are the same kind of silent loss. Guard the default sm_90a kernels whose register
// budgets are tight: the wgmma sparse-MLA kernels (setmaxnreg) and the top-k kernels (64 registers).
namespace {
// Every "N bytes stack frame, N bytes spill stores, N bytes spill loads" line of a ptxas -v log
// must read 0, 0, 0, and there must be one; no "Potential Performance Loss" line.
void check_ptxas_log_clean(const std::string& log) {
  static const std::regex properties(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  int lines = 0;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), properties); it != std::sregex_iterator(); ++it) {
    ++lines;
    CHECK((*it)[1] == "0");
    CHECK((*it)[2] == "0");
    CHECK((*it)[3] == "0");
  }
  CHECK(lines >= 1);
  CHECK(log.find("Potential Performance Loss") == std::string::npos);
}

CompileResult compile_verbose(const KernelSpec& spec) {
  std::vector<std::string> options = nvrtc_options(spec.arch);
  options.push_back("--ptxas-options=-v");
  // NVRTC 12.9+ caches compiled programs in the process: a hit runs no ptxas, so its log carries
  // no usage lines (a kernel another test compiled first).
  const NvrtcVersion v = nvrtc_version_numbers();
  if (v.major > 12 || (v.major == 12 && v.minor >= 9)) options.push_back("--no-cache");
  return compile_cubin(readable_name(spec), render_source(spec), options);
}
}  // namespace

TEST_CASE("tight-register kernels compile without serialised wgmma, spills or stack") {
  std::vector<KernelSpec> specs;
  for (const int h_q : {64, 128})
    for (const KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
      KernelSpec spec;
      spec.family = Family::sparse_mla_decode;
      spec.h_q = h_q;
      spec.kv_dtype = kv;
      specs.push_back(spec);
    }
  for (const int h_q : {64, 128}) {  // the seesaw schedule: two math warpgroups at 216 registers, producer 72
    KernelSpec spec;
    spec.family = Family::sparse_mla;
    spec.h_q = h_q;
    spec.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma,
                 .producer_warps = 4, .schedule = MlaSchedule::seesaw};
    specs.push_back(spec);
  }
  for (const int h_q : {8, 16}) {  // the mma.sync kernel with 8 FP8 producer warps: 128 registers a thread
    KernelSpec spec;
    spec.family = Family::sparse_mla_decode;
    spec.h_q = h_q;
    spec.kv_dtype = KvDtype::fp8_e4m3;
    spec.tile = {.threads = 512, .block_tokens = 64, .heads_per_cta = h_q, .kernel = MlaKernel::mma_sync, .producer_warps = 8};
    specs.push_back(spec);
  }
  for (const int h_q : {8, 16}) {  // the FP8 direct kernel, the default at up to 16 heads (320 threads: up to 204 registers)
    KernelSpec spec;
    spec.family = Family::sparse_mla_decode;
    spec.h_q = h_q;
    spec.kv_dtype = KvDtype::fp8_e4m3;
    specs.push_back(spec);
  }
  // The seesaw's cluster combine (the merge of O through distributed shared memory).
  for (const int h_q : {64, 128}) {
    KernelSpec spec;
    spec.family = Family::sparse_mla;
    spec.h_q = h_q;
    spec.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma,
                 .producer_warps = 4, .schedule = MlaSchedule::seesaw, .combine = MlaCombine::cluster};
    specs.push_back(spec);
  }
  for (const int threads : {256, 512, 1024})
    for (const int page_size : {-1, 0, 1, 64}) {  // -1: sorted, 0: plain top-k, else fused
      KernelSpec spec;
      spec.family = Family::topk;
      spec.tile.threads = threads;
      spec.sorted = page_size < 0;
      if (page_size > 0) {
        spec.fused_transform = true;
        spec.page_size = page_size;
      }
      specs.push_back(spec);
    }
  for (KernelSpec& spec : specs) {
    spec.arch = {90, 'a'};
    const bool default_tile = spec.tile.threads == 0;
    spec = with_default_tile(spec);
    // 64 heads per CTA: the wgmma kernel (FP8: its 512-thread form); fewer (FP8): the direct kernel
    if (spec.family == Family::sparse_mla_decode && default_tile)
      REQUIRE(spec.tile.threads == (spec.h_q < 64 ? 320 : spec.kv_dtype == KvDtype::bf16 ? 384 : 512));
  }
  const auto outcomes =
      test::run_in_parallel<CompileResult>(specs.size(), [&](std::size_t i) { return compile_verbose(specs[i]); });
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(readable_name(specs[i]) << "\n" << outcomes[i].value.log);
    REQUIRE(outcomes[i].error == "");
    check_ptxas_log_clean(outcomes[i].value.log);
  }
}

// The top-k plans count on several CTAs sharing an SM (families/topk/heuristics.cpp): four dense
// 256-thread CTAs, three speculative 256-thread CTAs over several waves (four with bf16 scores),
// two 512-thread CTAs (speculative, or keeping the slice). Each needs its dynamic shared memory, the kernel's static
// shared memory (ptxas) and 1 KB the driver reserves to fit the SM's 233,472 bytes, and its
// registers the 65,536 of the register file: a static part that grows would silently halve them.
TEST_CASE("top-k plans' CTAs per SM fit an sm_90 SM (the plan's dynamic and ptxas' static shared memory, registers)") {
  using detail::plan_topk_launch;
  using detail::TopkPlanConstraints;
  struct Case {
    const char* what;
    int rows, width, ctas_per_sm;
    TopkPlanConstraints constraints;
    bool bf16;
  };
  const std::vector<Case> cases = {
      {"dense rows", 4096, 8192, 4, {}, false},
      {"dense rows, bf16", 4096, 8192, 4, {}, true},
      {"speculative, 512 threads, several waves", 4096, 32768, 2, {}, false},
      {"speculative, 512 threads, several waves, bf16", 4096, 32768, 2, {.ctas_per_row = 1, .threads = 512}, true},
      {"speculative, 256 threads, several waves", 4096, 32768, 3, {.ctas_per_row = 1, .threads = 256}, false},
      {"speculative, 256 threads, several waves, bf16 (the plan's)", 4096, 32768, 4, {}, true},
      {"the slice kept, 512 threads, several waves", 4096, 32768, 2, {.ctas_per_row = 1, .speculate = 0}, false},
  };
  std::vector<KernelSpec> specs;
  std::vector<detail::TopkLaunchPlan> plans;
  for (const Case& c : cases) {
    plans.push_back(
        plan_topk_launch(c.rows, c.width, 2048, c.bf16 ? ScoreDtype::bf16 : ScoreDtype::fp32, 132, 16, c.constraints));
    KernelSpec spec;
    spec.family = Family::topk;
    spec.arch = {90, 'a'};
    spec.score_dtype = c.bf16 ? ScoreDtype::bf16 : ScoreDtype::fp32;
    spec.tile = detail::topk_tile(plans.back());
    specs.push_back(with_default_tile(spec));
  }
  const auto outcomes =
      test::run_in_parallel<CompileResult>(specs.size(), [&](std::size_t i) { return compile_verbose(specs[i]); });
  static const std::regex usage(R"(Used (\d+) registers.* (\d+) bytes smem)");
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    INFO(c.what << ": " << readable_name(specs[i]) << ", " << detail::to_string(plans[i]) << "\n" << outcomes[i].value.log);
    REQUIRE(outcomes[i].error == "");
    std::smatch m;
    REQUIRE(std::regex_search(outcomes[i].value.log, m, usage));
    const long long registers = std::stoll(m[1]), static_smem = std::stoll(m[2]);
    const long long per_cta = (long long)plans[i].dynamic_smem + static_smem + 1024;
    CHECK(c.ctas_per_sm * per_cta <= 233472);
    CHECK(c.ctas_per_sm * registers * plans[i].threads <= 65536);
  }
}
