// bench_topk.cpp — `nsajit bench topk`: nsajit::topk (plain and fused with the paged transform)
// against torch.topk(k, sorted=False) on the same inputs, on the shapes of issue 3.
//
// Inputs are built on the host (a fast xorshift generator), uploaded once, in two distributions:
// roughly normal scores, and ReLU sums like the indexer's (" relu": most scores exactly 0.0, a
// positive tail; every third row has fewer non-zeros than topk, so its threshold is the 0.0 plateau),
// each as fp32 and as bf16 (" bf16": the same values rounded to bf16, torch.topk on bf16 too);
// outputs are poisoned before the checked run; each case is checked against the CPU reference
// (byte for byte against reference::topk_index_order, on sampled rows for large cases). Bytes for
// the floor: the scores each row reads (len * 4 or 2) + lengths + the output written once.
// NSAJIT_TOPK_SWEEP=1 also times every launch shape per plain case (fp32 and bf16) and the
// write-through floor of the plan's grid (every len = topk: launch and write, no selection),
// printed to stderr only.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/index_transform.hpp"
#include "reference/topk.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"
#include "families/topk/heuristics.hpp"
#include "tools/bench/bench_common.hpp"
#include "tools/bench/device_scores.hpp"

namespace nsajit::tools::bench {
namespace {

struct Shape {
  int rows;
  int width;
  int len_lo;  // row r has len_lo + r (clamped to width) when len_lo < width, else width
  std::string name;
};

enum class Distribution { normal, relu };

int length_of_row(const Shape& s, int r) { return s.len_lo >= s.width ? s.width : std::min(s.width, s.len_lo + r); }

// Fraction of non-zero scores in row r of a ReLU-sum row of `len` scores: a quarter, a twentieth,
// or half of topk (the threshold on the 0.0 plateau), by r % 3.
double relu_nonzero_fraction(int r, int len, int topk) {
  if (r % 3 == 0) return 0.25;
  if (r % 3 == 1) return 0.05;
  return len > 0 ? std::min(0.25, 0.5 * topk / len) : 0.0;
}

// relu_kind >= 0: every row of that kind (r % 3 of relu_nonzero_fraction), for the sweep's timing by kind.
void fill_scores(Distribution dist, const Shape& shape, int topk, FastRandom& rng, std::vector<float>& scores,
                 int relu_kind = -1) {
  for (int r = 0; r < shape.rows; ++r) {
    float* row = scores.data() + std::ptrdiff_t(r) * shape.width;
    if (dist == Distribution::normal) {
      for (int i = 0; i < shape.width; ++i) row[i] = rng.sum4_normal();
      continue;
    }
    const double nonzero = relu_nonzero_fraction(relu_kind >= 0 ? relu_kind : r, length_of_row(shape, r), topk);
    for (int i = 0; i < shape.width; ++i)
      row[i] = rng.uniform53() < nonzero ? std::fabs(rng.sum4_normal()) + 0x1.0p-20f : 0.0f;  // ReLU: exact +0.0
  }
}

}  // namespace

int bench_topk(const BenchOptions& options) {
  const int topk = 2048, page_size = 64;
  const std::vector<Shape> shapes = {
      {1, 131072, 131072, "1x131072"},          {8, 131072, 131072, "8x131072"},
      {64, 65536, 65536, "64x65536"},           {128, 131072, 131072, "128x131072"},
      {4096, 8192, 4097, "4096x4097..8192"},    {4096, 32768, 28673, "4096x28673..32768"},
  };
  const bool sweep = std::getenv("NSAJIT_TOPK_SWEEP") && std::string(std::getenv("NSAJIT_TOPK_SWEEP")) == "1";
  TimingOptions timing;
  timing.iters = options.iters;
  std::vector<Case> cases;
  bool all_pass = true;
  driver::current_context();
  for (const ScoreDtype dtype : {ScoreDtype::fp32, ScoreDtype::bf16})
  for (const Distribution dist : {Distribution::normal, Distribution::relu})
  for (const Shape& shape : shapes) {
    const bool bf16 = dtype == ScoreDtype::bf16;
    const std::string suffix = std::string(bf16 ? " bf16" : "") + (dist == Distribution::relu ? " relu" : "");
    const bool want_plain = options.only.empty() || (shape.name + suffix).find(options.only) != std::string::npos;
    const bool want_fused = options.only.empty() || (shape.name + " fused" + suffix).find(options.only) != std::string::npos;
    if (!want_plain && !want_fused) continue;
    std::fprintf(stderr, "topk bench: %s%s\n", shape.name.c_str(), suffix.c_str());
    const std::size_t count = std::size_t(shape.rows) * shape.width;
    std::vector<float> scores(count);
    FastRandom rng{0x9e3779b97f4a7c15ull ^ std::uint64_t(shape.rows) * 1315423911ull ^ std::uint64_t(shape.width)};
    fill_scores(dist, shape, topk, rng, scores);
    // bf16: the values rounded; the reference reads them widened (exactly) from `scores`.
    if (bf16) scores = reference::from_bf16(reference::to_bf16(scores));
    std::vector<std::int32_t> lengths(shape.rows);
    double score_bytes = 0;
    for (int r = 0; r < shape.rows; ++r) {
      lengths[r] = length_of_row(shape, r);
      score_bytes += (bf16 ? 2.0 : 4.0) * lengths[r];
    }
    // A shuffled real page table of page size 64, one row per score row (decode).
    const int pages = (shape.width + page_size - 1) / page_size;
    std::vector<std::int32_t> page_table(std::size_t(shape.rows) * pages);
    std::iota(page_table.begin(), page_table.end(), 0);
    for (std::size_t i = page_table.size(); i > 1; --i) std::swap(page_table[i - 1], page_table[rng.next() % i]);

    const DeviceScores d_scores(dtype, scores);  // `scores` holds the bf16 values widened: exact round trip
    DeviceBuffer<std::int32_t> d_lengths(lengths);
    DeviceBuffer<std::int32_t> d_table(page_table);
    DeviceBuffer<std::int32_t> d_out(std::size_t(shape.rows) * topk);

    // Baseline inputs: scores with positions >= len set to -inf (torch.topk over the full width
    // then selects within each row's length), the page table, the parameters.
    const std::string input_dir = options.work_dir + "/topk-" + std::to_string(shape.rows) + "x" +
                                  std::to_string(shape.width) + (dist == Distribution::relu ? "-relu" : "") +
                                  (bf16 ? "-bf16" : "");
    {
      std::vector<float> masked = scores;
      for (int r = 0; r < shape.rows; ++r)
        std::fill(masked.begin() + std::ptrdiff_t(r) * shape.width + lengths[r],
                  masked.begin() + std::ptrdiff_t(r + 1) * shape.width, -std::numeric_limits<float>::infinity());
      if (bf16) {
        const std::vector<std::uint16_t> masked_bf16 = reference::to_bf16(masked);
        write_blob(input_dir, "scores.bf16", masked_bf16.data(), masked_bf16.size() * 2);
      } else {
        write_blob(input_dir, "scores.f32", masked.data(), masked.size() * 4);
      }
      write_blob(input_dir, "page_table.i32", page_table.data(), page_table.size() * 4);
    }

    // The sampled rows as a small CPU problem.
    const std::vector<int> sampled = sample_rows(shape.rows);
    reference::TopkProblem sub;
    sub.rows = int(sampled.size());
    sub.width = shape.width;
    sub.topk = topk;
    reference::TopkTransform transform;
    transform.mode = IndexMode::decode;
    transform.page_size = page_size;
    transform.page_table_width = pages;
    transform.num_requests = sub.rows;
    for (int r : sampled) {
      sub.scores.insert(sub.scores.end(), scores.begin() + std::ptrdiff_t(r) * shape.width,
                        scores.begin() + std::ptrdiff_t(r + 1) * shape.width);
      sub.lengths.push_back(lengths[r]);
      transform.page_table.insert(transform.page_table.end(), page_table.begin() + std::ptrdiff_t(r) * pages,
                                  page_table.begin() + std::ptrdiff_t(r + 1) * pages);
    }
    const std::vector<std::int32_t> expected_plain = reference::topk_index_order(sub);
    const std::vector<std::int32_t> expected_fused =
        reference::apply_transform(transform, sub.rows, topk, expected_plain);

    for (const bool fused : {false, true}) {
      if (fused ? !want_fused : !want_plain) continue;
      TopkArgs args;
      args.scores = d_scores.get();
      args.score_dtype = dtype;
      args.lengths = d_lengths.get();
      args.out = d_out.get();
      args.rows = shape.rows;
      args.width = shape.width;
      args.topk = topk;
      if (fused) {
        args.fused_transform = true;
        args.mode = IndexMode::decode;
        args.page_table = d_table.get();
        args.page_table_width = pages;
        args.page_size = page_size;
        args.num_requests = shape.rows;
      }
      Case c;
      c.name = shape.name + (fused ? " fused" : "") + suffix;
      c.params = {{"rows", shape.rows}, {"width", shape.width}, {"len_lo", lengths.front()},
                  {"len_hi", lengths.back()}, {"topk", topk}, {"fused", fused}, {"page_size", page_size},
                  {"pages", pages}, {"distribution", dist == Distribution::relu ? "relu" : "normal"},
                  {"score_dtype", to_string(dtype)}};
      if (fused) c.params["transform"] = "decode, real page table of page size 64";
      c.baseline = fused ? "torch.topk(sorted=False) + page-table gather" : "torch.topk(sorted=False)";
      c.baseline_input = input_dir;

      d_out.poison();
      nsajit::topk(args);
      const std::vector<std::int32_t> got = d_out.download();
      std::string check = "pass";
      const std::vector<std::int32_t>& expected = fused ? expected_fused : expected_plain;
      for (std::size_t i = 0; i < sampled.size() && check == "pass"; ++i) {
        const auto g = got.begin() + std::ptrdiff_t(sampled[i]) * topk;
        const auto e = expected.begin() + std::ptrdiff_t(i) * topk;
        if (!std::equal(g, g + topk, e)) check = fmt::format("FAIL: row {} differs from the reference", sampled[i]);
      }
      // Every other row: a valid, distinct set of in-range positions / valid-looking slots.
      if (check == "pass" && !fused) {
        std::vector<std::int32_t> row(topk);
        for (int r = 0; r < shape.rows && check == "pass"; ++r) {
          std::copy(got.begin() + std::ptrdiff_t(r) * topk, got.begin() + std::ptrdiff_t(r + 1) * topk, row.begin());
          std::sort(row.begin(), row.end());
          if (row.front() < 0 || row.back() >= lengths[r] || std::adjacent_find(row.begin(), row.end()) != row.end())
            check = fmt::format("FAIL: row {} has an out-of-range or repeated position", r);
        }
      }
      if (check != "pass") all_pass = false;
      c.check = check;

      TimingOptions recorded = timing;
      recorded.sample_clock = true;
      recorded.soak_ms = options.soak_ms;
      const Timing timed = time_us([&] { nsajit::topk(args); }, recorded);
      add_clock_params(c.params, timed);
      c.nsajit_us = timed.median_us;
      c.nsajit_min_us = timed.min_us;
      c.nsajit_max_us = timed.max_us;
      const double bytes = score_bytes + 4.0 * shape.rows + 4.0 * shape.rows * topk;
      c.floor_us = floor_us(bytes, 0);
      c.gbps = bytes / (c.nsajit_us * 1e-6) / 1e9;
      std::fprintf(stderr, "  %-24s %8.1f us  (floor %.1f us)  %s\n", c.name.c_str(), c.nsajit_us, c.floor_us,
                   c.check.c_str());
      cases.push_back(c);

      if (sweep && !fused) {  // every launch shape (global re-read only at 1-2 CTAs)
        struct Shape2 {
          int ctas, threads;
          bool streaming;
          int speculate;     // C = 1: 0 the exact path, 1 the speculative sweep (else -1)
          int prefetch_row;  // speculative: 0 or 1
          // 0 or 1: the slice asked of L2 before the length is read (clusters; one CTA speculating)
          int prefetch_slice = -1;
          int dense_registers = -1;  // C = 1, 256 threads: 0 or 1 (the row's keys in registers)
        };
        std::vector<Shape2> shapes2;
        for (int ctas : {1, 2, 4, 8, 16})
          for (int threads : {256, 512, 1024})
            for (bool streaming : {false, true}) {
              if (streaming && ctas > 2) continue;
              if (ctas > 1) {
                for (int prefetch : {0, 1}) shapes2.push_back({ctas, threads, streaming, -1, -1, prefetch});
                continue;
              }
              shapes2.push_back({ctas, threads, streaming, 0, -1, -1, threads == 256 && streaming ? 0 : -1});
              if (threads == 256 && streaming) shapes2.push_back({ctas, threads, streaming, 0, -1, -1, 1});
              if (streaming) {
                for (int prefetch : {0, 1}) shapes2.push_back({ctas, threads, streaming, 1, prefetch});
                shapes2.push_back({ctas, threads, streaming, 1, 0, 1});  // the row asked of L2 before its length
              }
            }
        for (const Shape2& sh2 : shapes2) {
          const detail::TopkPlanConstraints o{.ctas_per_row = sh2.ctas, .threads = sh2.threads,
                                             .force_streaming = sh2.streaming, .speculate = sh2.speculate,
                                             .prefetch_row = sh2.prefetch_row, .prefetch_slice = sh2.prefetch_slice,
                                             .dense_registers = sh2.dense_registers};
          const detail::TopkLaunchPlan plan =
              detail::plan_topk_launch(shape.rows, shape.width, topk, dtype, 132, 16, o);
          if (plan.resident_vecs == 0 && !sh2.streaming && sh2.ctas < 8) continue;
          d_out.poison();
          detail::topk(args, o);
          const bool same = d_out.download() == got;
          TimingOptions quick = timing;
          quick.iters = 20;
          const double us = median_us([&] { detail::topk(args, o); }, quick);
          std::fprintf(stderr, "    sweep %-20s %s: %8.1f us %s\n", shape.name.c_str(), detail::to_string(plan).c_str(),
                       us, same ? "" : "OUTPUT DIFFERS");
        }
        // The launch's floor for this grid: the same launch with every length = topk (rows
        // written through, no score read), so a shape's time can be split into launch and work.
        std::vector<std::int32_t> short_lengths(lengths.size());
        for (std::size_t r = 0; r < lengths.size(); ++r) short_lengths[r] = std::min(lengths[r], topk);
        DeviceBuffer<std::int32_t> d_short(short_lengths);
        TopkArgs write_through = args;
        write_through.lengths = d_short.get();
        TimingOptions quick = timing;
        quick.iters = 20;
        std::fprintf(stderr, "    sweep %-20s write-through floor (every len = topk, the plan's grid): %8.1f us\n",
                     shape.name.c_str(), median_us([&] { nsajit::topk(write_through); }, quick));
        // The same launch with the kernel's code warm: a decoy launch of the same kernel on a copy
        // of the scores (into another output) after the flush, so only the scores are cold.
        const DeviceScores d_decoy_scores(dtype, scores);
        DeviceBuffer<std::int32_t> d_decoy_out(std::size_t(shape.rows) * topk);
        TopkArgs decoy = args;
        decoy.scores = d_decoy_scores.get();
        decoy.out = d_decoy_out.get();
        TimingOptions warm_code = quick;
        warm_code.after_flush = [&] { nsajit::topk(decoy); };
        std::fprintf(stderr, "    sweep %-20s code warm (a decoy launch after the flush): %8.1f us\n",
                     shape.name.c_str(), median_us([&] { nsajit::topk(args); }, warm_code));
        // ReLU rows one kind at a time (every row with 25 %, 5 % or fewer than topk non-zeros): a
        // batch's time is its slowest rows', so the mixed case alone does not say which kind costs.
        for (int kind = 0; dist == Distribution::relu && kind < 3; ++kind) {
          std::vector<float> kind_scores(count);
          FastRandom kind_rng{0x5851f42d4c957f2dull ^ std::uint64_t(kind)};
          fill_scores(dist, shape, topk, kind_rng, kind_scores, kind);
          const DeviceScores d_kind_scores(dtype, kind_scores);
          TopkArgs one_kind = args;
          one_kind.scores = d_kind_scores.get();
          one_kind.out = d_decoy_out.get();
          std::fprintf(stderr, "    sweep %-20s relu rows of kind %d only (non-zero fraction %.3f at len %d): %8.1f us\n",
                       shape.name.c_str(), kind, relu_nonzero_fraction(kind, lengths.back(), topk), lengths.back(),
                       median_us([&] { nsajit::topk(one_kind); }, quick));
        }
      }
    }
  }
  const std::string why = run_python_baseline(options.baseline_script, "topk", cases, options.work_dir);
  if (!why.empty()) std::fprintf(stderr, "topk bench: no baseline: %s\n", why.c_str());
  write_results({.family = "topk", .command = options.command, .anchors = options.anchors}, cases, options.out);
  return all_pass ? 0 : 1;
}

}  // namespace nsajit::tools::bench
