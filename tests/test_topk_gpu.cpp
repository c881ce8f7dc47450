// test_topk_gpu.cpp — nsajit::topk (§2) on the GPU against reference::topk, plus host-side
// argument checks (those need no GPU: they throw before any driver call).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "reference/topk.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"
#include "tests/gpu_support.hpp"

namespace ref = nsajit::reference;
using nsajit::test::DeviceBuffer;
using I = std::vector<std::int32_t>;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

unsigned fresh_seed() { return std::random_device{}(); }

// Device copies of a problem's inputs and a poisoned output.
struct DeviceTopk {
  explicit DeviceTopk(const ref::TopkProblem& p)
      : scores(p.scores),
        lengths(p.lengths),
        row_starts(p.row_starts.empty() ? nullptr : std::make_unique<DeviceBuffer<std::int32_t>>(p.row_starts)),
        out(std::size_t(p.rows) * p.topk) {
    args.scores = scores.get();
    args.score_row_stride = p.score_row_stride;
    args.lengths = lengths.get();
    args.row_starts = row_starts ? row_starts->get() : nullptr;
    args.out = out.get();
    args.rows = p.rows;
    args.width = p.width;
    args.topk = p.topk;
  }
  I run() {
    out.poison();
    nsajit::topk(args);
    return out.download();
  }
  DeviceBuffer<float> scores;
  DeviceBuffer<std::int32_t> lengths;
  std::unique_ptr<DeviceBuffer<std::int32_t>> row_starts;
  DeviceBuffer<std::int32_t> out;
  nsajit::TopkArgs args;
};

I run_topk(const ref::TopkProblem& p) { return DeviceTopk(p).run(); }

// Runs on the GPU, compares with the reference; returns the GPU output.
I check_topk(const ref::TopkProblem& p) {
  const I got = run_topk(p);
  const I expected = ref::topk(p);
  const std::string mismatch = ref::topk_mismatch(p, got, expected);
  CHECK_MESSAGE(mismatch.empty(), mismatch);
  return got;
}

// A problem of `rows` rows of `width` scores drawn by `draw`, all rows full length.
template <class Draw>
ref::TopkProblem make_problem(int rows, int width, int topk, Draw draw) {
  ref::TopkProblem p;
  p.rows = rows;
  p.width = width;
  p.topk = topk;
  p.scores.resize(std::size_t(rows) * width);
  for (float& s : p.scores) s = draw();
  p.lengths.assign(rows, width);
  return p;
}

}  // namespace

TEST_CASE("topk gpu: lengths 0, -5, 1, topk-1, topk, topk+1, long, clamped") {
  NSAJIT_REQUIRE_GPU();
  const unsigned seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (const int topk : {64, 512, 1024, 2048, 4096}) {
    INFO("topk " << topk);
    const int width = 131072;
    const I lengths = {0, -5, 1, topk - 1, topk, topk + 1, 2 * topk + 3, 100000, width, width + 7, INT32_MAX};
    auto p = make_problem(int(lengths.size()), width, topk, [&] { return normal(rng); });
    p.lengths = lengths;
    check_topk(p);
  }
}

TEST_CASE("topk gpu: one row of 2^20 and rows past 2^20") {
  NSAJIT_REQUIRE_GPU();
  const unsigned seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  auto p = make_problem(1, 1 << 20, 2048, [&] { return normal(rng); });
  check_topk(p);
  // Long rows whose top-k sits in a plateau and in a narrow band, as two rows of one batch.
  const int width = (1 << 20) + 4097;
  auto q = make_problem(2, width, 2048, [&] { return 0.f; });
  for (int i = 0; i < width; ++i) {
    q.scores[i] = float(rng() % 3);                                   // huge plateaus
    q.scores[width + i] = 1.0f + float(rng() % 65536) * 1e-7f;        // narrow band
  }
  check_topk(q);
}

TEST_CASE("topk gpu: distributions (normal, plateau, equal high bits, bands, inf, NaN, zeros, subnormals, raw bits)") {
  NSAJIT_REQUIRE_GPU();
  const unsigned seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<std::uint32_t> bits;
  auto from_bits = [](std::uint32_t u) { return std::bit_cast<float>(u); };
  struct Dist {
    const char* name;
    std::function<float()> draw;
  };
  const std::vector<Dist> dists = {
      {"normal", [&] { return normal(rng); }},
      {"plateau", [&] { return 0.5f; }},
      {"small integers (many ties)", [&] { return float(int(rng() % 7) - 3); }},
      {"equal in the high 24 bits", [&] { return from_bits(0x3f800000u | (rng() & 0xffu)); }},
      {"equal in the high 16 bits", [&] { return from_bits(0xbf800000u | (rng() & 0xffffu)); }},
      {"narrow band", [&] { return 1000.0f + float(rng() % 1000) * 1e-5f; }},
      {"+-inf and normal", [&] {
         const unsigned c = rng() % 4;
         return c == 0 ? kInf : c == 1 ? -kInf : normal(rng);
       }},
      {"90% NaN", [&] { return rng() % 10 < 9 ? kNaN : normal(rng); }},
      {"100% NaN", [&] { return kNaN; }},
      {"NaN and -inf", [&] { return rng() % 2 ? kNaN : -kInf; }},
      {"-0.0 and +0.0", [&] {
         const unsigned c = rng() % 3;
         return c == 0 ? 0.0f : c == 1 ? -0.0f : -1.0f;
       }},
      {"subnormals", [&] { return from_bits((rng() & 0x80000000u) | (rng() & 0x007fffffu)); }},
      {"raw bit patterns", [&] { return from_bits(bits(rng)); }},
  };
  for (const Dist& d : dists) {
    for (const int topk : {512, 2048}) {
      INFO(d.name << ", topk " << topk);
      auto p = make_problem(6, 20000, topk, d.draw);
      p.lengths = {20000, topk + 1, 3 * topk, 19999, 5000, 2 * topk};
      check_topk(p);
    }
  }
}

TEST_CASE("topk gpu: row_starts (clamped) and a padded row stride") {
  NSAJIT_REQUIRE_GPU();
  const unsigned seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int rows = 64, width = 9000, topk = 2048;
  ref::TopkProblem p;
  p.rows = rows;
  p.width = width;
  p.topk = topk;
  p.score_row_stride = width + 13;  // odd stride: rows are not 16-byte aligned
  p.scores.resize(std::size_t(rows) * p.score_row_stride);
  for (float& s : p.scores) s = rng() % 50 == 0 ? normal(rng) + 3.f : normal(rng);
  std::uniform_int_distribution<int> start(-100, width + 100), len(-10, width + 10);
  for (int r = 0; r < rows; ++r) {
    p.row_starts.push_back(start(rng));
    p.lengths.push_back(len(rng));
  }
  p.row_starts[0] = -3;         // clamps to 0
  p.row_starts[1] = width + 5;  // clamps to width: len 0
  p.row_starts[2] = width - topk - 1;
  p.lengths[2] = width;         // clamps to topk + 1
  check_topk(p);
}

TEST_CASE("topk gpu: deterministic across runs, batches and thread counts") {
  NSAJIT_REQUIRE_GPU();
  const unsigned seed = fresh_seed();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  const int rows = 8, width = 50000, topk = 2048;
  // Heavy ties so that any order-dependence would show.
  auto p = make_problem(rows, width, topk, [&] { return float(rng() % 5); });
  for (int r = 0; r < rows; ++r) p.lengths[r] = width - 997 * r;

  DeviceTopk device(p);
  const I first = device.run();
  CHECK(ref::same_selection(p, first, ref::topk(p)));
  for (int i = 0; i < 2; ++i) CHECK(device.run() == first);  // bit-identical, same order

  // Each row alone gives the same bytes as inside the batch.
  for (int r = 0; r < rows; ++r) {
    ref::TopkProblem alone;
    alone.rows = 1;
    alone.width = width;
    alone.topk = topk;
    alone.scores.assign(p.scores.begin() + std::ptrdiff_t(r) * width,
                        p.scores.begin() + std::ptrdiff_t(r + 1) * width);
    alone.lengths = {p.lengths[r]};
    const I got = run_topk(alone);
    INFO("row " << r);
    CHECK(std::equal(got.begin(), got.end(), first.begin() + std::ptrdiff_t(r) * topk));
  }

  // Every allowed thread count gives the same bytes (launched through the runtime directly).
  for (const int threads : {128, 256, 512, 1024}) {
    INFO("threads " << threads);
    nsajit::KernelSpec spec;
    spec.family = nsajit::Family::topk;
    spec.topk = topk;
    spec.tile.threads = threads;
    spec = nsajit::spec_for_current_device(spec);
    TopkParams params{};
    params.scores = device.args.scores;
    params.score_row_stride = width;
    params.lengths = device.args.lengths;
    params.row_starts = nullptr;
    params.out = device.args.out;
    params.rows = rows;
    params.width = width;
    nsajit::LaunchGeometry geometry;
    geometry.grid_x = rows;
    geometry.block = unsigned(threads);
    device.out.poison();
    nsajit::launch(nsajit::kernel(spec), geometry, &params, nullptr);
    CHECK(device.out.download() == first);
  }
}

// --- host-side argument checks: no GPU needed ----------------------------------------------------

namespace {

// Valid arguments with fake (never dereferenced) device pointers.
nsajit::TopkArgs valid_topk_args() {
  static float scores_storage;
  static std::int32_t ints_storage;
  nsajit::TopkArgs a;
  a.scores = &scores_storage;
  a.lengths = &ints_storage;
  a.out = &ints_storage;
  a.rows = 4;
  a.width = 1000;
  a.topk = 2048;
  return a;
}

std::string topk_error(const nsajit::TopkArgs& a) {
  try {
    nsajit::topk(a);
  } catch (const nsajit::InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST_CASE("topk arguments: each bad argument is named before anything is launched") {
  auto a = valid_topk_args();
  a.topk = 100;
  CHECK(topk_error(a) == "nsajit::topk: argument topk = 100: expected a multiple of 64 in [64, 4096]");
  a.topk = 0;
  CHECK(topk_error(a).find("argument topk = 0") != std::string::npos);
  a.topk = 4160;
  CHECK(topk_error(a).find("argument topk = 4160") != std::string::npos);
  a = valid_topk_args();
  a.rows = -1;
  CHECK(topk_error(a).find("argument rows = -1") != std::string::npos);
  a = valid_topk_args();
  a.width = -2;
  CHECK(topk_error(a).find("argument width = -2") != std::string::npos);
  a = valid_topk_args();
  a.score_row_stride = 999;
  CHECK(topk_error(a).find("argument score_row_stride = 999") != std::string::npos);
  a = valid_topk_args();
  a.scores = nullptr;
  CHECK(topk_error(a).find("argument scores = null") != std::string::npos);
  a = valid_topk_args();
  a.lengths = nullptr;
  CHECK(topk_error(a).find("argument lengths = null") != std::string::npos);
  a = valid_topk_args();
  a.out = nullptr;
  CHECK(topk_error(a).find("argument out = null") != std::string::npos);
}

TEST_CASE("topk arguments: rows == 0 launches nothing (null pointers allowed)") {
  nsajit::TopkArgs a;
  a.rows = 0;
  a.width = 10;
  CHECK_NOTHROW(nsajit::topk(a));  // returns before any driver call, so this passes without a GPU
}
