// test_topk_gpu.cpp — nsajit::topk (§2, plain, fused with §1, sorted) on the GPU against the CPU
// reference (full stable sort), plus host-side argument checks and compile checks (those need no
// GPU). The unsorted output is compared byte for byte with reference::topk_index_order (which
// implies the same index set, the same value multiset and the tie rule), sorted output with
// reference::topk, fused output with reference::apply_transform of those.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/index_transform.hpp"
#include "reference/topk.hpp"
#include "compiler/nvrtc_compiler.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime.hpp"
#include "families/topk/heuristics.hpp"
#include "families/topk/tuning.hpp"
#include "templates/kernel_params.h"
#include "tests/argument_cases.hpp"
#include "tests/gpu_support.hpp"
#include "tests/parallel.hpp"

namespace ref = nsajit::reference;
using nsajit::IndexMode;
using nsajit::ScoreDtype;
using nsajit::test::DeviceBuffer;
using I = std::vector<std::int32_t>;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

template <class T>
std::unique_ptr<DeviceBuffer<T>> device_or_null(const std::vector<T>& v) {
  return v.empty() ? nullptr : std::make_unique<DeviceBuffer<T>>(v);
}

// Scoped plan constraints of this file's launches and plans (tests of shape independence): the
// tests pass them explicitly to nsajit::detail::topk and plan_topk_launch.
struct LaunchOverride {
  explicit LaunchOverride(nsajit::detail::TopkPlanConstraints o) : saved(current) { current = o; }
  ~LaunchOverride() { current = saved; }
  nsajit::detail::TopkPlanConstraints saved;
  static inline nsajit::detail::TopkPlanConstraints current{};
};

nsajit::detail::TopkLaunchPlan plan_topk_launch(int rows, int width, int topk, nsajit::ScoreDtype score_dtype,
                                                int sm_count, int max_cluster = 16) {
  return nsajit::detail::plan_topk_launch(rows, width, topk, score_dtype, sm_count, max_cluster,
                                          LaunchOverride::current);
}

using Algorithm = nsajit::TopkAlgorithm;
bool speculates(const nsajit::detail::TopkLaunchPlan& q) { return q.algorithm == Algorithm::speculative_sweep; }
bool keeps_registers(const nsajit::detail::TopkLaunchPlan& q) { return q.algorithm == Algorithm::dense_registers; }
bool lists_over_cluster(const nsajit::detail::TopkLaunchPlan& q) { return q.algorithm == Algorithm::cluster_lists; }

// Device copies of a problem's inputs (and of a transform's), and a poisoned output.
// bf16: the scores (already bf16 values) go up as bf16 bits.
struct DeviceTopk {
  explicit DeviceTopk(const ref::TopkProblem& p, const ref::TopkTransform* t = nullptr, bool sorted = false,
                      nsajit::ScoreDtype dtype = nsajit::ScoreDtype::fp32)
      : scores(p.scores.empty() ? std::vector<float>{0.f} : p.scores),
        lengths(p.lengths),
        row_starts(device_or_null(p.row_starts)),
        out(std::size_t(p.rows) * p.topk) {
    args.scores = scores.get();
    if (dtype == nsajit::ScoreDtype::bf16) {
      scores_bf16 = std::make_unique<DeviceBuffer<std::uint16_t>>(
          ref::to_bf16(p.scores.empty() ? std::vector<float>{0.f} : p.scores));
      args.scores = scores_bf16->get();
      args.score_dtype = dtype;
    }
    args.score_row_stride = p.score_row_stride;
    args.lengths = lengths.get();
    args.row_starts = row_starts ? row_starts->get() : nullptr;
    args.out = out.get();
    args.rows = p.rows;
    args.width = p.width;
    args.topk = p.topk;
    args.sorted = sorted;
    if (t) {
      page_table = device_or_null(t->page_table);
      cu_seqlens_q = device_or_null(t->cu_seqlens_q);
      offsets = device_or_null(t->offsets);
      args.fused_transform = true;
      args.mode = t->mode;
      args.page_table = page_table ? page_table->get() : nullptr;
      args.page_table_width = t->page_table_width;
      args.page_table_row_stride = t->page_table_row_stride;
      args.page_size = t->page_size;
      args.cu_seqlens_q = cu_seqlens_q ? cu_seqlens_q->get() : nullptr;
      args.num_requests = t->num_requests;
      args.offsets = offsets ? offsets->get() : nullptr;
      args.next_n = t->next_n;
    }
  }
  I run() {
    out.poison();
    nsajit::detail::topk(args, LaunchOverride::current, nullptr, kernel_loader);
    return out.download();
  }
  // nullptr: the product's kernel; a ClusterFallbackProbe or ZeroPathProbe sets its probe build.
  static inline nsajit::detail::TopkKernelLoader kernel_loader = nullptr;
  DeviceBuffer<float> scores;
  std::unique_ptr<DeviceBuffer<std::uint16_t>> scores_bf16;
  DeviceBuffer<std::int32_t> lengths;
  std::unique_ptr<DeviceBuffer<std::int32_t>> row_starts, page_table, cu_seqlens_q, offsets;
  DeviceBuffer<std::int32_t> out;
  nsajit::TopkArgs args;
};

// The product's source of `spec` with `wrapper` inserted before its one kernel entry, whose body
// must call each of `called` (so that the wrapper's macros replace calls the kernel makes).
std::string probe_source(const nsajit::KernelSpec& spec, const std::string& wrapper,
                         std::initializer_list<const char*> called) {
  std::string source = nsajit::generate_source(spec);
  const std::string entry = "extern \"C\" __global__";
  const std::size_t at = source.find(entry);
  REQUIRE(at != std::string::npos);
  REQUIRE(source.find(entry, at + 1) == std::string::npos);
  for (const char* call : called) REQUIRE_MESSAGE(source.find(call, at) != std::string::npos, call);
  source.insert(at, wrapper);
  return source;
}

// A probe build of the top-k kernel (the product's source, altered by a test) as DeviceTopk's
// kernel_loader returns it: compiled and loaded once per probe and spec (these tests use one context).
const nsajit::LoadedKernel& probe_kernel(const char* name, const nsajit::KernelSpec& spec,
                                         const std::function<std::string()>& source) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<nsajit::LoadedKernel>> loaded;
  std::lock_guard lock(mutex);
  std::unique_ptr<nsajit::LoadedKernel>& k = loaded[std::string(name) + " " + nsajit::canonical_text(spec)];
  if (k) return *k;
  const nsajit::CompileResult r = nsajit::compile_cubin(name, source(), nsajit::nvrtc_options(spec.arch));
  CUmodule module = nullptr;
  NSAJIT_CU(cuModuleLoadData, &module, r.cubin.data());
  auto loaded_kernel = std::make_unique<nsajit::LoadedKernel>();
  NSAJIT_CU(cuModuleGetFunction, &loaded_kernel->function, module, "nsajit_topk");
  NSAJIT_CU(cuFuncSetAttribute, loaded_kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            int(kTopkMaxDynamicSmem));
  k = std::move(loaded_kernel);
  return *k;
}

// The probe source of a cluster-lists spec: the product's source, its cluster selection wrapped so
// that a row whose cluster lists cannot hold the selection writes -2 to its first slot instead of
// taking the exact path, so a test sees which path produced each row. Only tests compile it.
std::string cluster_fallback_probe_source(const nsajit::KernelSpec& spec) {
  static const std::string kWrapper = R"(
NSAJIT_DEVICE bool topk_cluster_select_or_mark(int C, uint32_t rank, const TopkClusterLists& l, int warp_n,
                                               const TopkSlice& s, int b, const u32x4* keys, int round_begin,
                                               int round_end, const KvSlotRow& t, bool apply, int* out,
                                               TopkShared& sh) {
  if (topk_cluster_select(C, rank, l, warp_n, s, b, keys, round_begin, round_end, t, apply, out, sh)) return true;
  topk_cluster_sync();  // no CTA leaves while a copy may still read its outbox
  if (rank == 0 && threadIdx.x == 0) out[0] = -2;
  return true;
}
#define topk_cluster_select topk_cluster_select_or_mark
)";
  return probe_source(spec, kWrapper, {"topk_cluster_select("});
}

// The probe build of a cluster-lists spec (above).
const nsajit::LoadedKernel& load_cluster_fallback_probe(const nsajit::KernelSpec& spec) {
  return probe_kernel("topk_cluster_fallback_probe", spec, [&] { return cluster_fallback_probe_source(spec); });
}

// While alive, DeviceTopk loads its kernels through `loader` (a probe build, probe_kernel).
struct ProbeLoader {
  explicit ProbeLoader(nsajit::detail::TopkKernelLoader loader) { DeviceTopk::kernel_loader = loader; }
  ~ProbeLoader() { DeviceTopk::kernel_loader = nullptr; }
  ProbeLoader(const ProbeLoader&) = delete;
  ProbeLoader& operator=(const ProbeLoader&) = delete;
};

// While alive, DeviceTopk runs the probe build (above).
struct ClusterFallbackProbe : ProbeLoader {
  ClusterFallbackProbe() : ProbeLoader(&load_cluster_fallback_probe) {}
};

// The dense rows' path forced as production lays it out: nothing kept in shared memory, so the
// keys' exchange from word 0 overlaps hist0 and the staged output (keeping the slice would move
// hist0 past the exchange).
const nsajit::detail::TopkPlanConstraints kDenseRows{
    .ctas_per_row = 1, .threads = 256, .force_streaming = true, .dense_registers = 1};

// First differing row, with the reference's explanation, or "".
std::string explain(const ref::TopkProblem& p, const I& got, const I& expected) {
  if (got == expected) return "";
  const std::string set = ref::topk_mismatch(p, got, ref::topk(p));
  for (int r = 0; r < p.rows; ++r) {
    const auto a = got.begin() + std::ptrdiff_t(r) * p.topk;
    const auto m = std::mismatch(a, a + p.topk, expected.begin() + std::ptrdiff_t(r) * p.topk);
    if (m.first != a + p.topk)
      return "row " + std::to_string(r) + " (len " + std::to_string(ref::length_of(p, r)) + ") slot " +
             std::to_string(m.first - a) + ": got " + std::to_string(*m.first) + ", expected " +
             std::to_string(*m.second) + (set.empty() ? "; same index sets (order differs)" : "; " + set);
  }
  return "?";
}

// Runs the plain top-k and checks it byte for byte against the kernel-order reference.
I check_topk(const ref::TopkProblem& p, nsajit::ScoreDtype dtype = nsajit::ScoreDtype::fp32) {
  const I got = DeviceTopk(p, nullptr, false, dtype).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
  return got;
}

// rows x width scores from draw() (also the padding of rows of `stride` > width elements: an odd
// stride leaves rows unaligned to 16 bytes), every length = width.
template <class Draw>
ref::TopkProblem make_problem(int rows, int width, int topk, Draw draw, std::int64_t stride = 0) {
  ref::TopkProblem p;
  p.rows = rows;
  p.width = width;
  p.topk = topk;
  p.score_row_stride = stride;
  p.scores.resize(std::size_t(rows) * std::size_t(stride > 0 ? stride : width));
  for (float& s : p.scores) s = draw();
  p.lengths.assign(rows, width);
  return p;
}

}  // namespace

// --- compile checks (no GPU needed) -----------------------------------------------------------------

TEST_CASE("topk specs: plain, fused (every mode, page sizes, MTP), sorted, every thread count and algorithm compile for sm_90a") {
  std::vector<nsajit::KernelSpec> specs;
  for (int topk : {64, 512, 1024, 1984, 2048, 2112, 4096}) {
    specs.push_back({.family = nsajit::Family::topk, .topk = topk});
    specs.push_back({.family = nsajit::Family::topk, .topk = topk, .sorted = true});
  }
  using S = nsajit::KernelSpec;
  specs.push_back(S{.family = nsajit::Family::topk, .fused_transform = true});
  specs.push_back(S{.family = nsajit::Family::topk, .page_size = 64, .fused_transform = true});
  specs.push_back(S{.family = nsajit::Family::topk, .page_size = 64, .next_n = 2, .fused_transform = true});
  specs.push_back(S{.family = nsajit::Family::topk, .page_size = 64, .mode = IndexMode::prefill, .fused_transform = true});
  specs.push_back(S{.family = nsajit::Family::topk, .mode = IndexMode::ragged, .fused_transform = true});
  specs.push_back(S{.family = nsajit::Family::topk, .topk = 512, .page_size = 3, .mode = IndexMode::prefill,
                    .fused_transform = true, .sorted = true});
  for (int threads : {128, 256, 1024}) {
    S s{.family = nsajit::Family::topk};
    s.tile.threads = threads;
    specs.push_back(s);
  }
  for (int threads : {256, 512, 1024}) {  // bf16 scores: plain, fused, sorted
    S s{.family = nsajit::Family::topk, .score_dtype = nsajit::ScoreDtype::bf16};
    s.tile.threads = threads;
    specs.push_back(s);
  }
  specs.push_back(S{.family = nsajit::Family::topk, .page_size = 64, .next_n = 2, .fused_transform = true,
                    .sorted = true, .score_dtype = nsajit::ScoreDtype::bf16});
  // Every algorithm's kernel, plain fp32 and fused over bf16 scores.
  using A = nsajit::TopkAlgorithm;
  for (const auto& [threads, algorithm] : {std::pair{256, A::dense_registers}, std::pair{512, A::speculative_sweep},
                                           std::pair{512, A::cluster_sweeps}, std::pair{1024, A::cluster_lists}}) {
    specs.push_back(S{.family = nsajit::Family::topk, .tile = {.threads = threads, .algorithm = algorithm}});
    specs.push_back(S{.family = nsajit::Family::topk, .page_size = 64, .fused_transform = true,
                      .score_dtype = nsajit::ScoreDtype::bf16, .tile = {.threads = threads, .algorithm = algorithm}});
  }
  const auto outcomes = nsajit::test::run_in_parallel<nsajit::KernelRecord>(
      specs.size(), [&](std::size_t i) { return nsajit::precompile(specs[i]); });
  for (std::size_t i = 0; i < specs.size(); ++i) {
    INFO(nsajit::readable_name(specs[i]));
    CHECK(outcomes[i].error == "");
  }
  CHECK(nsajit::readable_name(S{.family = nsajit::Family::topk, .page_size = 64, .next_n = 2,
                                .fused_transform = true, .sorted = true}) ==
        "topk.topk2048.fused.decode.ps64.n2.sorted.sm_90a");
  // A plain top-k spec must keep the transform fields at their defaults.
  CHECK_THROWS_AS(nsajit::validate(S{.family = nsajit::Family::topk, .page_size = 64}), nsajit::InvalidArgument);
  CHECK_THROWS_AS(nsajit::validate(S{.family = nsajit::Family::topk, .page_size = 64,
                                     .mode = IndexMode::ragged, .fused_transform = true}),
                  nsajit::InvalidArgument);
}

TEST_CASE("topk launch plan: bf16 speculative plans keep each warp's segment under 2^16 positions") {
  // A bf16 list entry holds its score's offset in the warp's segment in its low 16 bits
  // (templates/topk_bf16.cuh): up to 128 positions a round and 8 for the first pair's phase.
  int speculative = 0, refused = 0;
  for (const int rows : {1, 8, 64, 132, 133, 4096})
    for (const int width : {24576, 32768, 65536, 131072, 1 << 19, 1 << 20})
      for (const int threads : {0, 256, 512, 1024}) {
        const nsajit::detail::TopkPlanConstraints c{.ctas_per_row = 1, .threads = threads};
        nsajit::detail::TopkLaunchPlan q, f;
        try {
          q = nsajit::detail::plan_topk_launch(rows, width, 2048, ScoreDtype::bf16, 132, 16, c);
          f = nsajit::detail::plan_topk_launch(rows, width, 2048, ScoreDtype::fp32, 132, 16, c);
        } catch (const std::invalid_argument&) {
          continue;  // one CTA's bitmaps do not fit this width
        }
        INFO(rows << " x " << width << " at " << threads << " threads: " << nsajit::detail::to_string(q));
        if (speculates(q)) {
          ++speculative;
          const long long rounds = ((q.slice + 6LL) / 4 + 31) / 32, warps = q.threads / 32;
          CHECK(128 * ((rounds + warps - 1) / warps) + 7 <= 65535);
        } else if (speculates(f)) {
          ++refused;
          CHECK(width * 1LL / q.threads * 32 > 65536 - 256);  // only where a segment is that long
        }
      }
  CHECK(speculative >= 20);
  CHECK(refused >= 1);  // 2^19 positions at 256 threads: 65,536 a warp
}

TEST_CASE("topk launch plan: regimes by width and rows") {
  CHECK(plan_topk_launch(4096, 2048, 2048, ScoreDtype::fp32, 132).slice == 0);  // no row needs a selection
  auto p = plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132);
  CHECK(p.cluster_size == 16);  // one long row: a 16-CTA cluster of 8K slices
  CHECK(p.threads == 512);       // 512 threads: cheaper barriers (docs/design/topk.md)
  CHECK(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132).threads == 1024);  // 8-CTA clusters: 1024
  CHECK(p.resident_vecs == p.slice / 4 + 1);  // kept whole
  {
    // Many short rows: 256-thread CTAs keeping nothing, four rows per SM, the exact path.
    const auto q = plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132);
    CHECK(q.cluster_size == 1);
    CHECK_FALSE(speculates(q));
    CHECK(q.threads == 256);
    CHECK(q.resident_vecs == 0);
    CHECK(q.dynamic_smem <= 56u * 1024u);
  }
  {
    // Many rows of 32K: two 512-thread CTAs per SM, speculative, keeping nothing.
    const auto q = plan_topk_launch(4096, 32768, 2048, ScoreDtype::fp32, 132);
    CHECK(q.cluster_size == 1);
    CHECK(q.threads == 512);
    CHECK(speculates(q));
    CHECK(q.resident_vecs == 0);
    CHECK(q.dynamic_smem <= 102400u);
    // bf16 scores: four 256-thread CTAs per SM (42 KB of one-word list entries or of the exact
    // fallback with 8 slots a thread, 12.6 KB static each, 1 KB reserved).
    const auto b = plan_topk_launch(4096, 32768, 2048, ScoreDtype::bf16, 132);
    CHECK(b.cluster_size == 1);
    CHECK(b.threads == 256);
    CHECK(speculates(b));
    CHECK(b.resident_vecs == 0);
    CHECK(b.dynamic_smem == 43008u);
    CHECK(b.slots_per_thread == 8);
    CHECK(b.cand_offset == b.slots_offset + 2048);
    CHECK(b.list_offset + b.list_words >= b.bitmap_offset + 2 * b.bitmap_words);
    CHECK(nsajit::detail::topk_list_capacity(b, ScoreDtype::bf16) == 832);
    // The same shape at 256 threads with fp32 scores: three CTAs (two-word entries, 720 a warp).
    const auto f = nsajit::detail::plan_topk_launch(4096, 32768, 2048, ScoreDtype::fp32, 132, 16, {.threads = 256});
    CHECK(f.dynamic_smem == 62464u);
    CHECK(f.slots_per_thread == 16);
    CHECK(nsajit::detail::topk_list_capacity(f, ScoreDtype::fp32) == 720);
    // Not where the rows fit one wave, nor for short slices, nor past 32K (the one-CTA plan's
    // 256-thread lists would overflow): the fp32 plan.
    for (const auto& [rows, width] : {std::pair{64, 32768}, std::pair{4096, 8192}, std::pair{4096, 16384},
                                      std::pair{4096, 40000}, std::pair{4096, 65536}})
      CHECK(nsajit::detail::same_topk_launch(plan_topk_launch(rows, width, 2048, ScoreDtype::bf16, 132),
                                             plan_topk_launch(rows, width, 2048, ScoreDtype::fp32, 132)));
  }
  {
    // 64 rows of 65536 (two 32K slices each would take 2 CTAs a row on the exact cluster path):
    // one CTA a row, speculative, 1024 threads (half the SMs, yet faster: docs/design/topk.md).
    const auto q = plan_topk_launch(64, 65536, 2048, ScoreDtype::fp32, 132);
    CHECK(q.cluster_size == 1);
    CHECK(speculates(q));
    CHECK(q.threads == 1024);
    CHECK_FALSE(q.prefetch_row);
    CHECK(plan_topk_launch(64, 131072, 2048, ScoreDtype::fp32, 132).cluster_size == 1);
    // Rows that cannot speculate (topk 4096: slices under 12 topk) keep the 2-CTA cluster, as do
    // many rows whose lists would hold under 3 topk (512 threads, 64 KB: 6144 entries).
    CHECK(plan_topk_launch(64, 40000, 4096, ScoreDtype::fp32, 132).cluster_size == 2);
    CHECK(plan_topk_launch(4096, 57344, 4096, ScoreDtype::fp32, 132).cluster_size == 2);
    CHECK(plan_topk_launch(4096, 65536, 2560, ScoreDtype::fp32, 132).cluster_size == 2);
    CHECK(plan_topk_launch(64, 65536, 4096, ScoreDtype::fp32, 132).cluster_size == 1);  // one wave: 128 KB of lists
    // A forced cluster size is kept.
    LaunchOverride two({.ctas_per_row = 2});
    CHECK(plan_topk_launch(64, 65536, 2048, ScoreDtype::fp32, 132).algorithm == Algorithm::cluster_sweeps);
  }
  {
    // 128 rows fill one wave at one CTA each (4 CTAs each would take 4 waves): 1024 threads,
    // speculative, keeping nothing.
    const auto q = plan_topk_launch(128, 131072, 2048, ScoreDtype::fp32, 132);
    CHECK(q.cluster_size == 1);
    CHECK(q.threads == 1024);
    CHECK(speculates(q));
    CHECK(q.resident_vecs == 0);
  }
  CHECK(plan_topk_launch(133, 131072, 2048, ScoreDtype::fp32, 132).cluster_size == 4);  // more rows than SMs
  CHECK(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132).cluster_size == 8);
  p = plan_topk_launch(1, 1 << 20, 2048, ScoreDtype::fp32, 132);
  CHECK(p.cluster_size == 16);
  CHECK(plan_topk_launch(2, 1 << 20, 2048, ScoreDtype::fp32, 132).cluster_size == 8);
  // A 16-CTA cluster does not fit.
  CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132, 8).cluster_size == 8);
  {
    LaunchOverride bad({.ctas_per_row = 3});  // not a cluster size
    CHECK_THROWS_AS(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132), std::invalid_argument);
  }
  {
    LaunchOverride too_few({.ctas_per_row = 1, .force_streaming = true});  // bitmaps of 2^21 positions
    CHECK_THROWS_AS(plan_topk_launch(1, 1 << 21, 2048, ScoreDtype::fp32, 132), std::invalid_argument);
    CHECK_NOTHROW(plan_topk_launch(1, 1 << 19, 2048, ScoreDtype::fp32, 132));
  }
  CHECK(p.resident_vecs > 0);  // 65536-long slices at 1024 threads: partly kept, partly re-read
  CHECK(4 * p.resident_vecs < p.slice);
  {
    LaunchOverride streaming({.force_streaming = true});
    CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).resident_vecs == 0);
  }
  {
    const auto q = plan_topk_launch(4096, 65536, 2048, ScoreDtype::fp32, 132);  // one CTA a row, speculative, two an SM
    CHECK(q.cluster_size == 1);
    CHECK(speculates(q));
    CHECK(q.threads == 512);
    LaunchOverride two({.ctas_per_row = 2});  // 2 CTAs of 32768 positions: kept whole
    const auto r = plan_topk_launch(4096, 65536, 2048, ScoreDtype::fp32, 132);
    CHECK(r.cluster_size == 2);
    CHECK(r.resident_vecs == r.slice / 4 + 1);
  }
  CHECK(p.slice % 4 == 0);
  // Many short rows: keys in registers at 256 threads, one CTA per row; the tests' override
  // reaches the path up to slices of 9212 positions and no further.
  CHECK(keeps_registers(plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132)));
  CHECK(!speculates(plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132)));
  CHECK(!keeps_registers(plan_topk_launch(8, 8192, 2048, ScoreDtype::fp32, 132)));
  CHECK(!keeps_registers(plan_topk_launch(4096, 32768, 2048, ScoreDtype::fp32, 132)));
  {  // as planned, nothing is kept: the keys' exchange from word 0 overlaps hist0
    const auto planned = plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132);
    CHECK(planned.hist_offset == 0);
    CHECK(planned.dynamic_smem >= 4u * 4 * NSAJIT_TOPK_DENSE_SMEM_VECS);
  }
  {
    LaunchOverride dense({.ctas_per_row = 1, .threads = 256, .dense_registers = 1});
    CHECK(keeps_registers(plan_topk_launch(6, 9212, 4096, ScoreDtype::fp32, 132)));
    CHECK(keeps_registers(plan_topk_launch(6, 9212, 512, ScoreDtype::fp32, 132)));
    CHECK(!speculates(plan_topk_launch(6, 9212, 512, ScoreDtype::fp32, 132)));
    CHECK(!keeps_registers(plan_topk_launch(6, 9213, 2048, ScoreDtype::fp32, 132)));
  }
  {  // the GPU tests' forced path lays shared memory out as production does
    LaunchOverride dense(kDenseRows);
    const auto forced = plan_topk_launch(6, 9212, 2048, ScoreDtype::fp32, 132);
    CHECK(keeps_registers(forced));
    CHECK(forced.hist_offset == 0);
    CHECK(forced.dynamic_smem >= 4u * 4 * NSAJIT_TOPK_DENSE_SMEM_VECS);
  }
  // The slice-prefetch regimes of docs/design/topk.md, and its override.
  CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  CHECK(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  CHECK(!plan_topk_launch(64, 65536, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  CHECK(!plan_topk_launch(128, 131072, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  CHECK(!plan_topk_launch(8, 1 << 22, 2048, ScoreDtype::fp32, 132).prefetch_slice);  // 128 MB of scores: more than L2
  {
    LaunchOverride off({.prefetch_slice = 0});
    CHECK(!plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  }
  {
    LaunchOverride on({.prefetch_slice = 1});
    CHECK(plan_topk_launch(64, 65536, 2048, ScoreDtype::fp32, 132).prefetch_slice);
  }
  // The shared-memory layout fits the family's dynamic limit and keeps its parts apart.
  for (const int rows : {1, 8, 64, 4096}) {
    for (const int width : {4097, 9000, 32768, 65536, 131072, 1 << 20, 1 << 22}) {
      const auto q = plan_topk_launch(rows, width, 2048, ScoreDtype::fp32, 132);
      INFO("rows " << rows << " width " << width);
      CHECK(q.dynamic_smem <= 215040u);
      CHECK(q.cand_capacity >= 2048);
      CHECK(q.slots_offset == q.hist_offset + 4096);
      CHECK(q.cand_offset == q.slots_offset + 4096);
      CHECK(q.overflow_warp_offset == q.cand_offset + (q.cluster_size > 1 ? q.cand_capacity : 0));
      CHECK(q.bitmap_offset == q.overflow_warp_offset + (q.cand_capacity + 1) / 2);
      CHECK(q.bitmap_words >= 4 * ((q.slice / 4 + 1 + 31) / 32));  // a bit per position, whole rounds
      CHECK(q.dynamic_smem >= 4u * unsigned(q.bitmap_offset + 2 * q.bitmap_words));
      CHECK(q.slots_per_thread * q.threads <= 4096);
      CHECK(q.hist_offset == 4 * q.resident_vecs);
      CHECK(q.resident_vecs <= q.slice / 4 + 1);
      if (q.threads < 1024 && rows <= 132) CHECK((q.resident_vecs == 0 || q.resident_vecs == q.slice / 4 + 1));
      if (q.threads == 512 && rows > 132 && q.cluster_size == 1) CHECK(q.dynamic_smem <= 102400u);
      // One CTA per row of long slices speculates; its lists start at the slots and cover at least
      // what follows them (the sample's histograms first), never the kept keys or hist0.
      CHECK(speculates(q) == (q.cluster_size == 1 && q.slice >= 12 * 2048));
      CHECK(q.prefetch_row == (speculates(q) && rows > 132));
      // The slice prefetch only for a handful of rows in one wave of 8- or 16-CTA clusters whose
      // scores are a small part of L2 (never for the 2-CTA or multi-wave plans).
      if (keeps_registers(q)) CHECK((q.threads == 256 && q.cluster_size == 1 && q.slice <= 4 * (256 * 9 - 1)));
      if (q.prefetch_slice) {
        CHECK(q.cluster_size >= 8);
        CHECK(2LL * rows * q.cluster_size <= 132);
        CHECK(4LL * rows * width <= (16LL << 20));
      }
      // Cluster lists: only over a cluster at >= 512 threads with the whole slice kept, after
      // every part of the exact path, 16-byte aligned, within the dynamic limit.
      if (lists_over_cluster(q)) {
        CHECK(q.cluster_size > 1);
        CHECK(q.threads >= 512);
        CHECK(q.resident_vecs == q.slice / 4 + 1);
        CHECK(q.cluster_list_offset >= q.bitmap_offset + 2 * q.bitmap_words);
        CHECK(q.cluster_list_offset % 4 == 0);
        CHECK(q.cluster_list_capacity % 4 == 0);
        CHECK(q.cluster_list_capacity >= q.cluster_list_rank);
        CHECK(q.threads >= 32 * q.cluster_size);  // a warp or more reads each list
        const int message = NSAJIT_TOPK_MSG_KEYS + q.cluster_list_capacity;  // header, 32 bin counts, keys
        CHECK(NSAJIT_TOPK_MSG_KEYS % 4 == 0);
        CHECK(q.cluster_warp_capacity >= 64);
        CHECK(q.cluster_inbox_offset == q.cluster_list_offset + message + 2 * q.threads / 32 * q.cluster_warp_capacity);
        CHECK(q.cluster_inbox_offset % 4 == 0);
        CHECK(4u * unsigned(q.cluster_inbox_offset + q.cluster_size * message) <= q.dynamic_smem);
      }
      if (speculates(q)) {
        CHECK(q.list_offset == q.slots_offset);
        CHECK((q.hist_offset % 4 == 0 && q.list_offset % 4 == 0));  // the prologue's 16-byte zeroing stores
        CHECK(q.list_offset + q.list_words >= q.bitmap_offset + 2 * q.bitmap_words);
        CHECK(q.list_words >= 8192);
        CHECK(4u * unsigned(q.list_offset + q.list_words) <= q.dynamic_smem);
      }
    }
  }
  // Many short slices keep four 256-thread CTAs per SM at any topk: they do not speculate even
  // where their slices are 12 topk long (the lists would take 61 KB).
  for (const int width : {4097, 8192}) {
    for (const int small_topk : {64, 512, 640}) {
      INFO("width " << width << " topk " << small_topk);
      const auto m = plan_topk_launch(4096, width, small_topk, ScoreDtype::fp32, 132);
      CHECK(m.threads == 256);
      CHECK_FALSE(speculates(m));
      CHECK(m.dynamic_smem <= 56u * 1024u);
    }
  }
  {
    LaunchOverride exact({.speculate = 0});
    CHECK_FALSE(speculates(plan_topk_launch(4096, 32768, 2048, ScoreDtype::fp32, 132)));
    CHECK_FALSE(lists_over_cluster(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132)));
  }
  // The cluster lists where the single long rows run (1 and 8 rows of 131072 at 16 and 8 CTAs,
  // every topk), not where they do not fit beside the kept 32K slices (64 rows of 65536).
  for (const int topk : {64, 512, 2048, 4096}) {
    INFO("topk " << topk);
    CHECK(lists_over_cluster(plan_topk_launch(1, 131072, topk, ScoreDtype::fp32, 132)));
    CHECK(lists_over_cluster(plan_topk_launch(8, 131072, topk, ScoreDtype::fp32, 132)));
  }
  CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).cluster_list_rank == 176);
  CHECK_FALSE(lists_over_cluster(plan_topk_launch(64, 65536, 2048, ScoreDtype::fp32, 132)));
  CHECK_FALSE(lists_over_cluster(plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132)));
  // A demanded algorithm: taken where the shape allows it, else an error naming it and the plan.
  {
    LaunchOverride exact({.algorithm = Algorithm::exact_sweeps});
    CHECK(plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132).algorithm == Algorithm::exact_sweeps);
    // A cluster's row.
    CHECK_THROWS_AS(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132), std::invalid_argument);
  }
  {
    LaunchOverride exact({.algorithm = Algorithm::cluster_sweeps});
    CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).algorithm == Algorithm::cluster_sweeps);
    CHECK(plan_topk_launch(1, 131072, 2048, ScoreDtype::fp32, 132).cluster_size == 16);
    CHECK_THROWS_AS(plan_topk_launch(4096, 8192, 2048, ScoreDtype::fp32, 132), std::invalid_argument);  // one CTA a row
  }
  {
    LaunchOverride lists({.algorithm = Algorithm::cluster_lists});
    CHECK(lists_over_cluster(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132)));
    try {
      plan_topk_launch(4096, 32768, 2048, ScoreDtype::fp32, 132);
      FAIL("one CTA per row took cluster_lists");
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      CHECK(what.find("algorithm = cluster_lists") != std::string::npos);
      CHECK(what.find("algorithm=speculative_sweep cluster_size=1") != std::string::npos);
    }
  }
  {
    LaunchOverride spec({.ctas_per_row = 8, .algorithm = Algorithm::speculative_sweep});
    CHECK_THROWS_AS(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132), std::invalid_argument);
  }
  {
    LaunchOverride dense({.ctas_per_row = 1, .threads = 256, .algorithm = Algorithm::dense_registers});
    CHECK(keeps_registers(plan_topk_launch(6, 9212, 2048, ScoreDtype::fp32, 132)));
    CHECK_THROWS_AS(plan_topk_launch(6, 9213, 2048, ScoreDtype::fp32, 132), std::invalid_argument);
  }
  for (const Algorithm a : {Algorithm::exact_sweeps, Algorithm::cluster_sweeps, Algorithm::speculative_sweep,
                            Algorithm::dense_registers, Algorithm::cluster_lists})
    CHECK(nsajit::parse_topk_algorithm(to_string(a)) == a);
  CHECK(to_string(Algorithm::cluster_lists) == "cluster_lists");
  CHECK_THROWS_AS(nsajit::parse_topk_algorithm("clusters"), nsajit::InvalidArgument);
  CHECK(to_string(plan_topk_launch(8, 131072, 2048, ScoreDtype::fp32, 132))
            .starts_with("algorithm=cluster_lists cluster_size=8 threads=1024 "));
}

// --- GPU ---------------------------------------------------------------------------------------------

TEST_CASE("topk gpu: lengths 0, negative, 1, topk-1, topk, topk+1, ~16384, ~65536, 131072, clamped") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int topk : {64, 512, 1024, 1984, 2048, 4096}) {
    INFO("topk " << topk);
    const int width = 131072;
    const I lengths = {0,     -5,    INT32_MIN, 1,     topk - 1, topk,   topk + 1, 2 * topk + 3, 16383, 16384,
                       16385, 65535, 65536,     65537, 100000,   width, width + 7, INT32_MAX};
    auto p = make_problem(int(lengths.size()), width, topk, [&] { return normal(rng); });
    p.lengths = lengths;
    check_topk(p);
  }
}

TEST_CASE("topk gpu: a row of 2^20 and rows past 2^20 (global re-read path)") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  auto p = make_problem(1, 1 << 20, 2048, [&] { return normal(rng); });
  check_topk(p);
  const int width = (1 << 20) + 4097;
  auto q = make_problem(3, width, 2048, [&] { return 0.f; });
  for (int i = 0; i < width; ++i) {
    q.scores[i] = float(rng() % 3);                             // huge plateaus
    q.scores[width + i] = 1.0f + float(rng() % 65536) * 1e-7f;  // narrow band
    q.scores[2 * std::size_t(width) + i] = from_bits(0x3f800000u | (rng() & 0xffu));  // equal high bits
  }
  check_topk(q);
}

TEST_CASE("topk gpu: distributions, at 1, 2, 8 and 16 CTAs per row, list, rescans or overflow list") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<std::uint32_t> bits;
  struct Dist {
    const char* name;
    std::function<void(std::vector<float>&, int width)> fill;  // one row
  };
  auto per_element = [](std::function<float()> f) {
    return [f](std::vector<float>& row, int) {
      for (float& x : row) x = f();
    };
  };
  const std::vector<Dist> dists = {
      {"normal", per_element([&] { return normal(rng); })},
      {"all in one fp16 bucket", per_element([&] { return 1.0f + float(rng() % 64) * 1e-6f; })},
      {"banded 54..88", per_element([&] { return 54.0f + float(rng() % 3400) * 0.01f; })},
      {"70 + randn", per_element([&] { return 70.0f + normal(rng); })},
      {"1e-16 * randn", per_element([&] { return 1e-16f * normal(rng); })},
      {"low mantissa bits ascending, positive",
       [&](std::vector<float>& row, int) {
         for (std::size_t i = 0; i < row.size(); ++i) row[i] = from_bits(0x3f800000u + std::uint32_t(i));
       }},
      {"low mantissa bits ascending, negative",
       [&](std::vector<float>& row, int) {
         for (std::size_t i = 0; i < row.size(); ++i) row[i] = from_bits(0xbf800000u + std::uint32_t(i));
       }},
      {"low mantissa bits shuffled, positive and negative",
       [&](std::vector<float>& row, int) {
         for (std::size_t i = 0; i < row.size(); ++i)
           row[i] = from_bits((i % 2 ? 0xc0000000u : 0x40000000u) + std::uint32_t(i / 2));
         std::shuffle(row.begin(), row.end(), rng);
       }},
      {"subnormals", per_element([&] { return from_bits((rng() & 0x80000000u) | (rng() & 0x007fffffu)); })},
      {"zeros plateau with a few large values",
       per_element([&] { return rng() % 1000 == 0 ? 100.0f + float(rng() % 10) : (rng() % 2 ? 0.0f : -0.0f); })},
      {"+-inf sprinkled", per_element([&] {
         const unsigned c = rng() % 100;
         return c == 0 ? kInf : c == 1 ? -kInf : normal(rng);
       })},
      {"90% NaN", per_element([&] { return rng() % 10 < 9 ? kNaN : normal(rng); })},
      {"100% NaN", per_element([&] { return kNaN; })},
      {"NaN and -inf", per_element([&] { return rng() % 2 ? kNaN : -kInf; })},
      {"ReLU sums: 80% exact 0.0, a positive tail",
       per_element([&] { return rng() % 5 ? 0.0f : std::fabs(normal(rng)) + 0x1.0p-20f; })},
      {"ReLU sums, fewer non-zeros than topk (the threshold on the 0.0 plateau)",
       [&](std::vector<float>& row, int width) {
         const int nonzero = std::min(width, 300 + int(rng() % 200));  // < 512 <= topk
         std::fill(row.begin(), row.end(), 0.0f);
         for (int i = 0; i < nonzero; ++i) row[rng() % std::uint32_t(width)] = std::fabs(normal(rng)) + 0x1.0p-20f;
       }},
      {"0.0 plateau with positive subnormals (0.0's first-digit bin, not only 0.0)",
       [&](std::vector<float>& row, int width) {
         const int nonzero = std::min(width, 300 + int(rng() % 200));  // < 512 <= topk
         std::fill(row.begin(), row.end(), 0.0f);
         for (int i = 0; i < nonzero; ++i) row[rng() % std::uint32_t(width)] = from_bits(1u + (rng() & 0x000fffffu));
       }},
      {"0.1% positive, 30% 0.0, the rest negative (the threshold on 0.0, below it negatives)",
       per_element([&] {
         const unsigned c = rng() % 1000;
         return c == 0 ? std::fabs(normal(rng)) + 1.0f : c < 300 ? 0.0f : -std::fabs(normal(rng)) - 1e-3f;
       })},
      {"0.1% positive, 1% 0.0, the rest negative (the threshold below 0.0)",
       per_element([&] {
         const unsigned c = rng() % 1000;
         return c == 0 ? std::fabs(normal(rng)) + 1.0f : c < 11 ? 0.0f : -std::fabs(normal(rng)) - 1e-3f;
       })},
      {"small integers (many ties)", per_element([&] { return float(int(rng() % 7) - 3); })},
      {"plateau", per_element([&] { return 0.5f; })},
      {"raw bit patterns", per_element([&] { return from_bits(bits(rng)); })},
  };
  for (const int width : {9000, 20000, 131072}) {  // default plans for 2 rows: 1, 2 and 8 CTAs per row
    for (const Dist& d : dists) {
      for (const int topk : {512, 2048}) {
        INFO(d.name << ", width " << width << ", topk " << topk);
        ref::TopkProblem p;
        p.rows = 2;
        p.width = width;
        p.topk = topk;
        p.scores.resize(2 * std::size_t(width));
        std::vector<float> row(width);
        for (int r = 0; r < 2; ++r) {
          d.fill(row, width);
          std::copy(row.begin(), row.end(), p.scores.begin() + std::ptrdiff_t(r) * width);
        }
        p.lengths = {width, width - 4097 > topk ? width - 4097 : topk + 1};
        check_topk(p);
        {
          LaunchOverride small_list({.cand_capacity = 64});  // rescans before the list
          check_topk(p);
        }
        {
          LaunchOverride no_slots({.slots_per_thread = 0});  // every candidate to the overflow list
          check_topk(p);
        }
        if (width == 131072) {  // two rows get 8-CTA clusters by default; one row gets 16
          LaunchOverride sixteen({.ctas_per_row = 16});
          check_topk(p);
        }
        if (width == 131072) {  // the exact cluster path alone (the default tries the cluster lists first)
          for (const int c : {8, 16}) {
            LaunchOverride exact_cluster({.ctas_per_row = c, .speculate = 0});
            check_topk(p);
          }
        }
        {
          LaunchOverride one({.ctas_per_row = 1, .speculate = 1});  // the speculative sweep (or its fallback)
          check_topk(p);
        }
        if (width <= 9212) {  // the row's keys in registers (many short rows take it by default)
          LaunchOverride dense(kDenseRows);
          check_topk(p);
        }
        {
          LaunchOverride exact({.ctas_per_row = 1, .speculate = 0});  // the exact path alone
          check_topk(p);
        }
      }
    }
  }
}

TEST_CASE("topk gpu: row_starts (clamped) and a padded odd row stride") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int width : {9000, 40000}) {
    const int rows = 64, topk = 2048;
    auto draw = [&] { return rng() % 50 == 0 ? normal(rng) + 3.f : normal(rng); };
    ref::TopkProblem p = make_problem(rows, width, topk, draw, width + 13);  // odd stride: unaligned rows
    p.lengths.clear();
    std::uniform_int_distribution<int> start(-100, width + 100), len(-10, width + 10);
    for (int r = 0; r < rows; ++r) {
      p.row_starts.push_back(start(rng));
      p.lengths.push_back(len(rng));
    }
    p.row_starts[0] = -3;         // clamps to 0
    p.row_starts[1] = width + 5;  // clamps to width: len 0
    p.row_starts[2] = width - topk - 1;
    p.lengths[2] = width;         // clamps to topk + 1
    p.row_starts[3] = 1;
    p.lengths[3] = width;         // clamps to width - 1
    p.row_starts[4] = 7;
    p.lengths[4] = width / 2;
    INFO("width " << width);
    check_topk(p);
    // One CTA per row, speculative: unaligned rows (the sweep's edge vectors), with and without
    // the L2 prefetch of each warp's segment.
    for (const int prefetch : {0, 1}) {
      INFO("speculative, prefetch_row " << prefetch);
      LaunchOverride spec({.ctas_per_row = 1, .speculate = 1, .prefetch_row = prefetch});
      check_topk(p);
    }
    {  // two CTAs a row: the exact cluster path on the same rows
      INFO("2 CTAs per row");
      LaunchOverride two({.ctas_per_row = 2});
      check_topk(p);
    }
    if (width <= 9212) {  // keys in registers: unaligned rows (edge vectors at both ends)
      LaunchOverride dense(kDenseRows);
      check_topk(p);
    }
  }
}

TEST_CASE("topk gpu: the slice prefetch forced on, every cluster size, short rows, odd stride, past-width slices") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  // topk 64 at width 300: the last CTA of a 16-CTA cluster starts at the width (rank * slice >= width:
  // nothing to prefetch, nothing to read).
  for (const auto& [width, topk] : {std::pair{300, 64}, std::pair{9001, 2048}, std::pair{131071, 2048}}) {
    ref::TopkProblem p = make_problem(3, width, topk, [&] { return normal(rng); }, width + 5);  // odd stride
    p.lengths = {width, topk / 2, width - 3};  // one row never reads its scores
    for (const int c : {1, 2, 16}) {
      INFO("width " << width << ", topk " << topk << ", ctas_per_row " << c);
      LaunchOverride forced({.ctas_per_row = c, .prefetch_slice = 1});
      check_topk(p);
    }
  }
}

TEST_CASE("topk gpu: the speculative sweep falls back when its sample misleads it or a warp's list overflows") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 32768;
  auto p = make_problem(5, width, 2048, [&] { return normal(rng); });
  for (int i = 0; i < width; ++i) {
    // Rows 0 and 3: large scores exactly where the sample looks (templates/topk_speculative.cuh,
    // topk_sample_bound: the last score of each lane's vector in rounds 0-3 of its warp's
    // segment; segments begin at multiples of 8 rounds of 128 scores at 256, 512 and 1024
    // threads): row 0 puts 2048 in rounds 0 and 2 (half the sample), row 3 1024 in round 0 (a
    // quarter), so the bound lands among them and lists fewer than topk keys.
    // Row 4: every 16th score, which this sample does not see.
    const bool sampled_round = (i / 128) % 8 == 0 || (i / 128) % 8 == 2;
    if (i % 4 == 3 && sampled_round) p.scores[i] = 50.0f + normal(rng);
    if (i % 4 == 3 && (i / 128) % 8 == 0) p.scores[3 * std::size_t(width) + i] = 50.0f + normal(rng);
    if (i % 16 == 8) p.scores[4 * std::size_t(width) + i] = 50.0f + normal(rng);
    // Row 1: the largest scores crowd the first 4096 positions (one or two warps' segments).
    if (i < 4096) p.scores[std::size_t(width) + i] = 10.0f + normal(rng);
  }
  // Row 2: plain normal scores (the speculation holds).
  for (const int threads : {256, 512, 1024}) {
    INFO("threads " << threads);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    check_topk(p);
  }
  // Rows too short for the sample (topk 64 at 1024 threads: rows of 650-832 give 6-7 warps of one
  // round each, fewer than the 8 r samples the bound needs): no bound, the exact path. This checks
  // that forced speculation stays exact on such rows; it cannot see which path ran, so it would
  // not have caught the defect it was added with (a bound read from unwritten shared memory, whose
  // outputs were exact too): that one is guarded by the sample count in topk_sample_bound.
  auto shorter = make_problem(8, 16000, 64, [&] { return normal(rng); });
  const int lengths[8] = {650, 652, 700, 760, 830, 832, 3000, 16000};
  std::copy(lengths, lengths + 8, shorter.lengths.begin());
  for (const int threads : {512, 1024}) {
    INFO("short rows, threads " << threads);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    check_topk(shorter);
  }
}

TEST_CASE("topk gpu: the speculative selection's first digit at its range's edges (fp32: shift 0, the shift + 1 case, shift 20, ties)") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 32768, topk = 2048, positives = 3000;
  // Negative scores everywhere, then each row's positives at random positions: the sample's bound
  // lands in the positives, so the lists hold them (templates/topk.cuh, the fp32 window digit over
  // the listed keys' range [lo, hi]; topk_window_shift in templates/topk_radix.cuh).
  auto p = make_problem(6, width, topk, [&] { return -std::fabs(normal(rng)) - 1.0f; });
  std::vector<int> at(width);
  std::iota(at.begin(), at.end(), 0);
  auto place = [&](int row, const std::vector<float>& values) {
    std::shuffle(at.begin(), at.end(), rng);
    for (std::size_t i = 0; i < values.size(); ++i) p.scores[std::size_t(row) * width + at[i]] = values[i];
  };
  auto distinct_offsets = [&](std::uint32_t span) {  // `positives` distinct offsets in [0, span), 0 and span - 1 included
    std::vector<std::uint32_t> u(span);
    std::iota(u.begin(), u.end(), 0u);
    std::shuffle(u.begin() + 1, u.end() - 1, rng);
    std::swap(u[1], u[span - 1]);
    u.resize(positives);
    return u;
  };
  std::vector<float> v;
  // Row 0: keys lo .. lo + 8191 (lo odd): (hi >> 1) - (lo >> 1) = 4096, so the shift is 2, not 1.
  for (const std::uint32_t u : distinct_offsets(8192)) v.push_back(from_bits(0x3f800001u + u));
  place(0, v);
  // Row 1: keys within 4096 of each other: shift 0, all 32 bits from the first digit.
  v.clear();
  for (const std::uint32_t u : distinct_offsets(4096)) v.push_back(from_bits(0x3f800000u + u));
  place(1, v);
  // Row 2: positive bit patterns of every exponent: the widest range (shift 19 or 20).
  v.clear();
  for (int i = 0; i < positives; ++i) v.push_back(from_bits(0x00800000u + std::uint32_t(rng() % 0x7e800000u)));
  place(2, v);
  // Row 3: five distinct values: T's bin holds hundreds of ties (the 10-bit digits).
  v.clear();
  for (int i = 0; i < positives; ++i) v.push_back(float(1 + int(rng() % 5)));
  place(3, v);
  // Rows 4 and 5: 2040 / 2047 distinct scores above 10, 32 / 40 copies of 5.0 and 1000 scores in
  // [4, 4.9) (listed too; none in 5.0's bin): T = 5.0 ranked from the short list (32 keys) or
  // refined (40 keys > 32), with 8 / 1 of its copies taken.
  for (const int row : {4, 5}) {
    const int above = row == 4 ? 2040 : 2047, copies = row == 4 ? 32 : 40;
    v.clear();
    for (int i = 0; i < above; ++i) v.push_back(10.0f + 1e-3f * float(i));
    for (int i = 0; i < copies; ++i) v.push_back(5.0f);
    for (int i = 0; i < 1000; ++i) v.push_back(4.0f + 9e-4f * float(i));
    place(row, v);
  }
  for (const int threads : {512, 1024}) {
    INFO("threads " << threads);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    check_topk(p);
  }
}

TEST_CASE("topk gpu: batches of 1 to 4096 rows (the last query rows of a prefill)") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int rows : {1, 3, 64, 1000, 4096}) {
    const int width = rows == 4096 ? 4096 + 2048 : 8192;
    auto p = make_problem(rows, width, 2048, [&] { return normal(rng); });
    for (int r = 0; r < rows; ++r) p.lengths[r] = width - rows + 1 + r;  // causal: len grows by row
    INFO("rows " << rows);
    check_topk(p);
  }
}

TEST_CASE("topk gpu: deterministic across 20 launches, batchmates, launch shapes, thread counts, list sizes") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int rows = 6, width = 100000, topk = 2048;
  // Heavy ties (5 values: resolved by rescans), quantised normal scores (a few ties at the
  // threshold, resolved through the candidate list) and ReLU sums with fewer non-zeros than topk
  // (the threshold on the 0.0 plateau), so that any order dependence would show.
  for (const int kind : {0, 1, 2}) {
    INFO((kind == 0 ? "5 distinct values" : kind == 1 ? "normal quantised to 1e-3" : "ReLU sums, 1% non-zero"));
    auto value = [&] {
      if (kind == 0) return float(rng() % 5);
      if (kind == 1) return std::round(normal(rng) * 1000.0f) / 1000.0f;
      return rng() % 100 ? 0.0f : std::fabs(normal(rng)) + 0x1.0p-20f;
    };
    auto p = make_problem(rows, width, topk, value);
    for (int r = 0; r < rows; ++r) p.lengths[r] = width - 9973 * r;
    p.lengths[5] = 30000;
    DeviceTopk device(p);
    const I first = device.run();
    CHECK(explain(p, first, ref::topk_index_order(p)).empty());
    for (int i = 0; i < 20; ++i) CHECK(device.run() == first);

    // Each row alone, and inside a batch with different neighbours, gives the same bytes.
    for (int r = 0; r < rows; ++r) {
      ref::TopkProblem alone;
      alone.rows = 1;
      alone.width = width;
      alone.topk = topk;
      alone.scores.assign(p.scores.begin() + std::ptrdiff_t(r) * width,
                          p.scores.begin() + std::ptrdiff_t(r + 1) * width);
      alone.lengths = {p.lengths[r]};
      const I got = DeviceTopk(alone).run();
      INFO("row " << r);
      CHECK(std::equal(got.begin(), got.end(), first.begin() + std::ptrdiff_t(r) * topk));
    }
    {
      auto big = make_problem(200, width, topk, value);
      std::copy(p.scores.begin(), p.scores.begin() + width, big.scores.begin() + 117 * std::ptrdiff_t(width));
      big.lengths[117] = p.lengths[0];
      const I got = DeviceTopk(big).run();
      CHECK(std::equal(first.begin(), first.begin() + topk, got.begin() + 117 * topk));
    }

    // Every launch shape: 1..16 CTAs per row, global re-read, thread counts, and a candidate list
    // of 64 keys (the threshold bin is rescanned instead).
    for (const int ctas : {1, 2, 4, 8, 16}) {
      for (const int threads : {256, 512, 1024}) {
        for (const bool streaming : {false, true}) {
          for (const int capacity : {0, 64}) {
            for (const int slots : {-1, 0, 1}) {  // default slots; all or most candidates overflow
              for (const int speculate : {-1, 0, 1}) {  // C = 1: the plan, the exact path, speculative
                // 1 CTA of 100000 at 1024 threads keeps part of its slice, at fewer threads none.
                if (ctas == 1 && !streaming && threads == 256) continue;
                if (capacity != 0 && slots != -1) continue;
                if (speculate != -1 && ctas != 1) continue;
                INFO("ctas " << ctas << " threads " << threads << " streaming " << streaming << " capacity "
                              << capacity << " slots " << slots << " speculate " << speculate);
                LaunchOverride o({.ctas_per_row = ctas, .threads = threads, .force_streaming = streaming,
                                  .cand_capacity = capacity, .slots_per_thread = slots, .speculate = speculate});
                CHECK(device.run() == first);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("topk gpu: sorted output is the reference's (score descending, ties by index)") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int topk : {512, 1984, 2048, 4096}) {
    auto p = make_problem(5, 50000, topk, [&] { return rng() % 3 == 0 ? float(rng() % 4) : normal(rng); });
    p.lengths = {50000, topk + 1, topk, 17, 30001};
    INFO("topk " << topk);
    const I got = DeviceTopk(p, nullptr, true).run();
    const std::string why = explain(p, got, ref::topk(p));
    CHECK_MESSAGE(why.empty(), why);
    LaunchOverride spec({.ctas_per_row = 1, .speculate = 1});  // phase 0 speculative
    CHECK(DeviceTopk(p, nullptr, true).run() == got);
  }
}

namespace {

// page_table_1 of `requests` requests of up to `width` positions each, slots of shuffled pages of
// size `page` (page-aligned, so the real page table of page size `page` is equivalent); entries at
// positions >= the request's length are -1 (a partial last page keeps its valid slots only).
I shuffled_page_table_1(std::mt19937& rng, int requests, int width, int page, const I& request_len) {
  const int pages = (width + page - 1) / page;
  std::vector<int> ids(std::size_t(requests) * pages);
  std::iota(ids.begin(), ids.end(), 3);
  std::shuffle(ids.begin(), ids.end(), rng);
  I table(std::size_t(requests) * width, -1);
  for (int b = 0; b < requests; ++b)
    for (int pos = 0; pos < std::min(width, request_len[b]); ++pos)
      table[std::size_t(b) * width + pos] = ids[std::size_t(b) * pages + pos / page] * page + pos % page;
  return table;
}

// Runs fused (and, when check_sorted, fused + sorted) and compares with the reference.
void check_fused(const ref::TopkProblem& p, const ref::TopkTransform& t,
                 nsajit::ScoreDtype dtype = nsajit::ScoreDtype::fp32) {
  const I expected = ref::apply_transform(t, p.rows, p.topk, ref::topk_index_order(p));
  const I got = DeviceTopk(p, &t, false, dtype).run();
  CHECK_MESSAGE(got == expected, ref::first_difference(got, expected, p.topk));
  const I expected_sorted = ref::apply_transform(t, p.rows, p.topk, ref::topk(p));
  const I got_sorted = DeviceTopk(p, &t, true, dtype).run();
  CHECK_MESSAGE(got_sorted == expected_sorted, ref::first_difference(got_sorted, expected_sorted, p.topk));
}

}  // namespace

TEST_CASE("topk gpu fused: decode, page sizes 1 and 64 give the same slots, partial last page, MTP") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int next_n : {1, 2}) {
    const int requests = 6, rows = requests * next_n, width = 40000, topk = 2048;
    auto p = make_problem(rows, width, topk, [&] { return normal(rng); });
    I request_len = {40000, 2049, 2048, 5, 0, 33333};  // partial last pages; len <= topk rows
    for (int r = 0; r < rows; ++r) p.lengths[r] = request_len[r / next_n] - (next_n - 1 - r % next_n);
    const I pt1 = shuffled_page_table_1(rng, requests, width, 64, request_len);
    const ref::TopkTransform t1{ref::decode_tables(pt1, requests, width), next_n};
    const ref::TopkTransform t64{ref::decode_tables(pt1, requests, width, 64), next_n};
    INFO("next_n " << next_n);
    check_fused(p, t1);
    check_fused(p, t64);
    const I a = DeviceTopk(p, &t1).run(), b = DeviceTopk(p, &t64).run();
    // The same logical result, except where page_table_1 has -1 inside a partial last page
    // (the real page table maps those positions to slots); no selected position lies there.
    CHECK(a == b);
    {  // one CTA per row, speculative: positions staged in the first-digit histogram
      LaunchOverride spec({.ctas_per_row = 1, .speculate = 1});
      CHECK(DeviceTopk(p, &t1).run() == a);
      CHECK(DeviceTopk(p, &t64).run() == b);
    }
  }
}

TEST_CASE("topk gpu: cluster lists hold the selection of spread rows and fall back on crowded ones") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 131072;
  // 8 rows (8-CTA clusters, 1024 threads) and 1 row (16 CTAs, 512 threads). Rows 0-4: normal
  // scores, row 3 shortened (its last CTA's slice partial, the next ones empty); row 5: normal with
  // a cached prefix (row_starts); row 6 ascending (the largest scores all in the last slice: its
  // cut lies above the threshold); row 7 a plateau (every list overflows).
  for (const int topk : {64, 512, 2048, 4096}) {
    auto p = make_problem(8, width, topk, [&] { return normal(rng); });
    for (int i = 0; i < width; ++i) {
      p.scores[6 * std::size_t(width) + i] = float(i) * 1e-3f;
      p.scores[7 * std::size_t(width) + i] = 0.5f;
    }
    p.lengths[3] = 100003;
    p.row_starts = {0, 0, 0, 0, 0, 4099, 0, 0};
    p.lengths[5] = width - 4099;
    INFO("topk " << topk);
    const I expected = ref::topk_index_order(p);
    check_topk(p);  // the crowded rows take the exact path
    {
      // The probe: a row that falls back writes -2 to its first slot, so the spread rows show that
      // the lists held their selection and the crowded ones that they did not.
      ClusterFallbackProbe probe;
      const I got = DeviceTopk(p).run();
      for (int r = 0; r < 8; ++r) {
        INFO("row " << r);
        const auto row = got.begin() + std::ptrdiff_t(r) * topk;
        if (r >= 6) {
          CHECK(row[0] == -2);
        } else {
          CHECK(std::equal(row, row + topk, expected.begin() + std::ptrdiff_t(r) * topk));
        }
      }
    }
    for (const int r : {0, 6}) {  // one row alone: 16 CTAs
      ref::TopkProblem one = make_problem(1, width, topk, [] { return 0.f; });
      std::copy_n(p.scores.begin() + std::ptrdiff_t(r) * width, width, one.scores.begin());
      INFO("row " << r << " alone");
      const I alone = check_topk(one);
      CHECK(std::equal(alone.begin(), alone.end(), expected.begin() + std::ptrdiff_t(r) * topk));
      ClusterFallbackProbe probe;
      const I got = DeviceTopk(one).run();
      if (r == 0) CHECK(got == alone);
      else CHECK(got[0] == -2);
    }
  }
  // Fused decode (page size 64, shuffled pages) and sorted through the lists, at 8 and 16 CTAs.
  for (const int rows : {8, 1}) {
    const int topk = 2048;
    auto p = make_problem(rows, width, topk, [&] { return normal(rng); });
    I request_len(rows, width);
    p.lengths[0] = width - 5;
    const ref::TopkTransform t{ref::decode_tables(shuffled_page_table_1(rng, rows, width, 64, request_len), rows,
                                                  width, 64)};
    INFO("fused, rows " << rows);
    ClusterFallbackProbe probe;
    check_fused(p, t);
  }
}

TEST_CASE("topk gpu: cluster lists with T's 20-bit bin crowded (ties ranked, the short list, 10-bit digits)") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 131072, topk = 2048;
  // Normal rows (T's bin of the refinement's 8-bit digit holds ~6 keys) with extra keys that
  // share T's first 20 key bits at random positions (so the lists still hold the selection):
  // `extra` exact copies of T's value (ties at the threshold), or values differing from it in
  // the low 12 bits. Row order: 6 copies (ties in the short list), 16 variants (a longer short
  // list), 40 copies (over the short list's 32: 10-bit digits), 12 variants, 3 copies, plain,
  // 24 variants, 9 copies; at 8 rows (8 CTAs of 1024 threads) and each alone (16 CTAs of 512).
  struct Crowd {
    int extra;
    bool ties;
  };
  const std::vector<Crowd> crowds = {{6, true}, {16, false}, {40, true}, {12, false}, {3, true}, {0, true},
                                     {24, false}, {9, true}};
  auto p = make_problem(8, width, topk, [&] { return normal(rng); });
  for (int r = 0; r < 8; ++r) {
    float* row = p.scores.data() + std::size_t(r) * width;
    std::vector<float> sorted(row, row + width);
    std::nth_element(sorted.begin(), sorted.begin() + (topk - 1), sorted.end(), std::greater<float>());
    const float t = sorted[topk - 1];
    const uint32_t t_bits = std::bit_cast<uint32_t>(t);
    for (int i = 0; i < crowds[std::size_t(r)].extra; ++i) {
      const uint32_t bits = crowds[std::size_t(r)].ties ? t_bits : (t_bits & ~0xfffu) | (rng() & 0xfffu);
      row[rng() % width] = std::bit_cast<float>(bits);
    }
  }
  const I expected = ref::topk_index_order(p);
  ClusterFallbackProbe probe;  // -2 in a row's first slot if it fell back
  const I got = DeviceTopk(p).run();
  for (int r = 0; r < 8; ++r) {
    INFO("row " << r << ", " << crowds[std::size_t(r)].extra << (crowds[std::size_t(r)].ties ? " ties" : " variants"));
    CHECK(std::equal(got.begin() + std::ptrdiff_t(r) * topk, got.begin() + std::ptrdiff_t(r + 1) * topk,
                     expected.begin() + std::ptrdiff_t(r) * topk));
    ref::TopkProblem one = make_problem(1, width, topk, [] { return 0.f; });
    std::copy_n(p.scores.begin() + std::ptrdiff_t(r) * width, width, one.scores.begin());
    const I alone = DeviceTopk(one).run();
    CHECK(std::equal(alone.begin(), alone.end(), expected.begin() + std::ptrdiff_t(r) * topk));
  }
}

TEST_CASE("topk gpu: keys in registers (dense rows): topk 512..4096, sorted, fused modes, batchmates, 20 launches") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  LaunchOverride dense(kDenseRows);
  for (const int topk : {512, 1984, 2048, 4096}) {
    const int width = 9212;  // the longest slice the path takes
    auto p = make_problem(6, width, topk, [&] { return rng() % 3 == 0 ? float(rng() % 4) : normal(rng); });
    // Odd stride: rows start 0..3 elements into a 16-byte vector, so a full row spans 2304 vectors
    // (the registers' 256 * 9) with element loads at both edges.
    const int stride = width + 3;
    auto padded = [&](ref::TopkProblem q) {
      std::vector<float> s(std::size_t(q.rows) * stride, -1.0f);
      for (int r = 0; r < q.rows; ++r)
        std::copy(q.scores.begin() + std::ptrdiff_t(r) * width, q.scores.begin() + std::ptrdiff_t(r + 1) * width,
                  s.begin() + std::ptrdiff_t(r) * stride);
      q.scores = std::move(s);
      q.score_row_stride = stride;
      return q;
    };
    p = padded(p);
    p.lengths = {width, topk + 1, topk, 17, width - 1, 8192};
    INFO("topk " << topk);
    const I got = DeviceTopk(p).run();
    const std::string why = explain(p, got, ref::topk_index_order(p));
    CHECK_MESSAGE(why.empty(), why);
    DeviceTopk device(p);
    for (int i = 0; i < 20; ++i) CHECK(device.run() == got);
    {  // the same rows inside a batch of other rows
      auto big = padded(make_problem(40, width, topk, [&] { return normal(rng); }));
      std::copy(p.scores.begin(), p.scores.end(), big.scores.begin() + 31 * std::ptrdiff_t(stride));
      std::copy(p.lengths.begin(), p.lengths.end(), big.lengths.begin() + 31);
      const I all = DeviceTopk(big).run();
      CHECK(std::equal(got.begin(), got.end(), all.begin() + 31 * std::ptrdiff_t(topk)));
    }
    // Each sorted or fused variant is one more NVRTC compile per topk (20 took 75 s on the H200):
    // sorted at a multiple and a non-multiple of 64, fused at the model's topk.
    if (topk == 512 || topk == 4096) continue;
    const I sorted = DeviceTopk(p, nullptr, true).run();
    const std::string why_sorted = explain(p, sorted, ref::topk(p));
    CHECK_MESSAGE(why_sorted.empty(), why_sorted);
    if (topk != 2048) continue;
    const I request_len(p.lengths.begin(), p.lengths.end());
    const ref::TopkTransform t64{
        ref::decode_tables(shuffled_page_table_1(rng, p.rows, width, 64, request_len), p.rows, width, 64)};
    check_fused(p, t64);
    // Prefill: rows 0-1 of request 0, rows 2-4 of request 1, row 5 of no request (all -1); ragged.
    ref::TopkTransform prefill;
    prefill.mode = IndexMode::prefill;
    prefill.num_requests = 2;
    prefill.cu_seqlens_q = {0, 2, 5};
    prefill.page_table_width = width;
    prefill.page_table = shuffled_page_table_1(rng, 2, width, 1, I{width, width});
    check_fused(p, prefill);
    ref::TopkTransform ragged;
    ragged.mode = IndexMode::ragged;
    ragged.offsets = {0, 7, 100000, 3, 0, 9212};
    check_fused(p, ragged);
  }
}

TEST_CASE("topk gpu: keys in registers (dense rows): copies of the threshold in a small first-digit bin") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  LaunchOverride dense(kDenseRows);
  const int width = 6001, topk = 2048;
  auto p = make_problem(6, width, topk, [&] { return normal(rng); });
  // Row r: copies of the topk-th largest score at sorted ranks [topk - before, topk - 1 + after),
  // so that the threshold's bin (about 70 keys, ranked one a thread) holds several equal keys:
  // 4 of 7 taken, 1 of 7, all 7, a single key, both of 2, 1 of 2.
  const int spans[6][2] = {{4, 4}, {1, 7}, {7, 1}, {1, 1}, {2, 0}, {0, 2}};
  for (int r = 0; r < p.rows; ++r) {
    float* row = p.scores.data() + std::ptrdiff_t(r) * width;
    std::vector<int> order(width);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
    const float threshold = row[order[topk - 1]];
    for (int i = topk - spans[r][0]; i < topk - 1 + spans[r][1]; ++i) row[order[i]] = threshold;
  }
  const I got = DeviceTopk(p).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
}

// A ranked threshold with no copy (fp32): the masks hold the keys above T only, and T's position comes
// from the list (stored beside each listed key) into the last staged slot. T moved to a row's first,
// last and edge-vector positions (odd stride: unaligned rows), with copies of the keys just above and
// below it; a row where T has one copy, one of the two taken (two listed keys with k - 1 above them:
// the masks of both), and rows with T's copies all taken. Also under a plan that keeps the slice,
// whose staged slots cover the list (T's position read before the block scan's barrier).
TEST_CASE("topk gpu: keys in registers (dense rows): a threshold with no copy placed from the list, kept slices") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int topk = 2048;
  for (const int width : {5000, 6001}) {
    const int stride = width + 3;
    ref::TopkProblem p = make_problem(8, width, topk, [] { return 0.0f; });
    std::vector<float> s(std::size_t(p.rows) * stride, -1.0f);
    p.lengths = {width, width - 1, width, width - 2, 4097, width, width, width - 3};
    for (int r = 0; r < p.rows; ++r) {
      float* row = s.data() + std::ptrdiff_t(r) * stride;
      const int len = p.lengths[std::size_t(r)];
      for (int i = 0; i < width; ++i) row[i] = normal(rng);
      std::vector<int> order(len);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      if (r == 3 || r == 4) {  // copies of the keys next to T, T itself alone
        row[order[topk - 2]] = row[order[topk - 3]];
        row[order[topk + 1]] = row[order[topk]];
      }
      if (r == 5) row[order[topk]] = row[order[topk - 1]];                 // T twice, one taken
      if (r == 6) row[order[topk - 2]] = row[order[topk - 1]];             // T twice, both taken
      const int at[8] = {0, len - 1, 1, len - 2, 3, 2500, 1, len - 4};     // where T goes
      std::swap(row[order[topk - 1]], row[at[r]]);
    }
    p.scores = std::move(s);
    p.score_row_stride = stride;
    const I expected = ref::topk_index_order(p);
    const I expected_sorted = ref::topk(p);
    for (const bool kept_slice : {false, true}) {
      INFO("width " << width << (kept_slice ? ", the slice kept" : ""));
      LaunchOverride dense(kept_slice ? nsajit::detail::TopkPlanConstraints{.ctas_per_row = 1, .threads = 256, .dense_registers = 1}
                                      : kDenseRows);
      if (kept_slice && width == 5000) {  // the staged slots (hist0 + 4096 words) over the list (after 256 * 9 vectors)
        const int hist = plan_topk_launch(p.rows, width, topk, ScoreDtype::fp32, 132).hist_offset;
        CHECK(hist + 4096 < 4 * 256 * 9 + 512);
        CHECK(hist + 4096 + topk > 4 * 256 * 9);
      }
      const I got = DeviceTopk(p).run();
      const std::string why = explain(p, got, expected);
      CHECK_MESSAGE(why.empty(), why);
      const I sorted = DeviceTopk(p, nullptr, true).run();
      const std::string why_sorted = explain(p, sorted, expected_sorted);
      CHECK_MESSAGE(why_sorted.empty(), why_sorted);
    }
    LaunchOverride dense(kDenseRows);
    const I request_len(p.lengths.begin(), p.lengths.end());
    const ref::TopkTransform t64{
        ref::decode_tables(shuffled_page_table_1(rng, p.rows, width, 64, request_len), p.rows, width, 64)};
    check_fused(p, t64);
  }
}

namespace {

// A dense row around one first-digit bin: 1900 scores above 2, `bin` scores in [1, 1.125) (140 in
// [1.07, 1.12), 20 copies of 1.0625, the rest in [1, 1.06)), the others below -1; shuffled.
void fill_threshold_bin_row(float* row, int width, int bin, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < width; ++i) {
    const int b = i - 1900;  // index inside the bin
    row[i] = i < 1900        ? 2.0f + unit(rng)
             : b < 140       ? 1.07f + 0.05f * unit(rng)
             : b < 160       ? 1.0625f
             : b < bin       ? 1.0f + 0.06f * unit(rng)
                             : -1.0f - unit(rng);
  }
  std::shuffle(row, row + width, rng);
}

}  // namespace

TEST_CASE("topk gpu: keys in registers (dense rows): threshold bins of 256, 257, 512, 513 and 2000 keys") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  // Row r: 1900 scores above 2, bin[r] scores in [1, 1.125) (one first-digit bin), the rest below
  // -1. topk 2048 takes 148 from the bin: its 140 scores in [1.07, 1.12) and 8 of its 20 copies of
  // 1.0625 (the threshold), the bin ranked one a thread (256), refined over the short list (257,
  // 512) or over the runs (513, 2000).
  const int width = 6001, topk = 2048;
  const int bin[5] = {256, 257, 512, 513, 2000};
  auto p = make_problem(5, width, topk, [] { return 0.0f; });
  for (int r = 0; r < p.rows; ++r) fill_threshold_bin_row(p.scores.data() + std::ptrdiff_t(r) * width, width, bin[r], rng);
  const I expected = ref::topk_index_order(p);
  {
    LaunchOverride dense(kDenseRows);
    const I got = DeviceTopk(p).run();
    const std::string why = explain(p, got, expected);
    CHECK_MESSAGE(why.empty(), why);
    CHECK(DeviceTopk(p).run() == got);
  }
  {  // the slice kept too (a tuned plan may ask for it): hist0 after it, the exchange over both
    LaunchOverride kept({.ctas_per_row = 1, .threads = 256, .dense_registers = 1});
    CHECK(plan_topk_launch(p.rows, width, topk, ScoreDtype::fp32, 132).hist_offset > 0);
    const I got = DeviceTopk(p).run();
    const std::string why = explain(p, got, expected);
    CHECK_MESSAGE(why.empty(), why);
  }
}

// The rank of the threshold's bin (<= 256 keys) takes T as the least listed key with fewer than k
// listed above it, comparing keys by the sign of their difference (they share the first digit), and
// the copies of T to take from the block scan: thresholds at both ends of a bin (the largest
// difference), negative bins, NaN and -inf (bin 0, next to the padding's key 0), +0.0 / -0.0 with
// positive subnormals (0.0's bin, not a plateau), each with copies of T split by index order.
TEST_CASE("topk gpu: keys in registers (dense rows): ranked thresholds at a bin's ends, negative, NaN, subnormal") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int width = 6001, topk = 2048;
  const float top_of_bin = std::nextafter(1.125f, 0.0f);  // the key 0x...fffff of 1.0's first-digit bin
  auto p = make_problem(6, width, topk, [] { return 0.0f; });
  // Each row: 1900 scores above 2, then `bin` (the threshold's first-digit bin, 148 of it taken),
  // then `below` (outside the bin, under it); shuffled over the row's length.
  auto fill = [&](int r, int len, const std::vector<float>& bin, auto below) {
    float* row = p.scores.data() + std::ptrdiff_t(r) * width;
    int i = 0;
    for (; i < 1900; ++i) row[i] = 2.0f + unit(rng);
    for (const float v : bin) row[i++] = v;
    for (; i < width; ++i) row[i] = below();
    std::shuffle(row, row + len, rng);
    p.lengths[r] = len;
  };
  auto copies = [](std::vector<float>& v, int n, float x) { v.insert(v.end(), std::size_t(n), x); };
  std::vector<float> b0, b1, b2, b3, b4, b5;
  // Row 0: T = 1.0, the bin's least key (60 at its top, 40 inside, 48 of 60 copies of 1.0).
  copies(b0, 60, top_of_bin);
  for (int i = 0; i < 40; ++i) b0.push_back(1.0f + 0.1f * unit(rng));
  copies(b0, 60, 1.0f);
  fill(0, width, b0, [&] { return -1.0f - unit(rng); });
  // Row 1: T = the bin's greatest key (148 of 200 copies), 50 copies of 1.0 under it.
  copies(b1, 200, top_of_bin);
  copies(b1, 50, 1.0f);
  fill(1, width, b1, [&] { return -1.0f - unit(rng); });
  // Row 2: a negative bin (magnitudes [1, 1.125)): T = -top_of_bin, its least key.
  copies(b2, 60, -1.0f);
  for (int i = 0; i < 40; ++i) b2.push_back(-1.0f - 0.1f * unit(rng));
  copies(b2, 100, -top_of_bin);
  fill(2, width, b2, [&] { return -4.0f - unit(rng); });
  // Row 3: bin 0 (-inf and NaN, the row cut to 2100): T = NaN, 88 of its 140 copies.
  copies(b3, 60, -kInf);
  copies(b3, 140, kNaN);
  fill(3, 2100, b3, [&] { return 3.0f; });
  // Row 4: 0.0's bin with positive subnormals: 100 subnormals, then 48 of 100 zeros (+0.0 and -0.0).
  for (int i = 0; i < 100; ++i) b4.push_back(std::bit_cast<float>(uint32_t(1u + rng() % 0xfffffu)));
  for (int i = 0; i < 100; ++i) b4.push_back(i % 2 ? -0.0f : 0.0f);
  fill(4, width, b4, [&] { return -std::bit_cast<float>(uint32_t(1u + rng() % 0x7fffffu)); });
  // Row 5: a bin of exactly 256 keys at both ends only (148 of 156 copies of 1.0 after 100 at the top).
  copies(b5, 100, top_of_bin);
  copies(b5, 156, 1.0f);
  fill(5, width, b5, [&] { return -1.0f - unit(rng); });
  LaunchOverride dense(kDenseRows);
  const I got = DeviceTopk(p).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
  CHECK(DeviceTopk(p).run() == got);
}

TEST_CASE("topk gpu fused: prefill with a cached prefix (row_starts, cu_seqlens_q) and ragged offsets") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  // Request 0: 3000 new tokens; request 1: 20000 cached + 40 new; request 2: 1 new token.
  const I extend = {3000, 40, 1}, prefix = {0, 20000, 5000};
  const I cu = ref::cu_seqlens(extend);
  const int rows = cu.back(), topk = 2048;
  const int width = 20040;  // the scores of every row: its request's keys at row_starts
  I request_len(3);
  for (int b = 0; b < 3; ++b) request_len[b] = prefix[b] + extend[b];
  ref::TopkProblem p = make_problem(rows, width, topk, [&] { return normal(rng); });
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < extend[b]; ++i) {
      const int r = cu[b] + i;
      p.lengths[r] = prefix[b] + i + 1;  // causal
    }
  p.row_starts.assign(rows, 0);
  p.row_starts[rows - 1] = 13;  // ragged-style start inside the score row
  ref::TopkTransform t;
  t.mode = IndexMode::prefill;
  t.page_table = shuffled_page_table_1(rng, 3, width, 1, request_len);
  t.page_table_width = width;
  t.num_requests = 3;
  t.cu_seqlens_q = cu;
  check_fused(p, t);
  ref::TopkTransform t64 = t;
  t64.page_size = 64;
  t64.page_table = ref::real_page_table(shuffled_page_table_1(rng, 3, width, 64, request_len), 3, width, 64);
  t64.page_table_width = (width + 63) / 64;
  check_fused(p, t64);

  ref::TopkTransform rg;
  rg.mode = IndexMode::ragged;
  for (int r = 0; r < rows; ++r) rg.offsets.push_back(r < 3000 ? 0 : r < 3040 ? 3000 : 23040);
  check_fused(p, rg);
}

// --- bf16 scores -------------------------------------------------------------------------------------

namespace {

// The problem's scores rounded to bf16 (RNE): the values a bf16 launch sees, widened exactly.
ref::TopkProblem rounded_to_bf16(ref::TopkProblem p) {
  for (float& x : p.scores) x = ref::bf16_to_float(ref::float_to_bf16(x));
  return p;
}

// A bf16 launch against the reference on the bf16 values, and against the fp32 launch on the
// same (widened) values: both byte for byte.
void check_bf16(const ref::TopkProblem& p) {
  const I got = check_topk(p, nsajit::ScoreDtype::bf16);
  CHECK(got == DeviceTopk(p).run());
}

}  // namespace

TEST_CASE("topk gpu bf16: distributions, at 1, 2, 8 and 16 CTAs per row, speculative, dense, exact paths") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  struct Dist {
    const char* name;
    std::function<float()> draw;
  };
  const std::vector<Dist> dists = {
      {"normal", [&] { return normal(rng); }},
      {"ReLU sums: 80% exact 0.0", [&] { return rng() % 5 ? 0.0f : std::fabs(normal(rng)); }},
      {"ReLU sums: 0.3% non-zero (threshold on the 0.0 plateau)",
       [&] { return rng() % 300 ? 0.0f : std::fabs(normal(rng)) + 1.0f; }},
      {"bf16 bit patterns (NaN, inf, subnormals, -0.0)",
       [&] { return ref::bf16_to_float(std::uint16_t(rng())); }},
      {"small integers (many ties)", [&] { return float(int(rng() % 7) - 3); }},
      {"one bf16 bucket: 1 + k / 128", [&] { return 1.0f + float(rng() % 8) / 128.0f; }},
      {"negative: -|N(0, 1)| (thresholds below 0.0)", [&] { return -std::fabs(normal(rng)); }},
  };
  for (const int width : {9000, 20000, 131072}) {  // default plans for 2 rows: 1, 2 and 8 CTAs per row
    for (const Dist& d : dists) {
      for (const int topk : {512, 2048}) {
        INFO(d.name << ", width " << width << ", topk " << topk);
        auto p = rounded_to_bf16(make_problem(2, width, topk, d.draw));
        p.lengths[1] = width - 4097 > topk ? width - 4097 : topk + 1;
        check_bf16(p);
        {
          LaunchOverride speculative({.ctas_per_row = 1, .speculate = 1});
          check_bf16(p);
        }
        {
          LaunchOverride exact({.ctas_per_row = 1, .speculate = 0});
          check_bf16(p);
        }
        if (width <= 9212) {
          LaunchOverride dense(kDenseRows);
          check_bf16(p);
        }
        if (width == 131072)
          for (const int c : {8, 16}) {
            LaunchOverride exact_cluster({.ctas_per_row = c, .speculate = 0});
            check_bf16(p);
            LaunchOverride cluster({.ctas_per_row = c});
            check_bf16(p);
          }
      }
    }
  }
}

TEST_CASE("topk gpu bf16: row strides (odd, 1024-byte aligned), row_starts, topk 64..4096, many short and long rows") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  for (const int stride_pad : {1, 3, 512 - 5000 % 512}) {  // unaligned rows; rows 1024 bytes apart
    INFO("stride width + " << stride_pad);
    auto p = rounded_to_bf16(make_problem(5, 5000, 1024, [&] { return normal(rng); }, 5000 + stride_pad));
    p.lengths = {5000, 4000, 1025, 1024, 3};
    check_bf16(p);
    p.row_starts = {0, 1, 999, 3, 4998};
    check_bf16(p);
  }
  for (const int topk : {64, 4096}) {
    INFO("topk " << topk);
    auto p = rounded_to_bf16(make_problem(3, 70000, topk, [&] { return normal(rng); }));
    p.lengths = {70000, topk + 1, 12345};
    check_bf16(p);
  }
  {  // many short rows (the dense-registers and one-CTA plans)
    auto p = rounded_to_bf16(make_problem(300, 6000, 2048, [&] { return normal(rng); }));
    for (int r = 0; r < p.rows; ++r) p.lengths[r] = 2000 + 13 * r;
    check_bf16(p);
  }
  {  // many long rows over several waves (the plan's four 256-thread bf16 CTAs an SM at 132 SMs), normal
     // and ReLU rows whose threshold sits on the 0.0 plateau (~1,230 positives of topk 2048)
    const auto plan = plan_topk_launch(300, 24576, 2048, ScoreDtype::bf16, 132);
    INFO(nsajit::detail::to_string(plan));
    CHECK((plan.threads == 256 && speculates(plan)));  // else this case no longer covers that plan
    auto p = rounded_to_bf16(make_problem(300, 24576, 2048, [&] { return normal(rng); }));
    for (int r = 0; r < p.rows; ++r) p.lengths[r] = 24576 - 7 * r;
    check_bf16(p);
    const auto relu = [&] { return rng() % 20 ? 0.0f : std::fabs(normal(rng)); };
    check_bf16(rounded_to_bf16(make_problem(300, 24576, 2048, relu)));
    // Thresholds below 0.0 (topk_resolve_bf16_lists: the key's 4 bits under the first digit,
    // reversed for negatives): -|N(0, 1)|; and rows whose first-digit bin of -(1 + k / 128)
    // (k < 16 share it) holds ~3,900 keys, the rest far below, so the lists hold that bin: T is
    // -(1 + 7 / 128) with ~1,600 of its ~3,500 copies taken across the 8 warps (T's 4 bits mid-range).
    check_bf16(rounded_to_bf16(make_problem(300, 24576, 2048, [&] { return -std::fabs(normal(rng)); })));
    const auto bucket = [&] {
      if (rng() % 1000 < 160) return -1.0f - float(std::min(int(rng() % 64), 7)) / 128.0f;
      return -4.0f - std::fabs(normal(rng));
    };
    check_bf16(rounded_to_bf16(make_problem(300, 24576, 2048, bucket)));
  }
}

// bf16 rows load 16 bytes (8 scores, two vectors: a pair) a lane in pass 0 and in the speculative
// sweep (templates/topk_bf16.cuh): a pair starts at a 16-byte unit, so a slice's vector 0 is the
// first or second half of its pair (phase 0 or 1), and with phase 1 a warp's first and last pairs
// reach one vector into its neighbours' segments. These cases move the largest scores onto those
// edges at every head (0..7 scores into a 16-byte unit) and phase, in every algorithm that loads
// pairs: a score listed or counted twice, or missed, moves the output.
TEST_CASE("topk gpu bf16: pair loads at every alignment, segment edge and algorithm") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 40000, stride = width + 1, rows = 8;  // row r starts 2 r bytes into a 16-byte unit
  auto p = make_problem(rows, width, 2048, [&] { return normal(rng); }, stride);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < width; ++i) {
      const int at = (i + 3 * r) % 128;  // chunks of 128 scores (a round of 32 vectors) at offsets by row
      if (at < 5 || at > 122 || i < 9 || i > width - 9) p.scores[std::size_t(r) * stride + i] = 3.0f + 0.25f * normal(rng);
    }
  p = rounded_to_bf16(p);
  p.lengths = {width, width - 1, width - 7, 30001, 24577, 24579, 2049 * 12, 33333};
  p.row_starts = {0, 1, 2, 3, 5, 7, 11, 6660};
  struct Plan {
    const char* name;
    nsajit::detail::TopkPlanConstraints c;
  };
  const std::vector<Plan> plans = {
      {"default plan", {}},
      {"speculative, 256 threads", {.ctas_per_row = 1, .threads = 256, .speculate = 1}},
      {"speculative, 512 threads", {.ctas_per_row = 1, .threads = 512, .speculate = 1}},
      {"speculative, 1024 threads", {.ctas_per_row = 1, .threads = 1024, .speculate = 1}},
      {"exact, 1024 threads (part of the slice kept)", {.ctas_per_row = 1, .threads = 1024, .speculate = 0}},
      {"exact, 512 threads, nothing kept", {.ctas_per_row = 1, .threads = 512, .force_streaming = true, .speculate = 0}},
      {"cluster sweeps, 2 CTAs", {.ctas_per_row = 2, .speculate = 0}},
      {"cluster sweeps, 8 CTAs", {.ctas_per_row = 8, .speculate = 0}},
      {"cluster lists, 4 CTAs", {.ctas_per_row = 4, .threads = 1024}},
      {"cluster lists, 8 CTAs", {.ctas_per_row = 8}},
      {"cluster lists, 16 CTAs", {.ctas_per_row = 16, .threads = 512}},
  };
  for (const Plan& plan : plans) {
    INFO(plan.name);
    LaunchOverride o(plan.c);
    check_bf16(p);
  }
  // Thresholds a bf16 key resolves at 16 bits (topk_resolve_bf16): negative (low key bits all
  // ones), among ties, at +-0.0 and subnormals (the packed key conversion), and NaN's key 1.
  struct Dist {
    const char* name;
    std::function<float()> draw;
  };
  const std::vector<Dist> dists = {
      {"all negative", [&] { return -std::fabs(normal(rng)); }},
      {"-inf, -0.0, +0.0 and a few positives",
       [&] { const int k = int(rng() % 64); return k == 0 ? std::fabs(normal(rng)) : k < 20 ? -kInf : k < 40 ? -0.0f : 0.0f; }},
      {"subnormals of both signs and zeros",
       [&] { const std::uint16_t m = std::uint16_t(rng() % 0x80); return ref::bf16_to_float(std::uint16_t(rng() % 2 ? m : 0x8000 | m)); }},
      {"97% NaN of both signs (threshold NaN)",
       [&] { return rng() % 100 < 97 ? ref::bf16_to_float(std::uint16_t(rng() % 2 ? 0x7fc1 : 0xffc0)) : normal(rng); }},
  };
  for (const Dist& d : dists) {
    auto q = rounded_to_bf16(make_problem(3, 30000, 2048, d.draw, 30003));
    q.lengths = {30000, 29993, 2049 * 12};
    q.row_starts = {0, 5, 3};
    for (const Plan& plan : plans) {
      INFO(d.name << ", " << plan.name);
      LaunchOverride o(plan.c);
      check_bf16(q);
    }
  }
}

// The dense kernel's bf16 rows load pairs too (templates/topk_dense.cuh, topk_dense_vector): slots
// 2 i, 2 i + 1 of thread t the pair of vectors p0 + 2 (t + 256 i) + {0, 1}, the last slot the single
// vector p0 + 2048 + t, wrapped to vector 0 when p0 = 1. Rows at all 8 starts in a 16-byte unit
// (heads 0-3, phases 0 and 1), up to 9212 scores (2304 vectors: the wrapped vector 0 is partial at
// head 3), with the largest scores on the row's first and last vectors and on the slots' seams
// (every 2048 scores: pair slot i's first vector is 512 i + p0): a vector loaded twice, missed
// or keyed from the wrong half moves the output.
TEST_CASE("topk gpu bf16: dense rows load pairs at both phases, every head, row_starts, fused modes") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const auto bf16 = nsajit::ScoreDtype::bf16;
  const int width = 9212, stride = width + 1, rows = 16, topk = 2048;  // row r starts 5 r elements into a 16-byte unit (mod 8)
  const I lengths = {9212, 4097, 8191, 9212, 9211, 6001, 8189, 5003, 9209, 9212, 7777, 4099, 9205, 8193, 6143, 9210};
  const I starts = {1, 7, 13, 11, 1, 7, 813, 11, 1, 7, 13, 11, 1, 807, 13, 11};  // again all 8 starts in a unit
  // Rows of draw(), the largest scores at the slice's edges and seams (positions from the row's start).
  auto build = [&](const I& row_starts, const std::function<float()>& draw) {
    auto p = make_problem(rows, width, topk, draw, stride);
    p.lengths = lengths;
    p.row_starts = row_starts;
    for (int r = 0; r < rows; ++r) {
      const int start = row_starts.empty() ? 0 : row_starts[r];
      const int len = std::min(lengths[r], width - start);
      for (int pos = 0; pos < len; ++pos)
        if (pos < 9 || pos >= len - 9 || pos % 2048 < 12 || pos % 2048 > 2036)
          p.scores[std::size_t(r) * stride + start + pos] = 3.0f + 0.25f * normal(rng);
    }
    return rounded_to_bf16(p);
  };
  LaunchOverride dense(kDenseRows);
  struct Dist {
    const char* name;
    std::function<float()> draw;
  };
  const std::vector<Dist> dists = {
      {"normal", [&] { return normal(rng); }},
      {"ReLU sums: 99% exact 0.0 (threshold on the 0.0 plateau)", [&] { return rng() % 100 ? 0.0f : std::fabs(normal(rng)); }},
      {"bf16 bit patterns (NaN, inf, subnormals, -0.0)", [&] { return ref::bf16_to_float(std::uint16_t(rng())); }},
  };
  for (const Dist& d : dists) {
    INFO(d.name);
    check_bf16(build({}, d.draw));
    check_bf16(build(starts, d.draw));
  }
  const auto p = build({}, [&] { return normal(rng); });
  const I sorted = DeviceTopk(p, nullptr, true, bf16).run();
  const std::string why_sorted = explain(p, sorted, ref::topk(p));
  CHECK_MESSAGE(why_sorted.empty(), why_sorted);
  const I request_len(p.lengths.begin(), p.lengths.end());
  check_fused(p, ref::TopkTransform{ref::decode_tables(shuffled_page_table_1(rng, rows, width, 64, request_len), rows,
                                                       width, 64)},
              bf16);
  ref::TopkTransform prefill;  // rows 0-6 of request 0, rows 7-13 of request 1, rows 14-15 of none (all -1)
  prefill.mode = IndexMode::prefill;
  prefill.num_requests = 2;
  prefill.cu_seqlens_q = {0, 7, 14};
  prefill.page_table_width = width;
  prefill.page_table = shuffled_page_table_1(rng, 2, width, 1, I{width, width});
  check_fused(p, prefill, bf16);
  ref::TopkTransform ragged;
  ragged.mode = IndexMode::ragged;
  for (int r = 0; r < rows; ++r) ragged.offsets.push_back(r % 3 == 0 ? 0 : 1000 * r + 7);
  check_fused(p, ragged, bf16);
}

// The threshold's first-digit bin is listed as bit masks a thread, its keys copied back from the
// exchange (every slot of a 9212-score row, dv = 9, the ninth slot's bits in the mask's high word);
// T in bin 0 (NaN's key, alone there) is taken as 1 at once, whatever the NaN count (ranked,
// short list or runs before): 88 of 140, 88 of 300 and 88 of 700 NaNs; fp32 and bf16.
TEST_CASE("topk gpu: keys in registers (dense rows): the bin's listing in every slot, T = NaN in bin 0") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int width = 9212, topk = 2048;
  auto p = make_problem(6, width, topk, [] { return 0.0f; });
  for (int r = 0; r < p.rows; ++r) {
    float* row = p.scores.data() + std::ptrdiff_t(r) * width;
    if (r < 3) {  // 1960 above 2, then NaNs, the row cut after them
      const int nans = r == 0 ? 140 : r == 1 ? 300 : 700;
      for (int i = 0; i < width; ++i) row[i] = i < 1960 ? 2.0f + unit(rng) : kNaN;
      p.lengths[r] = 1960 + nans;
      std::shuffle(row, row + p.lengths[r], rng);
    } else {  // 1900 above 2, a bin of 150, 200 or 400 keys in [1, 1.125) over the whole row (ranked, ranked,
              // the short list), the rest below
      const int bin = r == 3 ? 150 : r == 4 ? 200 : 400;
      for (int i = 0; i < width; ++i)
        row[i] = i < 1900 ? 2.0f + unit(rng) : i < 1900 + bin ? 1.0f + 0.12f * unit(rng) : -1.0f - unit(rng);
      std::shuffle(row, row + width, rng);
      p.lengths[r] = width - (r - 3);  // the last vector whole, one short, two short
      row[p.lengths[r] - 1] = 1.0f + 0.12f * unit(rng);  // a bin key in the row's last (partial) vector, slot 8
    }
  }
  LaunchOverride dense(kDenseRows);
  const I got = DeviceTopk(p).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
  CHECK(DeviceTopk(p).run() == got);
  check_bf16(rounded_to_bf16(p));
}

TEST_CASE("topk gpu: keys in registers (dense rows): staging lanes with every key selected beside lanes with none") {
  // Ramps and runs put lanes whose 32-36 keys are all above T (the warp's staging loop runs 8-9 trips)
  // next to lanes with none, in the same warp; the order of index and the high word (dv = 9) checked.
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int width = 9212, topk = 2048;
  auto p = make_problem(6, width, topk, [] { return -1.0f; });
  for (int r = 0; r < p.rows; ++r) {
    float* row = p.scores.data() + std::ptrdiff_t(r) * width;
    for (int i = 0; i < width; ++i) {
      const float noise = 0.5f * unit(rng);
      row[i] = r == 0   ? float(i)                                  // the last 2048 positions
               : r == 1 ? float(width - i)                          // the first 2048
               : r == 2 ? ((i / 37) % 2 ? 1000.0f : 0.0f) + noise   // runs of 37
               : r == 3 ? ((i / 160) % 3 == 1 ? 1000.0f : 0.0f) + noise  // runs of 160: whole lanes
               : r == 4 ? float(i % 4097)                           // two ramps, the row cut
                        : (i % 3 == 0 ? 1000.0f : 0.0f) + noise;    // every third
    }
  }
  p.lengths = {width, width - 1, 8192, 6000, 4097, 6143};
  LaunchOverride dense(kDenseRows);
  const I got = DeviceTopk(p).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
  const I sorted = DeviceTopk(p, nullptr, true).run();
  const std::string why_sorted = explain(p, sorted, ref::topk(p));
  CHECK_MESSAGE(why_sorted.empty(), why_sorted);
  check_bf16(rounded_to_bf16(p));
}

namespace {

// Rows for the dense fp32 key (templates/topk_dense.cuh, topk_dense_key: 0 - x, every NaN keyed 1
// through the canonical NaN, 0.0 keyed 0x7fffffff, in one first-digit bin with the negative
// subnormals of magnitude bits < 2^20; the positive ones lie in the bin above). Scores past a
// row's length are 5.0 (never selected). Row 0: a plateau of +0.0 / -0.0, T = 0.0, the bin all
// zeros (resolved at once); row 1: the same with 30 negative subnormals in the bin (refined over
// the runs); row 2: T = 0.0 in a bin of 180 keys (ranked); row 3: T = a negative subnormal, 8 of
// its 20 copies (ranked); row 4: T = NaN in bin 0, 88 of 300; row 5: T = -inf, 148 of 200, over
// NaNs. NaN payloads of both signs below T in every row; each row's first score is a NaN with its
// sign bit set and the last of rows 0-3 a zero or subnormal (edge vectors: width 6001 starts row r
// r % 4 elements into a vector).
constexpr int kDenseZeroLengths[6] = {6001, 6000, 6001, 5999, 2260, 5998};

ref::TopkProblem dense_zero_nan_problem(std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  auto p = make_problem(6, 6001, 2048, [] { return 5.0f; });
  auto nan = [&] { return from_bits((rng() & 0x80000000u) | 0x7f800000u | (1u + rng() % 0x7fffffu)); };
  auto zero = [&] { return rng() % 2 ? -0.0f : 0.0f; };
  auto subnormal = [](bool negative, std::uint32_t bits) { return from_bits((negative ? 0x80000000u : 0u) | bits); };
  auto small = [&](bool negative) { return subnormal(negative, 1u + rng() % 0xfffffu); };  // in 0.0's bin or the next
  for (int r = 0; r < p.rows; ++r) {
    const int len = kDenseZeroLengths[r];
    std::vector<float> v;
    auto add = [&](int n, auto draw) {
      for (int i = 0; i < n; ++i) v.push_back(draw());
    };
    auto fill = [&](auto draw) { add(len - int(v.size()), draw); };
    switch (r) {
      case 0:
      case 1:
        add(1450, [&] { return 0.5f + unit(rng); });
        add(50, [&] { return small(false); });
        if (r == 1) add(30, [&] { return small(true); });
        add(60, nan);
        add(300, [&] { return -1.0f - unit(rng); });
        fill(zero);
        break;
      case 2:
        add(1900, [&] { return 2.0f + unit(rng); });
        add(100, [&] { return small(false); });
        add(100, zero);
        add(80, [&] { return small(true); });
        add(100, nan);
        fill([&] { return -1.0f - unit(rng); });
        break;
      case 3:
        add(1900, [&] { return 2.0f + unit(rng); });
        add(100, zero);
        add(40, [&] { return subnormal(true, 1u + rng() % 0xffu); });
        add(20, [&] { return subnormal(true, 0x100u); });
        add(90, [&] { return subnormal(true, 0x101u + rng() % 0xffeffu); });
        add(100, nan);
        fill([&] { return rng() % 2 ? -kInf : -1.0f - unit(rng); });
        break;
      case 4:
        add(1960, [&] { return 2.0f + unit(rng); });
        fill(nan);
        break;
      default:
        add(1900, [&] { return 2.0f + unit(rng); });
        add(200, [] { return -kInf; });
        fill(nan);
    }
    std::shuffle(v.begin(), v.end(), rng);
    auto first_of = [&](auto pred) { return std::size_t(std::find_if(v.begin(), v.end(), pred) - v.begin()); };
    std::swap(v[0], v[first_of([](float x) { return std::isnan(x); })]);
    v[0] = from_bits(std::bit_cast<std::uint32_t>(v[0]) | 0x80000000u);
    const std::size_t z = first_of([](float x) { return x == 0.0f || std::fpclassify(x) == FP_SUBNORMAL; });
    if (z < v.size()) std::swap(v[z], v.back());
    std::copy(v.begin(), v.end(), p.scores.begin() + std::ptrdiff_t(r) * p.width);
    p.lengths[std::size_t(r)] = len;
  }
  return p;
}

}  // namespace

TEST_CASE("topk dense fp32 keys: the NaN and 0.0 test rows take the thresholds and bins they are built for") {
  for (const unsigned seed : {2024u, 7u, 99u}) {  // the GPU test draws its own rows
    std::mt19937 rng(seed);
    INFO("seed " << seed);
    const ref::TopkProblem p = dense_zero_nan_problem(rng);
    const I sorted = ref::topk(p);
    for (int r = 0; r < p.rows; ++r) {
      INFO("row " << r);
      const float* row = p.scores.data() + std::ptrdiff_t(r) * p.width;
      const int len = kDenseZeroLengths[r];
      const float t = row[sorted[std::size_t(r) * std::size_t(p.topk) + std::size_t(p.topk - 1)]];
      const std::uint32_t tk = ref::order_key(t);
      int above = 0, ties = 0, zero_bin = 0, zeros = 0;
      for (int i = 0; i < len; ++i) {
        const std::uint32_t k = ref::order_key(row[i]);
        above += k > tk;
        ties += k == tk;
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(row[i]);
        zeros += row[i] == 0.0f;
        zero_bin += row[i] == 0.0f || (bits > 0x80000000u && bits <= 0x800fffffu);  // dense fp32: 0.0's first-digit bin
      }
      CHECK(std::isnan(row[0]));
      CHECK(std::signbit(row[0]));
      if (r < 4) CHECK((row[len - 1] == 0.0f || std::fpclassify(row[len - 1]) == FP_SUBNORMAL));
      const int expected_above[6] = {1500, 1500, 2000, 2040, 1960, 1900};
      CHECK(above == expected_above[r]);
      if (r < 3) CHECK(t == 0.0f);
      if (r == 0) CHECK(zero_bin == zeros);  // the bin all zeros: the plateau's shortcut
      if (r == 1) CHECK(zero_bin == zeros + 30);  // > 512: refined over the runs
      if (r == 2) CHECK((zero_bin == 180 && ties == 100));
      if (r == 3) CHECK((std::bit_cast<std::uint32_t>(t) == 0x80000100u && ties == 20 && zero_bin == 250));
      if (r == 4) CHECK((std::isnan(t) && ties == 300));
      if (r == 5) CHECK((t == -kInf && ties == 200));
    }
  }
}

// The rows above on the dense kernel, plain (twice: deterministic) and sorted, each against the
// reference byte for byte; bf16 (the standard keys) on their rounded values.
TEST_CASE("topk gpu: keys in registers (dense rows): NaN payloads of both signs, -0.0 and subnormals around 0.0's bin") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const ref::TopkProblem p = dense_zero_nan_problem(rng);
  LaunchOverride dense(kDenseRows);
  const I got = DeviceTopk(p).run();
  const std::string why = explain(p, got, ref::topk_index_order(p));
  CHECK_MESSAGE(why.empty(), why);
  CHECK(DeviceTopk(p).run() == got);
  const I sorted = DeviceTopk(p, nullptr, true).run();
  const std::string why_sorted = explain(p, sorted, ref::topk(p));
  CHECK_MESSAGE(why_sorted.empty(), why_sorted);
  check_bf16(rounded_to_bf16(p));
}

// bf16 dense rows at dv 6 (a swizzled exchange), the threshold's bin ranked (256 keys), refined over
// the short list (257, 512) or over the runs (513): the listing's copy-back at every pair phase (an
// odd stride: rows start at every 2-byte offset of a 16-byte unit), with a bin key at position 0
// (the wrapped slot when the row starts in the second half of a unit).
TEST_CASE("topk gpu bf16: dense rows, threshold bins of 256..513 keys in a swizzled exchange, a bin key at position 0") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const int width = 6001, topk = 2048;
  const int bin[4] = {256, 257, 512, 513};
  auto p = make_problem(8, width, topk, [] { return 0.0f; });
  for (int r = 0; r < p.rows; ++r) {
    float* row = p.scores.data() + std::ptrdiff_t(r) * width;
    fill_threshold_bin_row(row, width, bin[r % 4], rng);
    const int in_bin = int(std::find_if(row, row + width, [](float x) { return x >= 1.0f && x < 1.125f; }) - row);
    std::swap(row[0], row[in_bin]);
  }
  LaunchOverride dense(kDenseRows);
  check_bf16(rounded_to_bf16(p));
}

TEST_CASE("topk gpu bf16: the pair sweep falls back when its sample misleads it or a warp's list overflows") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 32768;
  auto p = make_problem(4, width, 2048, [&] { return normal(rng); });
  for (int i = 0; i < width; ++i) {
    // Row 0: large scores exactly where the pair sample looks (topk_sample_pairs: the last score of
    // each lane's pair in rounds 0-3 of 256 scores of its warp's segment; segments begin at
    // multiples of 1024 scores at 256, 512 and 1024 threads): 2048 of them in rounds 0 and 2, half
    // the sample, so the bound lands among them and lists fewer than topk keys. Row 1: the largest
    // scores crowd the first 4096 positions (a warp's list overflows). Rows 2 and 3: normal and
    // the fp32 sample's positions in rounds 0 and 2 of 128, which the pair sample sees in part.
    if (i % 8 == 7 && ((i % 1024) / 256 == 0 || (i % 1024) / 256 == 2)) p.scores[i] = 50.0f + normal(rng);
    if (i < 4096) p.scores[std::size_t(width) + i] = 10.0f + normal(rng);
    if (i % 4 == 3 && ((i / 128) % 8 == 0 || (i / 128) % 8 == 2)) p.scores[3 * std::size_t(width) + i] = 50.0f + normal(rng);
  }
  p = rounded_to_bf16(p);
  for (const int threads : {256, 512, 1024}) {
    INFO("threads " << threads);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    check_bf16(p);
    auto shifted = p;  // rows 8 bytes into a 16-byte unit: pair phase 1
    shifted.row_starts = {4, 4, 4, 4};
    check_bf16(shifted);
  }
}

TEST_CASE("topk gpu bf16 fused: decode (MTP, page sizes 1 and 64), prefill, ragged, sorted") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const auto bf16 = nsajit::ScoreDtype::bf16;
  {
    const int next_n = 2, requests = 3, rows = requests * next_n, width = 40000, topk = 2048;
    auto p = rounded_to_bf16(make_problem(rows, width, topk, [&] { return normal(rng); }));
    const I request_len = {40000, 2049, 33333};
    for (int r = 0; r < rows; ++r) p.lengths[r] = request_len[r / next_n] - (next_n - 1 - r % next_n);
    ref::TopkTransform t1;
    t1.mode = IndexMode::decode;
    t1.page_table = shuffled_page_table_1(rng, requests, width, 64, request_len);
    t1.page_table_width = width;
    t1.num_requests = requests;
    t1.next_n = next_n;
    ref::TopkTransform t64 = t1;
    t64.page_size = 64;
    t64.page_table_width = (width + 63) / 64;
    t64.page_table = ref::real_page_table(t1.page_table, requests, width, 64);
    check_fused(p, t1, bf16);
    check_fused(p, t64, bf16);
  }
  {
    const I extend = {3000, 40}, prefix = {0, 20000};
    const I cu = ref::cu_seqlens(extend);
    const int rows = cu.back(), width = 20040;
    auto p = rounded_to_bf16(make_problem(rows, width, 2048, [&] { return rng() % 4 ? 0.0f : std::fabs(normal(rng)); }));
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < extend[b]; ++i) p.lengths[cu[b] + i] = prefix[b] + i + 1;
    ref::TopkTransform t;
    t.mode = IndexMode::prefill;
    t.page_table = shuffled_page_table_1(rng, 2, width, 1, I{3000, 20040});
    t.page_table_width = width;
    t.num_requests = 2;
    t.cu_seqlens_q = cu;
    check_fused(p, t, bf16);
    ref::TopkTransform rg;
    rg.mode = IndexMode::ragged;
    for (int r = 0; r < rows; ++r) rg.offsets.push_back(r < 3000 ? 0 : 3000);
    check_fused(p, rg, bf16);
  }
}

// --- the speculative sweep on a plateau of 0.0 (zero ties) -------------------------------------------

namespace {

// The path marks of the zero-speculation probe, one word per row (one CTA per row): bit 0 the
// sample's bound fell in 0.0's bin (the zero-counting sweep ran), bit 1 the zeros completed topk
// (the zero-ties output ran). Never freed: the probe builds hold its address.
constexpr int kZeroPathRows = 64;
constexpr std::uint32_t kPlateauSweep = 1u, kZeroTies = 2u;
DeviceBuffer<std::uint32_t>& zero_path_marks() {
  static auto* marks = new DeviceBuffer<std::uint32_t>(std::vector<std::uint32_t>(kZeroPathRows, 0u));
  return *marks;
}

// The probe source of a speculative top-k spec: the product's source with the sweep and
// topk_write_zero_ties wrapped so that each marks its row in the words at `marks` (a device
// address compiled in), so a test sees which rows took the zero-ties path. Only tests compile it.
std::string zero_path_probe_source(const nsajit::KernelSpec& spec, std::uintptr_t marks) {
  REQUIRE(spec.tile.algorithm == Algorithm::speculative_sweep);
  const std::string wrapper = R"(
NSAJIT_DEVICE void topk_zero_path_mark(uint32_t bit) {
  if (threadIdx.x == 0 && blockIdx.x < )" + std::to_string(kZeroPathRows) + R"(u)
    atomicOr(reinterpret_cast<uint32_t*>()" + std::to_string(marks) + R"(ull) + blockIdx.x, bit);
}
template <bool kCountZeros, class... A>
NSAJIT_DEVICE int topk_speculative_sweep_marked(A&&... a) {
  const int n = topk_speculative_sweep<kCountZeros>(a...);
  if (kCountZeros) topk_zero_path_mark(1u);
  return n;
}
template <class... A>
NSAJIT_DEVICE void topk_write_zero_ties_marked(A&&... a) {
  topk_write_zero_ties(a...);
  topk_zero_path_mark(2u);
}
#define topk_speculative_sweep topk_speculative_sweep_marked
#define topk_write_zero_ties topk_write_zero_ties_marked
)";
  return probe_source(spec, wrapper, {"topk_speculative_sweep<true>(", "topk_write_zero_ties("});
}

// The probe build of a speculative spec, marking zero_path_marks.
const nsajit::LoadedKernel& load_zero_path_probe(const nsajit::KernelSpec& spec) {
  return probe_kernel("topk_zero_path_probe", spec, [&] {
    return zero_path_probe_source(spec, reinterpret_cast<std::uintptr_t>(zero_path_marks().get()));
  });
}

// While alive, DeviceTopk runs the zero-path probe; take() returns the rows' marks since the last
// take() (or the start) and clears them.
struct ZeroPathProbe : ProbeLoader {
  ZeroPathProbe() : ProbeLoader(&load_zero_path_probe) { take(); }
  std::vector<std::uint32_t> take(int rows = kZeroPathRows) {
    std::vector<std::uint32_t> m = zero_path_marks().download();
    zero_path_marks().upload(std::vector<std::uint32_t>(kZeroPathRows, 0u));
    m.resize(std::size_t(rows));
    return m;
  }
};

// The kernel's order-preserving key (templates/topk_common.cuh, topk_key) of a non-NaN score.
std::uint32_t order_key(float x) {
  if (x == 0.0f) return 0x80000000u;  // -0.0 == +0.0
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  return u ^ (std::uint32_t(std::int32_t(u) >> 31) | 0x80000000u);
}

// templates/topk_speculative.cuh, topk_sample_rank, in the same float arithmetic.
int sample_rank(int samples, int n, int topk) {
  const float expected = float(samples) * float(topk) / float(n);
  const float fraction = float(topk) / float(n);
  return int(std::ceil(expected + 4.0f * std::sqrt(expected * (1.0f - fraction)) + 1.0f));
}

// Warp w's segment of a slice of n scores starting `head` elements past a vector boundary (the
// kernel's rounds [w R / W, (w + 1) R / W) of 32 vectors of 4 scores).
struct Segment {
  int round_begin, round_end;
};
Segment segment_of(int n, int head, int threads, int w) {
  const int nvec = (head + n + 3) / 4, rounds = (nvec + 31) / 32, warps = threads / 32;
  return {int((long long)rounds * w / warps), int((long long)rounds * (w + 1) / warps)};
}

// The positions topk_sample_bound samples at `threads` threads in round u (0-3) of each warp's
// segment: the last score of each lane's whole vector.
std::vector<int> sampled_positions(int n, int head, int threads, int u) {
  const int vw0 = head == 0 ? 0 : 1, vw1 = std::max(vw0, (head + n) / 4);
  std::vector<int> out;
  for (int w = 0; w < threads / 32; ++w) {
    const Segment g = segment_of(n, head, threads, w);
    for (int lane = 0; lane < 32; ++lane) {
      const int v = (g.round_begin + u) * 32 + lane;
      if (g.round_begin + u < g.round_end && v >= vw0 && v < vw1) out.push_back(4 * v + 3 - head);
    }
  }
  return out;
}

// The keys topk_sample_bound takes from a row of n scores (head as above) at `threads` threads:
// rounds 0-3 of each warp's segment.
std::vector<std::uint32_t> sampled_keys(const float* row, int n, int head, int threads) {
  std::vector<std::uint32_t> sample;
  for (const int u : {0, 1, 2, 3})
    for (const int i : sampled_positions(n, head, threads, u)) sample.push_back(order_key(row[i]));
  return sample;
}

// The speculative kernel's path for one row of n scores (head as above), mirrored from
// templates/topk.cuh and topk_speculative.cuh: the probe's marks (kPlateauSweep when the sample's
// bound is 0.0's first-digit bin; kZeroTies when then no warp's list of positives overflows
// `capacity` and the positives, fewer than topk, and the zeros complete topk).
std::uint32_t zero_path_of(const float* row, int n, int head, int threads, int topk, int capacity) {
  if (n <= topk || 8 * sample_rank(4 * threads, n, topk) > 4 * threads) return 0u;
  std::vector<std::uint32_t> sample = sampled_keys(row, n, head, threads);
  const int r = sample_rank(int(sample.size()), n, topk);
  if (8 * r > int(sample.size())) return 0u;
  std::sort(sample.begin(), sample.end(), std::greater<>());
  if (sample[std::size_t(r - 1)] >> 20 != 0x800u) return 0u;
  long long positives = 0, zeros = 0;
  bool overflow = false;
  for (int w = 0; w < threads / 32; ++w) {
    const Segment g = segment_of(n, head, threads, w);
    int listed = 0;
    for (int i = std::max(0, 128 * g.round_begin - head); i < std::min(n, 128 * g.round_end - head); ++i) {
      listed += row[i] > 0.0f;
      zeros += row[i] == 0.0f;
    }
    positives += listed;
    overflow |= listed > capacity;
  }
  return kPlateauSweep | (!overflow && positives < topk && positives + zeros >= topk ? kZeroTies : 0u);
}

// The list entries per warp of the speculative plan of p at `threads` threads (C = 1).
int list_capacity_of(const ref::TopkProblem& p, int threads, int sm_count, ScoreDtype dtype = ScoreDtype::fp32) {
  const auto q = nsajit::detail::plan_topk_launch(p.rows, p.width, p.topk, dtype, sm_count, 16,
                                                  {.ctas_per_row = 1, .threads = threads, .speculate = 1});
  REQUIRE(speculates(q));
  return nsajit::detail::topk_list_capacity(q, dtype);
}

// Row r's scores from its row_start, and how far they lie past a vector boundary (the devices'
// buffers are 256-byte aligned; bf16 vectors are 4 scores too).
std::size_t row_offset(const ref::TopkProblem& p, int r) {
  const std::int64_t stride = p.score_row_stride > 0 ? p.score_row_stride : p.width;
  return std::size_t(r * stride + (p.row_starts.empty() ? 0 : ref::row_start_of(p, r)));
}
const float* row_of(const ref::TopkProblem& p, int r) { return p.scores.data() + row_offset(p, r); }
int head_of(const ref::TopkProblem& p, int r) { return int(row_offset(p, r) % 4); }

std::vector<std::uint32_t> zero_paths_of(const ref::TopkProblem& p, int threads, int sm_count,
                                         ScoreDtype dtype = ScoreDtype::fp32) {
  const int capacity = list_capacity_of(p, threads, sm_count, dtype);
  std::vector<std::uint32_t> paths;
  for (int r = 0; r < p.rows; ++r)
    paths.push_back(zero_path_of(row_of(p, r), ref::length_of(p, r), head_of(p, r), threads, p.topk, capacity));
  return paths;
}

// "1 1 3 0 ...": a row's marks, for messages.
std::string marks_text(const std::vector<std::uint32_t>& marks) {
  std::string s;
  for (const std::uint32_t m : marks) s += std::to_string(m) + " ";
  return s;
}

// Rows of 32768 whose sample's bound lands in 0.0's bin, at 256, 512 and 1024 threads alike (the
// warps' segments start at multiples of 8 rounds of 128 scores, so the sample is i % 4 == 3 in
// rounds i / 128 = 0-3 mod 8; at 256 and 512 threads a subset of those; the rows mark rounds 0
// and 2, or 0 alone, which the bf16 pair sample (i % 8 == 7) sees in part), topk 2048, rounded
// to bf16. Rows 0-2 fall back (expected marks kPlateauSweep), row 3 (normal) does not reach the
// plateau (0), rows 4 and 5 take the zero ties (kPlateauSweep | kZeroTies).
ref::TopkProblem plateau_bound_problem(std::mt19937& rng) {
  std::normal_distribution<float> normal;
  const int width = 32768, topk = 2048;
  auto negative = [&] { return -std::fabs(normal(rng)) - 1e-3f; };
  auto positive = [&] { return std::fabs(normal(rng)) + 1.0f; };
  ref::TopkProblem p = make_problem(6, width, topk, negative);
  auto sampled = [](int i, bool round2) {
    return i % 4 == 3 && ((i / 128) % 8 == 0 || (round2 && (i / 128) % 8 == 2));
  };
  for (int i = 0; i < width; ++i) {
    float* row = p.scores.data();
    // Row 0: 1024 zeros where the sample looks (a quarter of it): the bound is 0.0's, the zeros
    // (no positives) do not complete topk, so the threshold is negative.
    if (sampled(i, false)) row[i] = 0.0f;
    // Row 1: the same with 100 positives elsewhere (100 + 1024 < topk).
    if (sampled(i, false)) row[width + i] = 0.0f;
    // Row 2: 2048 zeros where the sample looks and 2000 positives crowding the first positions
    // (every other position from 0): with the zeros they would complete topk, but the first
    // warps' lists overflow.
    row[2 * width + i] = sampled(i, true) ? 0.0f : i < 4000 && i % 2 == 0 ? positive() : row[2 * width + i];
    // Row 3: normal scores.
    row[3 * width + i] = normal(rng);
    // Rows 4 and 5: 2048 zeros where the sample looks (row 5: every other one -0.0), 500
    // positives elsewhere: the zeros complete topk, the threshold is 0.0.
    if (sampled(i, true)) row[4 * width + i] = 0.0f;
    if (sampled(i, true)) row[5 * width + i] = i % 8 == 3 ? -0.0f : 0.0f;
  }
  auto sprinkle = [&](int r, int count) {
    for (int placed = 0; placed < count;) {
      const int i = int(rng() % width);
      float& x = p.scores[std::size_t(r) * width + i];
      if (x < 0.0f) {
        x = positive();
        ++placed;
      }
    }
  };
  sprinkle(1, 100);
  sprinkle(4, 500);
  sprinkle(5, 500);
  return rounded_to_bf16(p);
}
// bf16 lists hold twice the entries (one word each): row 2's crowded positives fit them, so its
// zeros complete topk (the zero ties).
const std::vector<std::uint32_t> kPlateauBoundPathsBf16 = {kPlateauSweep, kPlateauSweep, kPlateauSweep | kZeroTies,
                                                           0u, kPlateauSweep | kZeroTies, kPlateauSweep | kZeroTies};
const std::vector<std::uint32_t> kPlateauBoundPaths = {kPlateauSweep, kPlateauSweep, kPlateauSweep, 0u,
                                                       kPlateauSweep | kZeroTies, kPlateauSweep | kZeroTies};

// Rows on the zero-ties path at `threads` threads, none vector-aligned at both ends: a stride of
// width + 3 and odd row_starts put their first scores 0-3 elements past a vector boundary, and
// the lengths end them inside vectors. Even rows: exactly topk - P zeros, so that every zero is
// taken (-0.0 in the partial head vector, 0.0 in the partial tail vector, the rest where the
// sample looks in each warp's round 0; its rounds 1-3 negative), and P positives (some subnormal,
// in 0.0's bin) elsewhere.
// Odd rows: zeros where the sample looks and at 5 % of the other positions, 300 positives: the
// first zeros are taken, the rest not. Rows 6 and 7 (kLongZeroRows): their first 8000 positions
// all zeros (row 7: either sign), then 1000 positives and 10 % negatives among zeros, so that the
// 1048 ties fill whole rounds of zeros (128 a round) over several of the tie writer's batches and
// end inside one. Negatives elsewhere, 0.0 outside the rows (a read past a row's ends would be
// taken). Rounded to bf16. Expected marks: kPlateauSweep | kZeroTies.
constexpr int kZeroTieRows = 8, kLongZeroRows = 2;
ref::TopkProblem zero_ties_problem(std::mt19937& rng, int threads) {
  std::normal_distribution<float> normal;
  const int width = 40000, topk = 2048, rows = kZeroTieRows;
  ref::TopkProblem p = make_problem(rows, width, topk, [] { return 0.0f; }, width + 3);
  p.row_starts = {0, 1, 3, 6, 7, 13, 2, 9};
  const int shorter[rows] = {0, 2, 5, 1, 3, 8, 4, 0};
  for (int r = 0; r < rows; ++r) p.lengths[std::size_t(r)] = width - p.row_starts[std::size_t(r)] - shorter[r];
  for (int r = rows - kLongZeroRows; r < rows; ++r) {
    const int n = p.lengths[std::size_t(r)];
    float* const row = p.scores.data() + row_offset(p, r);
    for (int i = 0; i < n; ++i) row[i] = r % 2 == 1 && rng() % 2 ? -0.0f : 0.0f;
    for (int placed = 0; placed < 1000;) {
      const int i = 8000 + int(rng() % std::uint32_t(n - 8000));
      if (row[i] != 0.0f) continue;
      row[i] = std::fabs(normal(rng)) + 0.5f;
      ++placed;
    }
    for (int i = 8000; i < n; ++i)
      if (row[i] == 0.0f && rng() % 10 == 0) row[i] = -std::fabs(normal(rng)) - 1e-3f;
  }
  for (int r = 0; r < rows - kLongZeroRows; ++r) {
    const int n = p.lengths[std::size_t(r)], head = head_of(p, r);
    float* const row = p.scores.data() + row_offset(p, r);
    std::vector<char> kind(std::size_t(n), 'n');  // n negative, z zero, s sampled (not positive)
    for (const int u : {0, 1, 2, 3})
      for (const int i : sampled_positions(n, head, threads, u))
        kind[std::size_t(i)] = r % 2 == 0 && u != 0 ? 's' : 'z';
    if (r % 2 == 0) {
      for (const int i : {0, 1, 2, n - 5, n - 4, n - 3, n - 2, n - 1}) kind[std::size_t(i)] = 'z';
    } else {
      for (char& k : kind)
        if (k == 'n' && rng() % 20 == 0) k = 'z';
    }
    const long long zeros = std::count(kind.begin(), kind.end(), 'z');
    const int positives = r % 2 == 0 ? topk - int(zeros) : 300;
    REQUIRE(positives > 0);
    for (int placed = 0; placed < positives;) {
      const int i = int(rng() % std::uint32_t(n));
      if (kind[std::size_t(i)] != 'n') continue;
      kind[std::size_t(i)] = 'p';
      ++placed;
    }
    for (int i = 0; i < n; ++i) {
      float& x = row[i];
      switch (kind[std::size_t(i)]) {
        case 'z': x = i < 3 || (r % 2 == 1 && rng() % 2) ? -0.0f : 0.0f; break;
        case 'p':  // a tenth bf16 subnormals
          x = rng() % 10 == 0 ? from_bits(std::uint32_t(1 + rng() % 127) << 16) : std::fabs(normal(rng)) + 0.5f;
          break;
        default: x = -std::fabs(normal(rng)) - 1e-3f;
      }
    }
  }
  return rounded_to_bf16(p);
}

}  // namespace

TEST_CASE("topk launch plan: a speculative plan's warp lists hold normal rows' listing (the kernel's sample mirrored on the CPU)") {
  // Every speculative plan over a grid of shapes at 132 SMs, on rows of N(0, 1) scores: the sample,
  // rank and bound of topk_sample_bound, then each warp's count of scores at or above the bound's
  // first-digit bin. A warp over its list sends the row to the exact path after the sweep, so a
  // plan whose lists overflow on normal rows is a slow plan (and lists under topk, a wrong bound).
  std::mt19937 rng(2026);
  std::normal_distribution<float> normal;
  int planned = 0;
  for (const ScoreDtype dtype : {ScoreDtype::fp32, ScoreDtype::bf16})
  for (const int rows : {64, 4096})
    for (const int width : {24576, 32768, 40000, 49152, 57344, 65536, 131072})
      for (const int topk : {512, 2048, 3072, 4096}) {
        const auto q = plan_topk_launch(rows, width, topk, dtype, 132);
        if (!speculates(q)) continue;
        ++planned;
        const int warps = q.threads / 32, capacity = nsajit::detail::topk_list_capacity(q, dtype);
        INFO(rows << " x " << width << ", topk " << topk << ": " << nsajit::detail::to_string(q));
        std::vector<float> row(std::size_t(width), 0.0f);
        for (int trial = 0; trial < 4; ++trial) {
          for (float& x : row) x = normal(rng);
          if (dtype == ScoreDtype::bf16)  // the bf16 key's first digit is the widened value's
            for (float& x : row) x = ref::bf16_to_float(ref::float_to_bf16(x));
          std::vector<std::uint32_t> sample = sampled_keys(row.data(), width, 0, q.threads);
          const int r = sample_rank(int(sample.size()), width, topk);
          REQUIRE(8 * r <= int(sample.size()));
          std::nth_element(sample.begin(), sample.begin() + (r - 1), sample.end(), std::greater<>());
          const std::uint32_t bound = sample[std::size_t(r - 1)] >> 20 << 20;
          int fullest = 0;
          long long listed = 0;
          for (int w = 0; w < warps; ++w) {
            const Segment g = segment_of(width, 0, q.threads, w);
            int n = 0;
            for (int i = 128 * g.round_begin; i < std::min(width, 128 * g.round_end); ++i)
              n += order_key(row[std::size_t(i)]) >= bound;
            fullest = std::max(fullest, n);
            listed += n;
          }
          CHECK(listed >= topk);
          CHECK_MESSAGE(fullest <= capacity, "fullest warp list " << fullest << " of " << capacity);
        }
      }
  CHECK(planned >= 40);
}

TEST_CASE("topk zero speculation: the test rows take the paths they are built for (the kernel mirrored on the CPU)") {
  // The GPU tests below check the probe's marks against zero_paths_of; here, without a GPU, that
  // their rows are built so that the mirrored kernel takes the intended path at every thread
  // count they run (132 SMs, as the H100 and H200).
  std::mt19937 rng(12345);
  const ref::TopkProblem fallback = plateau_bound_problem(rng);
  for (const int threads : {256, 512, 1024}) {
    INFO("plateau bound rows, threads " << threads);
    const std::vector<std::uint32_t> paths = zero_paths_of(fallback, threads, 132);
    CHECK_MESSAGE(paths == kPlateauBoundPaths, marks_text(paths));
    const std::vector<std::uint32_t> bf16_paths = zero_paths_of(fallback, threads, 132, ScoreDtype::bf16);
    CHECK_MESSAGE(bf16_paths == kPlateauBoundPathsBf16, marks_text(bf16_paths));
  }
  // Row 2 falls back only because its lists overflow: its positives alone are fewer than topk.
  long long row2_positives = 0;
  for (int i = 0; i < fallback.width; ++i) row2_positives += row_of(fallback, 2)[i] > 0.0f;
  CHECK(row2_positives == 2000);
  for (const int threads : {256, 1024}) {
    INFO("zero-ties rows, threads " << threads);
    const ref::TopkProblem p = zero_ties_problem(rng, threads);
    const std::vector<std::uint32_t> paths = zero_paths_of(p, threads, 132);
    CHECK_MESSAGE(paths == std::vector<std::uint32_t>(kZeroTieRows, kPlateauSweep | kZeroTies), marks_text(paths));
    bool head_partial = false, tail_partial = false;
    for (int r = 0; r < p.rows - kLongZeroRows; r += 2) {  // the rows whose every zero is taken
      const int n = ref::length_of(p, r), head = head_of(p, r);
      long long positives = 0, zeros = 0;
      for (int i = 0; i < n; ++i) {
        positives += row_of(p, r)[i] > 0.0f;
        zeros += row_of(p, r)[i] == 0.0f;
      }
      CHECK(positives + zeros == p.topk);
      head_partial |= head != 0;
      tail_partial |= (head + n) % 4 != 0;
    }
    CHECK(head_partial);
    CHECK(tail_partial);
    for (int r = p.rows - kLongZeroRows; r < p.rows; ++r) {  // ties over several of the writer's batches
      long long positives = 0, leading_zeros = 0;
      for (int i = 0; i < ref::length_of(p, r); ++i) positives += row_of(p, r)[i] > 0.0f;
      while (row_of(p, r)[leading_zeros] == 0.0f) ++leading_zeros;
      CHECK(positives == 1000);
      CHECK(leading_zeros >= p.topk - positives);  // the 1048 ties: ~8 rounds of 128 zeros, in warp 0's segment
    }
  }
  // The probe builds the GPU tests load compile (a plain spec and a fused, sorted bf16 one).
  using S = nsajit::KernelSpec;
  const S plain{.family = nsajit::Family::topk, .tile = {.threads = 256, .algorithm = Algorithm::speculative_sweep}};
  const S fused{.family = nsajit::Family::topk, .page_size = 64, .fused_transform = true, .sorted = true,
                .score_dtype = nsajit::ScoreDtype::bf16,
                .tile = {.threads = 1024, .algorithm = Algorithm::speculative_sweep}};
  for (const S& spec : {plain, fused}) {
    INFO(nsajit::readable_name(spec));
    CHECK_NOTHROW(nsajit::compile_cubin("topk_zero_path_probe", zero_path_probe_source(spec, 0x10000u),
                                        nsajit::nvrtc_options(spec.arch)));
  }
}

TEST_CASE("topk gpu: the sweep's bound in 0.0's bin falls back where the zeros fall short or a list overflows") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const ref::TopkProblem p = plateau_bound_problem(rng);
  const int sm_count = nsajit::driver::current_context_info().sm_count;
  for (const int threads : {256, 512, 1024}) {
    const std::vector<std::uint32_t> paths = zero_paths_of(p, threads, sm_count);
    CHECK_MESSAGE(paths == kPlateauBoundPaths, marks_text(paths));  // the rows force the paths
    for (const auto dtype : {ScoreDtype::fp32, nsajit::ScoreDtype::bf16}) {
      INFO("threads " << threads << (dtype == nsajit::ScoreDtype::bf16 ? ", bf16" : ", fp32"));
      const std::vector<std::uint32_t> expected = zero_paths_of(p, threads, sm_count, dtype);
      LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
      check_topk(p, dtype);
      ZeroPathProbe probe;
      check_topk(p, dtype);
      const std::vector<std::uint32_t> marks = probe.take(p.rows);
      CHECK_MESSAGE(marks == expected, "marks " << marks_text(marks) << "expected " << marks_text(expected));
    }
  }
}

TEST_CASE("topk gpu: the sweep's zero ties on unaligned rows and row_starts, sorted, fused decode, bf16") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const int sm_count = nsajit::driver::current_context_info().sm_count;
  for (const int threads : {256, 1024}) {
    const ref::TopkProblem p = zero_ties_problem(rng, threads);
    const std::vector<std::uint32_t> paths = zero_paths_of(p, threads, sm_count);
    CHECK_MESSAGE(paths == std::vector<std::uint32_t>(std::size_t(p.rows), kPlateauSweep | kZeroTies),
                  marks_text(paths));
    const I request_len(std::size_t(p.rows), p.width);
    const I pt1 = shuffled_page_table_1(rng, p.rows, p.width, 64, request_len);
    const ref::TopkTransform t64{ref::decode_tables(pt1, p.rows, p.width, 64), 1};
    const I index_order = ref::topk_index_order(p), sorted = ref::topk(p);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    for (const auto dtype : {ScoreDtype::fp32, nsajit::ScoreDtype::bf16}) {
      // Each launch with the product's kernel, then with the probe (its marks: every row took the
      // zero ties); every output byte against the reference.
      auto check = [&](const char* what, const ref::TopkTransform* t, bool sort, const I& expected) {
        INFO(what << ", threads " << threads << (dtype == nsajit::ScoreDtype::bf16 ? ", bf16" : ", fp32"));
        const I got = DeviceTopk(p, t, sort, dtype).run();
        CHECK_MESSAGE(got == expected, ref::first_difference(got, expected, p.topk));
        ZeroPathProbe probe;
        CHECK(DeviceTopk(p, t, sort, dtype).run() == expected);
        const std::vector<std::uint32_t> marks = probe.take(p.rows);
        CHECK_MESSAGE(marks == paths, "marks " << marks_text(marks) << "expected " << marks_text(paths));
      };
      check("plain", nullptr, false, index_order);
      check("sorted", nullptr, true, sorted);
      check("fused decode, page size 64", &t64, false, ref::apply_transform(t64, p.rows, p.topk, index_order));
      check("fused decode, page size 64, sorted", &t64, true, ref::apply_transform(t64, p.rows, p.topk, sorted));
    }
  }
}

// --- the speculative sweep's lists, warp by warp (a probe build) ------------------------------------

namespace {

// What the list probe records of each warp's sweep (one CTA per row): the bound, the fill the
// sweep returned, and over the list's first min(fill, capacity) entries sum (i + 1) position_i and
// sum (i + 1) score_bits_i (order-sensitive). Never freed: the probe builds hold its address.
constexpr int kListProbeRows = 8, kListProbeWords = 4;
DeviceBuffer<std::uint32_t>& list_probe_marks() {
  static auto* marks =
      new DeviceBuffer<std::uint32_t>(std::vector<std::uint32_t>(kListProbeRows * 32 * kListProbeWords, 0u));
  return *marks;
}

// The probe source of a speculative spec: the product's source with topk_speculative_sweep wrapped
// so that each warp writes its record (above) at `marks`. Only tests compile it.
std::string list_probe_source(const nsajit::KernelSpec& spec, std::uintptr_t marks) {
  REQUIRE(spec.tile.algorithm == Algorithm::speculative_sweep);
  const std::string wrapper = R"(
template <bool kCountZeros>
NSAJIT_DEVICE int topk_speculative_sweep_recorded(const TopkSlice& s, int slice_begin, uint32_t bound, uint32_t list_key,
                                                  uint32_t position_bytes, int capacity, int round_begin, int round_end,
                                                  u32x4 (&raw)[kTopkSweepUnroll], int& zeros) {
  const int n = topk_speculative_sweep<kCountZeros>(s, slice_begin, bound, list_key, position_bytes, capacity,
                                                    round_begin, round_end, raw, zeros);
  __syncwarp();
  const int lane = threadIdx.x & 31;
  uint32_t hp = 0u, hk = 0u;
  for (int i = lane; i < min(n, capacity); i += 32) {
    uint32_t key, position;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(key) : "r"(list_key + 4u * uint32_t(i)));
#if NSAJIT_SCORE_BF16  // one word: the score's bits, its position's offset in the segment
    position = uint32_t(topk_pair_segment_base(s, slice_begin, round_begin)) + (key & 0xffffu);
    key &= 0xffff0000u;
#else
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(position) : "r"(list_key + position_bytes + 4u * uint32_t(i)));
#endif
    hp += uint32_t(i + 1) * position;
    hk += uint32_t(i + 1) * key;
  }
  hp = __reduce_add_sync(0xffffffffu, hp);
  hk = __reduce_add_sync(0xffffffffu, hk);
  if (lane == 0 && blockIdx.x < )" + std::to_string(kListProbeRows) + R"(u) {
    uint32_t* const m = reinterpret_cast<uint32_t*>()" + std::to_string(marks) + R"(ull) +
                        )" + std::to_string(kListProbeWords) + R"(u * (32u * blockIdx.x + (threadIdx.x >> 5));
    m[0] = bound;
    m[1] = uint32_t(n);
    m[2] = hp;
    m[3] = hk;
  }
  return n;
}
#define topk_speculative_sweep topk_speculative_sweep_recorded
)";
  return probe_source(spec, wrapper, {"topk_speculative_sweep<false>("});
}

const nsajit::LoadedKernel& load_list_probe(const nsajit::KernelSpec& spec) {
  return probe_kernel("topk_list_probe", spec, [&] {
    return list_probe_source(spec, reinterpret_cast<std::uintptr_t>(list_probe_marks().get()));
  });
}

// While alive, DeviceTopk runs the list probe; take() returns the records since the last take()
// (or the start) and clears them.
struct ListProbe : ProbeLoader {
  ListProbe() : ProbeLoader(&load_list_probe) { take(); }
  std::vector<std::uint32_t> take() {
    std::vector<std::uint32_t> m = list_probe_marks().download();
    list_probe_marks().upload(std::vector<std::uint32_t>(m.size(), 0u));
    return m;
  }
};

// Rows whose sample bound is 2.0's first-digit bin, [2.0, 2.25) (i % 4 == 3 in [0, 384) and
// [512, 768) of each warp's segment is in it: 3/4 of the fp32 sample, 5/8 of the bf16 pair sample;
// the rest is below 0 but for chosen positions in it too), so that each warp's list is exactly its
// segment's scores >= 2.0. Row stride width + 4: odd rows start 8 bytes into a 16-byte unit (bf16
// pair phase 1, the segments' first and last pairs reaching into the neighbours'). Row 0: a few
// more per warp; row 1 (phase 1): warp 1 lists exactly `capacity`, including its first and last
// 4 scores, as do the neighbours' adjacent 4; row 2: warp 1 capacity + 1; row 3 (phase 1): warp
// 1 capacity + 1; row 4 (length width - 5: a partial last vector, read by element): the last warp
// exactly capacity, including the row's last 4 scores; row 5 (phase 1, length width - 3): the same.
// pad 1 (row stride width + 1): row r starts r % 4 scores past a vector boundary (its first
// vector an edge read by element, the segments shifted by that head; the sample positions with it).
struct ListRows {
  ref::TopkProblem p;
  int capacity;
};
int list_row_head(const ListRows& l, int r) { return int(std::int64_t(r) * l.p.score_row_stride % 4); }
ListRows list_rows(std::mt19937& rng, int threads, int sm_count, int pad = 4, ScoreDtype dtype = ScoreDtype::fp32) {
  const int width = 32768, topk = 2048, rows = 6, warps = threads / 32;
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  ref::TopkProblem p = make_problem(rows, width, topk, [&] { return -1.0f - unit(rng); }, width + pad);
  p.lengths = {width, width, width, width, width - 5, width - 3};
  const int capacity = list_capacity_of(p, threads, sm_count, dtype);
  auto big = [&] { return 2.0f + 0.24f * unit(rng); };
  const int extra = std::max(40, (topk + 200) / warps - 160);  // enough listed for topk
  for (int r = 0; r < rows; ++r) {
    const int n = p.lengths[std::size_t(r)], h = (r * pad) % 4;
    float* const row = p.scores.data() + std::size_t(r) * std::size_t(width + pad);
    std::vector<char> is_big(std::size_t(n), 0);
    for (int w = 0; w < warps; ++w) {
      const Segment g = segment_of(n, h, threads, w);
      const int b = std::max(0, 128 * g.round_begin - h), e = std::min(n, 128 * g.round_end - h);
      for (int i = b; i < e; ++i) {
        const int at = i - (128 * g.round_begin - h);
        if (at % 4 == 3 && (at < 384 || (at >= 512 && at < 768))) is_big[std::size_t(i)] = 1;
      }
      auto fill_to = [&](int want) {  // this segment's bigs up to `want` (its edges first)
        for (int i : {b, b + 1, b + 2, b + 3, e - 4, e - 3, e - 2, e - 1}) is_big[std::size_t(i)] = 1;
        for (int i = b; i < e && std::count(is_big.begin() + b, is_big.begin() + e, 1) < want; ++i)
          if (!is_big[std::size_t(i)] && rng() % 2 == 0) is_big[std::size_t(i)] = 1;
        for (int i = b; i < e && std::count(is_big.begin() + b, is_big.begin() + e, 1) < want; ++i)
          is_big[std::size_t(i)] = 1;
      };
      const int target = r >= 1 && r <= 3 && w == 1 ? capacity + (r >= 2 ? 1 : 0)
                         : r >= 4 && w == warps - 1 ? capacity
                                                    : -1;
      if (target >= 0) {
        fill_to(target);
      } else {
        for (int placed = 0; placed < extra;) {
          const int i = b + int(rng() % std::uint32_t(e - b));
          if (!is_big[std::size_t(i)]) {
            is_big[std::size_t(i)] = 1;
            ++placed;
          }
        }
      }
    }
    if (r >= 1 && r <= 3)  // the neighbours' scores next to warp 1's segment
      for (int w : {0, 2}) {
        const Segment g = segment_of(n, h, threads, w);
        const int i0 = (w == 0 ? 128 * g.round_end - 4 : 128 * g.round_begin) - h;
        for (int i = i0; i < i0 + 4; ++i) is_big[std::size_t(i)] = 1;
      }
    for (int i = 0; i < n; ++i)
      if (is_big[std::size_t(i)]) row[i] = big();
    // Past the row (its tail and the next row's head reach these): listed if a mask were missing.
    for (int i = n; i < width + pad; ++i) row[i] = big();
  }
  return {rounded_to_bf16(p), capacity};
}

// The probe's record each warp of each row must give: bound 2.0's key, fill the segment's scores
// >= 2.0 in index order (their hashes as the probe takes them), or only fill > capacity.
struct ListRecord {
  std::uint32_t bound, fill, hp, hk;
  bool overflow;
};
std::vector<ListRecord> expected_list_records(const ListRows& l, int threads) {
  std::vector<ListRecord> out;
  const std::int64_t stride = l.p.score_row_stride;
  for (int r = 0; r < l.p.rows; ++r) {
    const int n = l.p.lengths[std::size_t(r)], h = list_row_head(l, r);
    for (int w = 0; w < threads / 32; ++w) {
      const Segment g = segment_of(n, h, threads, w);
      ListRecord rec{order_key(2.0f), 0u, 0u, 0u, false};
      for (int i = std::max(0, 128 * g.round_begin - h); i < std::min(n, 128 * g.round_end - h); ++i) {
        const float x = l.p.scores[std::size_t(r) * std::size_t(stride) + std::size_t(i)];
        if (!(x >= 2.0f)) continue;
        ++rec.fill;
        rec.hp += rec.fill * std::uint32_t(i);
        rec.hk += rec.fill * std::bit_cast<std::uint32_t>(x);
      }
      rec.overflow = rec.fill > std::uint32_t(l.capacity);
      out.push_back(rec);
    }
  }
  return out;
}

// The rows' counts at warp 1 and the last warp (the cases the rows are built for), for messages
// and the CPU check.
std::vector<std::uint32_t> list_case_fills(const std::vector<ListRecord>& e, int threads) {
  const int warps = threads / 32;
  return {e[std::size_t(1 * warps + 1)].fill, e[std::size_t(2 * warps + 1)].fill, e[std::size_t(3 * warps + 1)].fill,
          e[std::size_t(4 * warps + warps - 1)].fill, e[std::size_t(5 * warps + warps - 1)].fill};
}

}  // namespace

TEST_CASE("topk list probe: the rows list exactly capacity and capacity + 1 where built to; the probe compiles") {
  std::mt19937 rng(777);
  for (const auto dtype : {ScoreDtype::fp32, ScoreDtype::bf16})
  for (const auto [threads, pad] : {std::pair{256, 4}, std::pair{1024, 4}, std::pair{256, 1}, std::pair{1024, 1}}) {
    INFO("threads " << threads << ", row stride width + " << pad << (dtype == ScoreDtype::bf16 ? ", bf16" : ", fp32"));
    const ListRows l = list_rows(rng, threads, 132, pad, dtype);
    const std::vector<ListRecord> e = expected_list_records(l, threads);
    const std::uint32_t c = std::uint32_t(l.capacity);
    CHECK(list_case_fills(e, threads) == std::vector<std::uint32_t>{c, c + 1, c + 1, c, c});
    long long listed = 0;
    for (int r = 0; r < l.p.rows; ++r) {
      long long row_listed = 0;
      for (int w = 0; w < threads / 32; ++w) {
        const ListRecord& x = e[std::size_t(r * (threads / 32) + w)];
        row_listed += x.fill;
        CHECK(x.overflow == ((r == 2 || r == 3) && w == 1));
      }
      CHECK(row_listed >= l.p.topk);  // so that the rows without an overflow speculate
      listed += row_listed;
    }
    CHECK(listed > 0);
  }
  using S = nsajit::KernelSpec;
  for (const auto dtype : {ScoreDtype::fp32, nsajit::ScoreDtype::bf16}) {
    const S spec{.family = nsajit::Family::topk, .score_dtype = dtype,
                 .tile = {.threads = 1024, .algorithm = Algorithm::speculative_sweep}};
    INFO(nsajit::readable_name(spec));
    CHECK_NOTHROW(nsajit::compile_cubin("topk_list_probe", list_probe_source(spec, 0x10000u),
                                        nsajit::nvrtc_options(spec.arch)));
  }
}

TEST_CASE("topk gpu: the sweep's lists warp by warp: index order, segment edges, row heads, pair phases, capacity and capacity + 1") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const int sm_count = nsajit::driver::current_context_info().sm_count;
  for (const auto dtype : {ScoreDtype::fp32, nsajit::ScoreDtype::bf16})
  for (const auto [threads, pad] : {std::pair{256, 4}, std::pair{1024, 4}, std::pair{256, 1}, std::pair{1024, 1}}) {
    // Rows built for each dtype's capacity (bf16 entries are one word: twice fp32's).
    const ListRows l = list_rows(rng, threads, sm_count, pad, dtype);
    const std::vector<ListRecord> expected = expected_list_records(l, threads);
    const std::uint32_t c = std::uint32_t(l.capacity);
    REQUIRE(list_case_fills(expected, threads) == std::vector<std::uint32_t>{c, c + 1, c + 1, c, c});
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    {
      INFO("threads " << threads << ", row stride width + " << pad
                      << (dtype == nsajit::ScoreDtype::bf16 ? ", bf16" : ", fp32"));
      check_topk(l.p, dtype);
      ListProbe probe;
      check_topk(l.p, dtype);
      const std::vector<std::uint32_t> m = probe.take();
      for (int r = 0; r < l.p.rows; ++r)
        for (int w = 0; w < threads / 32; ++w) {
          const ListRecord& x = expected[std::size_t(r * (threads / 32) + w)];
          const std::uint32_t* got = m.data() + std::size_t(kListProbeWords) * std::size_t(32 * r + w);
          INFO("row " << r << " warp " << w << ": fill " << got[1] << " expected " << x.fill << " (capacity " << c
                      << ")");
          CHECK(got[0] == x.bound);
          if (x.overflow) {
            CHECK(got[1] > c);
          } else {
            CHECK(got[1] == x.fill);
            CHECK(got[2] == x.hp);
            CHECK(got[3] == x.hk);
          }
        }
    }
  }
}

TEST_CASE("topk gpu bf16: four 256-thread CTAs an SM over several waves: one-word lists, 8 slots a thread, topk 2048 and 2560") {
  // The plan's bf16 CTAs for rows over several waves (families/topk/heuristics.cpp): 43,008 bytes
  // each, the exact fallback's candidates past 8 a thread in the overflow list, its staged output
  // (fused, sorted) in hist0. Outputs only: staging topk 2560 in the 2,048 slot words would pass
  // too (the overflow warps after them are dead by then), so this does not tell hist0 from the
  // slots. Rows by r % 7: normal;
  // the largest scores crowding a warp's segment (its list overflows: the exact path, thousands of
  // candidates); one bf16 bucket (every key in one first-digit bin: rescans); ReLU with the
  // threshold on the plateau (zero ties); ReLU with 80 % zeros; negative scores (entries with the
  // sign's low half); a plateau bound whose positives, where the sample does not look, overflow
  // warp 2's list (the exact path above 0.0).
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int sm_count = nsajit::driver::current_context_info().sm_count;
  const int rows = 2 * sm_count + 7, width = 32768;
  for (const int topk : {2048, 2560}) {
    const auto q = nsajit::detail::plan_topk_launch(rows, width, topk, ScoreDtype::bf16, sm_count);
    INFO("topk " << topk << ": " << nsajit::detail::to_string(q));
    REQUIRE(speculates(q));
    REQUIRE(q.threads == 256);
    REQUIRE(q.slots_per_thread == 8);
    REQUIRE(q.dynamic_smem == 43008u);
    auto p = make_problem(rows, width, topk, [] { return 0.0f; });
    for (int r = 0; r < rows; ++r) {
      float* row = p.scores.data() + std::size_t(r) * width;
      for (int i = 0; i < width; ++i) {
        const float z = normal(rng);
        switch (r % 7) {
          case 0: row[i] = z; break;
          case 1: row[i] = i >= 8192 && i < 8192 + 5000 ? 10.0f + z : z; break;
          case 2: row[i] = 1.0f + float(rng() % 8) / 128.0f; break;
          case 3: row[i] = rng() % 300 ? 0.0f : std::fabs(z) + 1.0f; break;
          case 4: row[i] = rng() % 5 ? 0.0f : std::fabs(z); break;
          case 5: row[i] = -std::fabs(z); break;
          default: row[i] = i >= 8192 && i < 12288 && i % 4 != 3 ? std::fabs(z) + 1.0f : 0.0f; break;
        }
      }
      p.lengths[r] = r % 5 == 4 ? width - int(rng() % 4000) : width;  // some rows end inside a warp's segment
    }
    p = rounded_to_bf16(p);
    check_bf16(p);
    {  // the r % 7 == 6 rows (among the probe's first rows): the plateau sweep, then the exact path
      ZeroPathProbe probe;
      const I got = DeviceTopk(p, nullptr, false, ScoreDtype::bf16).run();
      CHECK_MESSAGE(got == ref::topk_index_order(p), ref::first_difference(got, ref::topk_index_order(p), topk));
      const std::vector<std::uint32_t> marks = probe.take();
      for (int r = 6; r < kZeroPathRows; r += 7) CHECK_MESSAGE(marks[std::size_t(r)] == kPlateauSweep, "row " << r);
    }
    const I request_len(std::size_t(rows), width);
    const I pt1 = shuffled_page_table_1(rng, rows, width, 64, request_len);
    check_fused(p, ref::TopkTransform{ref::decode_tables(pt1, rows, width, 64), 1}, ScoreDtype::bf16);
  }
}

TEST_CASE("topk gpu bf16: speculated lists spanning thousands of first-digit bins (huge and infinite scores over negatives)") {
  // 1 % of the scores 1e30 or +inf, the rest -|N(0, 1)|: the sample's bound should lie just under
  // 0.0, so that the lists reach from there to +inf's bin (~2,000 bins) and the first-digit search
  // over them takes more than one 1,024-bin step. Outputs only: which path ran is not asserted.
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  auto p = make_problem(4, 20000, 512, [&] {
    const std::uint32_t u = rng() % 200;
    return u == 0 ? std::numeric_limits<float>::infinity() : u == 1 ? 1e30f : -std::fabs(normal(rng));
  });
  p = rounded_to_bf16(p);
  for (const int threads : {256, 1024}) {
    INFO("threads " << threads);
    LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
    check_bf16(p);
  }
}

TEST_CASE("topk gpu bf16: list entries at the 16-bit offset limit (segments of ~65,400 positions), every head and phase") {
  // The longest bf16 speculative segments the plan allows at 256 threads (bf16_segments_fit: 511
  // rounds of 32 pairs a warp): rows of 523,256 positions, 8 rows 523,257 scores apart (heads 0-3,
  // pair phases 0 and 1), 64 large scores at the end of each warp's segment, so that the listed
  // offsets reach ~65,400 and the selection holds them.
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  std::normal_distribution<float> normal;
  const int width = 523256, rows = 8, threads = 256;
  auto p = make_problem(rows, width, 2048, [&] { return normal(rng); }, width + 1);
  int max_offset = 0;
  for (int r = 0; r < rows; ++r) {
    const int h = r % 4, p0 = r / 4 % 2;  // row r starts r scores past a 16-byte boundary
    float* const row = p.scores.data() + std::size_t(r) * std::size_t(width + 1);
    for (int w = 0; w < threads / 32; ++w) {
      const Segment g = segment_of(width, h, threads, w);
      const int end = std::min(width, 128 * g.round_end - h), base = 128 * g.round_begin - h - 4 * p0;
      for (int i = end - 64; i < end; ++i) row[i] = 20.0f + normal(rng);
      max_offset = std::max(max_offset, end - 1 - base);
    }
  }
  p = rounded_to_bf16(p);
  CHECK(max_offset > 65000);
  CHECK(max_offset <= 65535);
  LaunchOverride one({.ctas_per_row = 1, .threads = threads, .speculate = 1});
  REQUIRE(speculates(plan_topk_launch(rows, width, 2048, ScoreDtype::bf16, 132)));
  check_bf16(p);
}

// --- the cluster lists on a plateau of 0.0 (threshold exactly 0.0) -----------------------------------

namespace {

// What the cluster lists do with a row (templates/topk_cluster_lists.cuh mirrored on the CPU):
// plateau: every CTA's lists hold its keys above 0.0, fewer than topk, and the zeros complete topk
// (topk_cluster_plateau writes the row); fallback: neither that nor the lists' selection can hold
// (a list over capacity or fewer than topk keys listed: the exact path); lists_may_hold: the
// selection from the lists may hold (not mirrored further).
enum class ClusterPath { plateau, fallback, lists_may_hold };

ClusterPath cluster_path_of(const float* row, int len, int head, const nsajit::detail::TopkLaunchPlan& q, int topk) {
  const int c = q.cluster_size, warps = q.threads / 32;
  constexpr std::uint32_t kZeroBin = 0x800u;
  bool all_plateau = true, normal_fails = false;
  long long positives = 0, zeros = 0, listed = 0;
  for (int rank = 0; rank < c; ++rank) {
    const int b = rank * q.slice, n = std::max(0, std::min(len - b, q.slice));
    const int h = (head + b) % 4;  // the slice's first score past a vector boundary
    std::vector<std::uint32_t> keys(std::size_t(std::max(n, 0)));
    std::vector<long long> hist(4096, 0);
    int hi = 0;
    for (int i = 0; i < n; ++i) {
      keys[std::size_t(i)] = order_key(row[b + i]);
      ++hist[keys[std::size_t(i)] >> 20];
      hi = std::max(hi, int(keys[std::size_t(i)] >> 20));
    }
    const int list_rank = int((5LL * topk * n + 4LL * len - 1) / (4LL * len)) + 16;
    const int bottom = std::max(hi - 31, 0);
    int cut = bottom;
    bool reached = false;
    long long above = 0;
    for (int bin = hi; bin >= bottom && !reached; --bin) {
      if (above + hist[std::size_t(bin)] >= list_rank) {
        cut = bin;
        reached = hist[std::size_t(bin)] > 0;
      }
      above += hist[std::size_t(bin)];
    }
    const bool plateau = n == 0 || (hist[kZeroBin] != 0 && (!reached || cut <= int(kZeroBin)));
    const int sent_cut = plateau ? std::max(cut, int(kZeroBin) + 1) : cut;  // a plateau's message: bins above 0.0's
    long long inclusive = 0;
    for (int bin = sent_cut; bin <= hi; ++bin) inclusive += hist[std::size_t(bin)];
    const bool fits = inclusive <= q.cluster_list_capacity;
    const std::uint32_t cut_key = std::max(std::uint32_t(sent_cut) << 20, 1u);
    const std::uint32_t list_key = plateau ? 0x80000001u : cut_key;
    bool overflow = false;
    long long mine = 0;
    const int nvec = n > 0 ? (h + n + 3) / 4 : 0, rounds = (nvec + 31) / 32;
    for (int w = 0; w < warps && (fits || plateau); ++w) {
      const int r0 = int((long long)rounds * w / warps), r1 = int((long long)rounds * (w + 1) / warps);
      int warp_n = 0;
      for (int i = std::max(0, 128 * r0 - h); i < std::min(n, 128 * r1 - h); ++i)
        warp_n += keys[std::size_t(i)] >= list_key;
      overflow |= warp_n > q.cluster_warp_capacity;
      mine += warp_n;
    }
    const long long slice_zeros = std::count(keys.begin(), keys.end(), 0x80000000u);
    all_plateau &= plateau && !overflow;
    positives += mine;
    zeros += slice_zeros;
    normal_fails |= !fits || overflow;
    listed += inclusive;
  }
  if (all_plateau && positives < topk && positives + zeros >= topk) return ClusterPath::plateau;
  return normal_fails || listed < topk ? ClusterPath::fallback : ClusterPath::lists_may_hold;
}

// The launch shapes of the plateau tests: 8 rows over clusters of 2, 4, 8 and 16 CTAs (slices of
// 16384, 16384, 16384 and 8192 at 1024, 1024, 1024 and 512 threads), all on the cluster lists.
struct ClusterShape {
  int ctas, width;
};
const std::vector<ClusterShape> kPlateauShapes = {{2, 32768}, {4, 65536}, {8, 131072}, {16, 131072}};
constexpr int kPlateauRows = 8;

nsajit::detail::TopkLaunchPlan plateau_plan(const ClusterShape& shape, int sm_count) {
  return nsajit::detail::plan_topk_launch(kPlateauRows, shape.width, 2048, ScoreDtype::fp32, sm_count, 16,
                                          {.ctas_per_row = shape.ctas});
}

// Rows whose threshold is 0.0 or near it, over `c` slices of `width / c`, topk 2048:
// 0: 1000 positives (a tenth subnormal, in 0.0's first-digit bin), the rest 0.0 and -0.0;
// 1: 1900 positives, negatives, one zero at the start of each slice and 400 in the last one (the
//    last CTA's zeros complete topk after the other CTAs'); 2: 300 positives, 1000 zeros, the rest
//    negative (the zeros fall short: the threshold is negative); 3: normal scores; 4: 1000
//    positives crowded into the first 1500 positions, the rest 0.0 (a warp's list overflows);
//    5: 1200 positives and exactly 848 zeros (every zero taken), the rest negative; 6: 600
//    positives, half subnormal, the rest zeros, the row shortened to end inside a vector in the
//    middle of its last slice; 7: no positives, 2100 zeros in every slice but the last, the rest
//    negative (the plateau CTAs' messages must claim no bin of 0.0: the row's threshold 0.0 is
//    the exact path's). Expected paths: kPlateauRowPaths.
ref::TopkProblem cluster_plateau_problem(std::mt19937& rng, const ClusterShape& shape) {
  std::normal_distribution<float> normal;
  const int width = shape.width, topk = 2048, slice = width / shape.ctas;
  ref::TopkProblem p = make_problem(kPlateauRows, width, topk, [] { return 0.0f; });
  auto positive = [&] { return std::fabs(normal(rng)) + 0x1.0p-20f; };
  auto subnormal = [&] { return from_bits(std::uint32_t(1 + rng() % 15) << 16); };  // exact in bf16, bin 0x800
  auto negative = [&] { return -std::fabs(normal(rng)) - 1e-3f; };
  auto row = [&](int r) { return p.scores.data() + std::size_t(r) * width; };
  // count positions in [lo, hi) where is_free holds, set by value().
  auto place = [&](int r, int count, int lo, int hi, auto is_free, auto value) {
    for (int placed = 0; placed < count;) {
      const int i = lo + int(rng() % std::uint32_t(hi - lo));
      if (!is_free(row(r)[i])) continue;
      row(r)[i] = value();
      ++placed;
    }
  };
  auto is_zero = [](float x) { return x == 0.0f; };
  auto is_negative = [](float x) { return x < 0.0f; };
  for (int i = 0; i < width; ++i) row(0)[i] = i % 5 == 0 ? -0.0f : 0.0f;
  place(0, 900, 0, width, is_zero, positive);
  place(0, 100, 0, width, is_zero, subnormal);
  for (int i = 0; i < width; ++i) row(1)[i] = negative();
  for (int q = 0; q < shape.ctas; ++q) row(1)[q * slice + 7] = q % 2 ? -0.0f : 0.0f;
  place(1, 400, width - slice, width, is_negative, [] { return 0.0f; });
  place(1, 1900, 0, width, is_negative, positive);
  for (int i = 0; i < width; ++i) row(2)[i] = negative();
  place(2, 1000, 0, width, is_negative, [] { return 0.0f; });
  place(2, 300, 0, width, is_negative, positive);
  for (int i = 0; i < width; ++i) row(3)[i] = normal(rng);
  place(4, 1000, 0, 1500, is_zero, positive);
  for (int i = 0; i < width; ++i) row(5)[i] = negative();
  place(5, 848, 0, width, is_negative, [&] { return rng() % 3 ? 0.0f : -0.0f; });
  place(5, 1200, 0, width, is_negative, positive);
  for (int i = 0; i < width; ++i) row(6)[i] = i % 7 == 0 ? -0.0f : 0.0f;
  place(6, 300, 0, width, is_zero, positive);
  place(6, 300, 0, width, is_zero, subnormal);
  p.lengths[6] = width - slice / 2 - 3;
  for (int i = 0; i < width; ++i) row(7)[i] = negative();
  place(7, 2100, 0, width - slice, is_negative, [] { return 0.0f; });
  return p;
}
const std::vector<ClusterPath> kPlateauRowPaths = {
    ClusterPath::plateau,  ClusterPath::plateau, ClusterPath::fallback, ClusterPath::lists_may_hold,
    ClusterPath::fallback, ClusterPath::plateau, ClusterPath::plateau,       ClusterPath::fallback};

std::vector<ClusterPath> cluster_paths_of(const ref::TopkProblem& p, const nsajit::detail::TopkLaunchPlan& q) {
  std::vector<ClusterPath> paths;
  for (int r = 0; r < p.rows; ++r)
    paths.push_back(cluster_path_of(row_of(p, r), ref::length_of(p, r), head_of(p, r), q, p.topk));
  return paths;
}

std::string paths_text(const std::vector<ClusterPath>& paths) {
  std::string s;
  for (const ClusterPath c : paths)
    s += c == ClusterPath::plateau ? "plateau " : c == ClusterPath::fallback ? "fallback " : "lists ";
  return s;
}

}  // namespace

TEST_CASE("topk cluster plateau: the test rows take the paths they are built for (the lists mirrored on the CPU)") {
  // The GPU test below checks the probe's fallbacks against cluster_paths_of; here, without a GPU,
  // that its rows are built so that the mirrored lists take the intended path at every cluster
  // size (132 SMs), fp32 and bf16.
  for (const unsigned seed : {2024u, 7u, 99u})  // the GPU test draws its own rows: the paths must not depend on the draw
  for (const ClusterShape& shape : kPlateauShapes) {
    std::mt19937 rng(seed);
    INFO("seed " << seed);
    const nsajit::detail::TopkLaunchPlan q = plateau_plan(shape, 132);
    INFO(nsajit::detail::to_string(q));
    REQUIRE(lists_over_cluster(q));
    REQUIRE(q.cluster_size == shape.ctas);
    const ref::TopkProblem p = cluster_plateau_problem(rng, shape);
    for (const ref::TopkProblem& v : {p, rounded_to_bf16(p)}) {
      const std::vector<ClusterPath> paths = cluster_paths_of(v, q);
      CHECK_MESSAGE(paths == kPlateauRowPaths, paths_text(paths));
      // The rows on the plateau: threshold exactly 0.0, with zeros to take.
      for (int r = 0; r < v.rows; ++r) {
        if (kPlateauRowPaths[std::size_t(r)] != ClusterPath::plateau) continue;
        std::vector<float> sorted(row_of(v, r), row_of(v, r) + ref::length_of(v, r));
        std::nth_element(sorted.begin(), sorted.begin() + (v.topk - 1), sorted.end(), std::greater<float>());
        CHECK(sorted[std::size_t(v.topk - 1)] == 0.0f);
      }
    }
    // Row 5 takes every zero.
    long long zeros5 = 0;
    for (int i = 0; i < p.width; ++i) zeros5 += row_of(p, 5)[i] == 0.0f;
    CHECK(zeros5 == 848);
  }
  // The probe builds the GPU test loads compile (a plain spec at 512 threads and a fused, sorted
  // bf16 one at 1024).
  using S = nsajit::KernelSpec;
  const S plain{.family = nsajit::Family::topk, .tile = {.threads = 512, .algorithm = Algorithm::cluster_lists}};
  const S fused{.family = nsajit::Family::topk, .page_size = 64, .fused_transform = true, .sorted = true,
                .score_dtype = nsajit::ScoreDtype::bf16, .tile = {.threads = 1024, .algorithm = Algorithm::cluster_lists}};
  for (const S& spec : {plain, fused}) {
    INFO(nsajit::readable_name(spec));
    CHECK_NOTHROW(nsajit::compile_cubin("topk_cluster_fallback_probe", cluster_fallback_probe_source(spec),
                                        nsajit::nvrtc_options(spec.arch)));
  }
}

TEST_CASE("topk gpu: cluster lists on a plateau of 0.0 (threshold 0.0, -0.0, subnormals, zeros short), 2-16 CTAs") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const int sm_count = nsajit::driver::current_context_info().sm_count;
  for (const ClusterShape& shape : kPlateauShapes) {
    const nsajit::detail::TopkLaunchPlan q = plateau_plan(shape, sm_count);
    REQUIRE(lists_over_cluster(q));
    const ref::TopkProblem p32 = cluster_plateau_problem(rng, shape);
    const I request_len(std::size_t(p32.rows), p32.width);
    const ref::TopkTransform t{
        ref::decode_tables(shuffled_page_table_1(rng, p32.rows, p32.width, 64, request_len), p32.rows, p32.width, 64)};
    LaunchOverride cluster({.ctas_per_row = shape.ctas});
    for (const auto dtype : {ScoreDtype::fp32, nsajit::ScoreDtype::bf16}) {
      const bool bf16 = dtype == nsajit::ScoreDtype::bf16;
      const ref::TopkProblem p = bf16 ? rounded_to_bf16(p32) : p32;
      INFO(shape.ctas << " CTAs, width " << shape.width << (bf16 ? ", bf16" : ", fp32"));
      const std::vector<ClusterPath> paths = cluster_paths_of(p, q);
      CHECK_MESSAGE(paths == kPlateauRowPaths, paths_text(paths));  // the rows force the paths
      check_topk(p, dtype);
      const I sorted = DeviceTopk(p, nullptr, true, dtype).run();
      CHECK_MESSAGE(sorted == ref::topk(p), ref::first_difference(sorted, ref::topk(p), p.topk));
      check_fused(p, t, dtype);  // fused decode, unsorted and sorted
      // The probe: a row that falls back writes -2 to its first slot; the plateau rows must not.
      ClusterFallbackProbe probe;
      const I got = DeviceTopk(p, nullptr, false, dtype).run();
      const I reference = ref::topk_index_order(p);
      for (int r = 0; r < p.rows; ++r) {
        INFO("row " << r << ": " << paths_text({paths[std::size_t(r)]}));
        const auto row = got.begin() + std::ptrdiff_t(r) * p.topk;
        if (paths[std::size_t(r)] == ClusterPath::plateau)
          CHECK(std::equal(row, row + p.topk, reference.begin() + std::ptrdiff_t(r) * p.topk));
        else if (paths[std::size_t(r)] == ClusterPath::fallback)
          CHECK(row[0] == -2);
      }
    }
  }
}

// --- host-side argument checks: no GPU needed ----------------------------------------------------

namespace {

nsajit::TopkArgs valid_topk_args() {
  static float scores_storage;
  static std::int32_t ints_storage;
  return {.scores = &scores_storage, .lengths = &ints_storage, .out = &ints_storage, .rows = 4, .width = 1000,
          .topk = 2048};
}

}  // namespace

TEST_CASE("topk arguments: each bad argument is named before anything is launched") {
  using Args = nsajit::TopkArgs;
  const auto* const misaligned =
      reinterpret_cast<const std::int32_t*>(reinterpret_cast<const char*>(valid_topk_args().lengths) + 2);
  nsajit::test::check_bad_arguments<Args>(
      [](const Args& a) { nsajit::topk(a); }, valid_topk_args(),
      {{[](Args& a) { a.topk = 100; }, "nsajit::topk: argument topk = 100: expected a multiple of 64 in [64, 4096]",
        true},
       {[](Args& a) { a.width = (1 << 22) + 1; a.score_row_stride = a.width; },
        "nsajit::topk: argument width = 4194305: expected 0 <= width <= 4194304", true},
       {[](Args& a) { a.topk = 0; }, "argument topk = 0"},
       {[](Args& a) { a.topk = 4160; }, "argument topk = 4160"},
       {[](Args& a) { a.rows = -1; }, "argument rows = -1"},
       {[](Args& a) { a.rows = 1 << 27; }, "argument rows = 134217728: expected 0 <= rows < 2^27"},
       {[&](Args& a) { a.lengths = misaligned; }, "argument lengths = 0x"},
       {[&](Args& a) { a.lengths = misaligned; }, "expected a 4-byte aligned device pointer"},
       {[](Args& a) { a.row_starts = reinterpret_cast<const std::int32_t*>(std::uintptr_t(0x1002)); },
        "argument row_starts = 0x1002"},
       {[](Args& a) { a.width = -2; }, "argument width = -2"},
       {[](Args& a) { a.score_row_stride = 999; }, "argument score_row_stride = 999"},
       {[](Args& a) { a.scores = nullptr; }, "argument scores = null"},
       {[](Args& a) { a.lengths = nullptr; }, "argument lengths = null"},
       {[](Args& a) { a.out = nullptr; }, "argument out = null"},
       // fp32 scores need 4-byte alignment, bf16 2-byte
       {[](Args& a) { a.scores = static_cast<const char*>(a.scores) + 2; }, "argument scores = 0x"},
       {[](Args& a) { a.score_dtype = nsajit::ScoreDtype::bf16; a.scores = static_cast<const char*>(a.scores) + 3; },
        "expected a 2-byte aligned device pointer"},
       {[](Args& a) { a.score_dtype = static_cast<nsajit::ScoreDtype>(7); },
        "nsajit::topk: argument score_dtype = 7: expected fp32 (0) or bf16 (1)", true}});
}

TEST_CASE("topk arguments: fused transform checks") {
  static std::int32_t table_storage;
  using Args = nsajit::TopkArgs;
  auto fused = valid_topk_args();
  fused.fused_transform = true;
  fused.page_table = &table_storage;
  fused.page_table_width = 10;
  fused.num_requests = 4;
  nsajit::test::check_bad_arguments<Args>(
      [](const Args& a) { nsajit::topk(a); }, fused,
      {{[](Args& a) { a.next_n = 3; }, "argument rows = 4: expected a multiple of next_n = 3"},
       {[](Args& a) { a.next_n = 2; }, "argument num_requests = 4: expected rows / next_n = 2"},
       {[](Args& a) { a.next_n = 9; }, "argument next_n = 9"},
       {[](Args& a) { a.page_size = 0; }, "argument page_size = 0"},
       {[](Args& a) { a.page_table_row_stride = 5; }, "argument page_table_row_stride = 5"},
       {[](Args& a) { a.page_table = nullptr; }, "argument page_table = null"},
       {[](Args& a) { a.mode = IndexMode::prefill; }, "argument cu_seqlens_q = null"},
       {[](Args& a) { a.mode = IndexMode::prefill; a.next_n = 2; }, "argument next_n = 2: expected 1 unless mode decode"},
       {[](Args& a) { a.mode = IndexMode::ragged; }, "argument offsets = null"},
       {[](Args& a) { a.mode = static_cast<IndexMode>(7); }, "argument mode = 7"}});
}

TEST_CASE("topk arguments: rows == 0 launches nothing (null pointers allowed)") {
  nsajit::TopkArgs a;
  a.rows = 0;
  a.width = 10;
  CHECK_NOTHROW(nsajit::topk(a));  // returns before any driver call, so this passes without a GPU
}
