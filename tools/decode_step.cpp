// decode_step.cpp — the GPU part of `nsajit run`: one realistic DeepSeek-V3.2 decode step.
//
// A batch of requests with context lengths spread log-uniformly from min_context to max_context,
// a shuffled real page table, random bf16 KV, indexer-like fp32 scores. Runs top-k -> transform ->
// sparse MLA decode through the JIT, checks sampled rows against the CPU references, and times each
// kernel (CUDA events, L2 flushed before each timed launch, median).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"
#include "reference/index_transform.hpp"
#include "reference/sparse_mla.hpp"
#include "reference/topk.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"
#include "templates/kernel_params.h"
#include "tools/bench/bench_common.hpp"
#include "tools/commands.hpp"

namespace nsajit::tools {
namespace {

using bench::FastRandom;

// Rows `rows` of `all` (rows of `per_row` elements), one after another.
template <class T>
std::vector<T> sampled_rows(const std::vector<T>& all, const std::vector<int>& rows, std::size_t per_row) {
  std::vector<T> out;
  for (int r : rows) {
    const auto first = all.begin() + std::ptrdiff_t(std::size_t(r) * per_row);
    out.insert(out.end(), first, first + std::ptrdiff_t(per_row));
  }
  return out;
}

struct Batch {
  int b = 0, h_q = 0, topk = 0, page_size = 0, width = 0, max_pages = 0;
  std::int64_t num_slots = 0;
  std::vector<std::int32_t> seq_lens;    // [b]
  std::vector<std::int32_t> page_table;  // [b, max_pages] page ids, -1 padding
  std::vector<float> scores;             // [b, width]
  std::vector<std::uint16_t> q;          // bf16 [b, h_q, 576]
  std::vector<std::uint16_t> kv;         // bf16 [num_slots, 576]
};

Batch make_batch(const ModelConfig& c) {
  Batch t;
  t.b = c.batch;
  t.h_q = c.h_q();
  t.topk = c.index_topk;
  t.page_size = c.page_size;
  t.width = c.max_context;
  std::mt19937_64 rng(c.seed);
  FastRandom fast{c.seed * 0x9e3779b97f4a7c15ull + 1};

  // Context lengths log-uniform over [min_context, max_context], both ends included, shuffled.
  t.seq_lens = decode_context_lengths(c);
  std::shuffle(t.seq_lens.begin(), t.seq_lens.end(), rng);

  // Pages of every request, drawn from one shuffled pool of page ids.
  t.max_pages = (c.max_context + t.page_size - 1) / t.page_size;
  std::int64_t total_pages = 0;
  for (int len : t.seq_lens) total_pages += (len + t.page_size - 1) / t.page_size;
  std::vector<std::int32_t> pool(total_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  t.page_table.assign(std::size_t(t.b) * t.max_pages, -1);
  std::int64_t next_page = 0;
  for (int r = 0; r < t.b; ++r)
    for (int p = 0; p < (t.seq_lens[r] + t.page_size - 1) / t.page_size; ++p)
      t.page_table[std::size_t(r) * t.max_pages + p] = pool[next_page++];
  t.num_slots = total_pages * t.page_size;

  // Indexer-like scores: noise, a few hot regions, a recency ramp. Positions past the length are
  // +1e30, so a kernel that reads beyond `len` would select them and fail the check.
  t.scores.assign(std::size_t(t.b) * t.width, 1e30f);
  for (int r = 0; r < t.b; ++r) {
    const int len = t.seq_lens[r];
    float* row = &t.scores[std::size_t(r) * t.width];
    for (int p = 0; p < len; ++p) row[p] = fast.roughly_normal() + 2.0f * float(p) / float(len);
    for (int hot = 0; hot < 4; ++hot) {
      const int centre = int(fast.next() % std::uint64_t(len));
      for (int p = std::max(0, centre - 100); p < std::min(len, centre + 100); ++p) row[p] += 3.0f;
    }
  }

  t.q.resize(std::size_t(t.b) * t.h_q * kMlaDimQK);
  for (auto& v : t.q) v = reference::float_to_bf16(fast.roughly_normal());
  t.kv.resize(std::size_t(t.num_slots) * kMlaDimQK);
  for (auto& v : t.kv) v = reference::float_to_bf16(fast.roughly_normal());
  return t;
}

// Rows to check: the shortest and longest requests plus random others.
std::vector<int> rows_to_check(const Batch& t, int count, std::uint64_t seed) {
  std::vector<int> rows;
  rows.push_back(int(std::min_element(t.seq_lens.begin(), t.seq_lens.end()) - t.seq_lens.begin()));
  rows.push_back(int(std::max_element(t.seq_lens.begin(), t.seq_lens.end()) - t.seq_lens.begin()));
  std::mt19937_64 rng(seed + 7);
  while (int(rows.size()) < std::min(count, t.b)) {
    const int r = int(rng() % std::uint64_t(t.b));
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  rows.resize(std::min<std::size_t>(rows.size(), std::size_t(count)));
  return rows;
}


// ---- sparse MLA beyond the bf16 decode step (tools/decode_step.cpp additions for §3/§4): the same
// decode attention over the FP8 paged cache (656-byte tokens, quantized on the host, read directly
// by the kernel), and a prefill step (s_q query rows of the longest request, each with its own
// index row over its causal prefix) over both layouts. Each is checked on sampled rows against
// the fp64 reference (FP8: on the dequantized rows) and timed.
bool check_and_time_mla(const char* label, const SparseMlaDecodeArgs& args, const std::vector<std::uint16_t>& q_host,
                        const std::vector<std::int32_t>& idx_host, const std::vector<std::uint16_t>& ref_pool,
                        std::int64_t num_slots, const std::vector<int>& rows, const bench::TimingOptions& timing,
                        double gathered_bytes_per_row) {
  DeviceBuffer<std::uint16_t> out(std::size_t(args.rows) * args.h_q * kMlaDimV);
  DeviceBuffer<float> lse(std::size_t(args.rows) * args.h_q);
  out.poison();
  lse.poison();
  SparseMlaDecodeArgs a = args;
  a.out = out.get();
  a.lse = lse.get();
  sparse_mla_decode(a);
  const std::vector<std::uint16_t> got_out = out.download();
  const std::vector<float> got_lse = lse.download();
  const auto q_rows = sampled_rows(q_host, rows, std::size_t(a.h_q) * kMlaDimQK);
  const auto idx_rows = sampled_rows(idx_host, rows, std::size_t(a.topk));
  const auto out_rows = sampled_rows(got_out, rows, std::size_t(a.h_q) * kMlaDimV);
  const auto lse_rows = sampled_rows(got_lse, rows, std::size_t(a.h_q));
  const int n = int(rows.size());
  const reference::SparseMlaOutput ref = reference::sparse_mla({.q = q_rows, .kv = ref_pool, .num_slots = num_slots,
                                                                .indices = idx_rows, .rows = n, .h_q = a.h_q,
                                                                .topk = a.topk, .sm_scale = double(a.sm_scale)});
  const reference::MlaComparison cmp = reference::compare_sparse_mla(out_rows, lse_rows, ref, n, a.h_q);
  const double us = bench::median_us([&] { sparse_mla_decode(a); }, timing);
  const double flops = 2.0 * a.rows * a.h_q * a.topk * (kMlaDimQK + kMlaDimV);
  fmt::print("{:<20} {:>10.1f} {:>7.1f} TFLOP/s  {} ({} rows vs fp64: max |err| {:.2e}, cos diff {:.2e}); "
             "{} rows, {:.0f} GB/s gathered\n",
             label, us, flops / us / 1e6, cmp.ok ? "pass" : "FAIL", n, cmp.worst_out_abs, cmp.cos_diff, a.rows,
             gathered_bytes_per_row * a.rows / us / 1e3);
  if (!cmp.ok) fmt::print("  {}\n", cmp.message);
  return cmp.ok;
}

bool run_mla_fp8_and_prefill(const ModelConfig& c, const Batch& t, const SparseMlaDecodeArgs& decode_args,
                             const std::vector<std::int32_t>& decode_slots, const std::vector<int>& check,
                             const bench::TimingOptions& timing) {
  // FP8 paged cache of the whole pool, written by the GPU cache writer (nsajit::fp8_kv_quantize,
  // slot s = page s / P, offset s % P) and checked byte for byte against the CPU reference; its
  // dequantized bf16 copy feeds the attention reference.
  std::vector<std::uint8_t> cache(std::size_t(t.num_slots) * kFp8KvTokenBytes);
  std::vector<std::uint16_t> dequant(t.kv.size());
  for (std::int64_t s = 0; s < t.num_slots; ++s) {
    reference::fp8_kv_quantize_token(t.kv.data() + s * kMlaDimQK, Fp8ScaleFormat::fp32, cache.data() + s * kFp8KvTokenBytes);
    reference::fp8_kv_dequantize_token(cache.data() + s * kFp8KvTokenBytes, dequant.data() + s * kMlaDimQK);
  }
  std::vector<std::int32_t> all_slots(std::size_t(t.num_slots));
  std::iota(all_slots.begin(), all_slots.end(), 0);
  DeviceBuffer<std::int32_t> d_all_slots(all_slots);
  DeviceBuffer<std::uint8_t> d_cache(cache.size());
  d_cache.poison();
  const Fp8KvQuantizeArgs writer{.kv = decode_args.kv, .slots = d_all_slots.get(), .n = int(t.num_slots),
                                 .cache = d_cache.get(), .num_pages = t.num_slots / t.page_size,
                                 .page_size = t.page_size};
  fp8_kv_quantize(writer);
  const std::vector<std::uint8_t> got_cache = d_cache.download();
  std::size_t differing = 0;
  for (std::size_t i = 0; i < cache.size(); ++i) differing += got_cache[i] != cache[i];
  const double writer_us = bench::median_us([&] { fp8_kv_quantize(writer); }, timing);
  fmt::print("{:<20} {:>10.1f} {:>9.0f} GB/s  {} ({} tokens, byte-exact vs reference: {} bytes differ)\n",
             "fp8_kv_quantize", writer_us, double(t.num_slots) * (2 * kMlaDimQK + kFp8KvTokenBytes + 4) / writer_us / 1e3,
             differing == 0 ? "pass" : "FAIL", t.num_slots, differing);
  bool ok = differing == 0;
  SparseMlaDecodeArgs fp8 = decode_args;
  fp8.kv = d_cache.get();
  fp8.kv_dtype = KvDtype::fp8_e4m3;
  fp8.page_size = t.page_size;
  ok &= check_and_time_mla("sparse_mla fp8", fp8, t.q, decode_slots, dequant, t.num_slots, check, timing, 2048.0 * kFp8KvTokenBytes);

  // Prefill: s_q = min(4096, len) query rows at the end of the longest request; row i sees the
  // causal prefix of length len - s_q + i + 1 and selects min(prefix, topk) distinct positions
  // (random), transformed to slots through the request's page table; the rest -1.
  const int r_long = int(std::max_element(t.seq_lens.begin(), t.seq_lens.end()) - t.seq_lens.begin());
  const int len = t.seq_lens[r_long];
  const int s_q = std::min(4096, len);
  FastRandom fast{c.seed * 31 + 5};
  std::vector<std::uint16_t> q(std::size_t(s_q) * t.h_q * kMlaDimQK);
  for (auto& v : q) v = reference::float_to_bf16(fast.roughly_normal());
  std::vector<std::int32_t> idx(std::size_t(s_q) * t.topk, -1);
  std::vector<std::int32_t> perm(len);
  for (int i = 0; i < s_q; ++i) {
    const int prefix = len - s_q + i + 1;
    const int k = std::min(prefix, t.topk);
    std::iota(perm.begin(), perm.begin() + prefix, 0);
    for (int j = 0; j < k; ++j) std::swap(perm[j], perm[j + int(fast.next() % std::uint64_t(prefix - j))]);
    for (int j = 0; j < k; ++j) {
      const int pos = perm[j];
      idx[std::size_t(i) * t.topk + j] =
          t.page_table[std::size_t(r_long) * t.max_pages + pos / t.page_size] * t.page_size + pos % t.page_size;
    }
  }
  DeviceBuffer<std::uint16_t> d_q(q);
  DeviceBuffer<std::int32_t> d_idx(idx);
  DeviceBuffer<std::uint16_t> d_kv(t.kv);
  SparseMlaDecodeArgs pre = decode_args;
  pre.q = d_q.get();
  pre.kv = d_kv.get();
  pre.indices = d_idx.get();
  pre.rows = s_q;
  const std::vector<int> rows{0, s_q / 2, s_q - 1};
  fmt::print("prefill: {} query rows of the {}-token request (causal prefixes {}..{})\n", s_q, len, len - s_q + 1, len);
  ok &= check_and_time_mla("prefill bf16", pre, q, idx, t.kv, t.num_slots, rows, timing, 2048.0 * 1152);
  pre.kv = d_cache.get();
  pre.kv_dtype = KvDtype::fp8_e4m3;
  pre.page_size = t.page_size;
  ok &= check_and_time_mla("prefill fp8", pre, q, idx, dequant, t.num_slots, rows, timing, 2048.0 * kFp8KvTokenBytes);
  return ok;
}

}  // namespace

int run_decode_step(const ModelConfig& c) {
  const Batch t = make_batch(c);
  std::int64_t context_tokens = std::accumulate(t.seq_lens.begin(), t.seq_lens.end(), std::int64_t(0));
  fmt::print("decode batch: {} requests, context {}..{} tokens ({} in all), {} KV slots ({:.0f} MB bf16), "
             "page_size {}, shuffled page table\n",
             t.b, *std::min_element(t.seq_lens.begin(), t.seq_lens.end()),
             *std::max_element(t.seq_lens.begin(), t.seq_lens.end()), context_tokens, t.num_slots,
             double(t.kv.size()) * 2 / 1e6, t.page_size);

  DeviceBuffer<float> scores(t.scores);
  DeviceBuffer<std::int32_t> seq_lens(t.seq_lens);
  DeviceBuffer<std::int32_t> page_table(t.page_table);
  DeviceBuffer<std::uint16_t> q(t.q);
  DeviceBuffer<std::uint16_t> kv(t.kv);
  DeviceBuffer<std::int32_t> raw_idx(std::size_t(t.b) * t.topk);
  DeviceBuffer<std::int32_t> slots(std::size_t(t.b) * t.topk);
  DeviceBuffer<std::uint16_t> out(std::size_t(t.b) * t.h_q * kMlaDimV);
  DeviceBuffer<float> lse(std::size_t(t.b) * t.h_q);
  raw_idx.poison();
  slots.poison();
  out.poison();
  lse.poison();

  const TopkArgs topk_args{.scores = scores.get(), .lengths = seq_lens.get(), .out = raw_idx.get(),
                           .rows = t.b, .width = t.width, .topk = t.topk};
  const IndexTransformArgs transform_args{.mode = IndexMode::decode, .topk_indices = raw_idx.get(),
                                          .out = slots.get(), .rows = t.b, .topk = t.topk,
                                          .page_table = page_table.get(), .page_table_width = t.max_pages,
                                          .page_size = t.page_size, .num_requests = t.b};
  const SparseMlaDecodeArgs attention_args{.q = q.get(), .kv = kv.get(), .num_slots = t.num_slots,
                                           .indices = slots.get(), .out = out.get(), .lse = lse.get(),
                                           .rows = t.b, .h_q = t.h_q, .topk = t.topk,
                                           .sm_scale = float(c.sm_scale)};
  // One step first, on poisoned outputs, for the checks.
  topk(topk_args);
  index_transform(transform_args);
  sparse_mla_decode(attention_args);
  const std::vector<std::int32_t> got_idx = raw_idx.download();
  const std::vector<std::int32_t> got_slots = slots.download();
  const std::vector<std::uint16_t> got_out = out.download();
  const std::vector<float> got_lse = lse.download();

  // Checks on sampled rows (all rows for the transform, which is cheap on the CPU).
  bool all_ok = true;
  const std::vector<int> check = rows_to_check(t, c.check_rows, c.seed);
  int topk_bad = 0;
  for (int r : check) {
    reference::TopkProblem p{.scores = {t.scores.begin() + std::ptrdiff_t(r) * t.width,
                                        t.scores.begin() + std::ptrdiff_t(r + 1) * t.width},
                             .lengths = {t.seq_lens[r]}, .rows = 1, .width = t.width, .topk = t.topk};
    const std::vector<std::int32_t> got(got_idx.begin() + std::ptrdiff_t(r) * t.topk,
                                        got_idx.begin() + std::ptrdiff_t(r + 1) * t.topk);
    if (std::string why = reference::topk_mismatch(p, got, reference::topk(p)); !why.empty()) {
      fmt::print("  top-k row {} (len {}): {}\n", r, t.seq_lens[r], why);
      ++topk_bad;
    }
  }
  reference::IndexTransformProblem tp;
  tp.mode = IndexMode::decode;
  tp.page_table = t.page_table;
  tp.page_table_width = t.max_pages;
  tp.page_size = t.page_size;
  tp.num_requests = t.b;
  tp.topk_indices = got_idx;
  tp.rows = t.b;
  tp.topk = t.topk;
  const std::string transform_diff = reference::first_difference(got_slots, reference::index_transform(tp), t.topk);

  const auto q_rows = sampled_rows(t.q, check, std::size_t(t.h_q) * kMlaDimQK);
  const auto idx_rows = sampled_rows(got_slots, check, std::size_t(t.topk));
  const auto out_rows = sampled_rows(got_out, check, std::size_t(t.h_q) * kMlaDimV);
  const auto lse_rows = sampled_rows(got_lse, check, std::size_t(t.h_q));
  const int n = int(check.size());
  const reference::SparseMlaOutput ref = reference::sparse_mla({.q = q_rows, .kv = t.kv, .num_slots = t.num_slots,
                                                                .indices = idx_rows, .rows = n, .h_q = t.h_q,
                                                                .topk = t.topk, .sm_scale = double(float(c.sm_scale))});
  const reference::MlaComparison cmp = reference::compare_sparse_mla(out_rows, lse_rows, ref, n, t.h_q);

  // Timings.
  const bench::TimingOptions timing{.iters = c.timed_iters};
  const double topk_us = bench::median_us([&] { topk(topk_args); }, timing);
  const double transform_us = bench::median_us([&] { index_transform(transform_args); }, timing);
  const double attention_us = bench::median_us([&] { sparse_mla_decode(attention_args); }, timing);

  const double score_bytes = double(context_tokens) * 4 + double(t.b) * t.topk * 4;
  const double gather_bytes = double(t.b) * t.topk * kMlaDimQK * 2;
  const double flops = 2.0 * t.b * t.h_q * t.topk * (kMlaDimQK + kMlaDimV);
  fmt::print("\n{:<20} {:>10} {:>12}  {}\n", "kernel", "median us", "", "check");
  fmt::print("{:<20} {:>10.1f} {:>9.0f} GB/s  {} ({} sampled rows vs full sort)\n", "topk", topk_us,
             score_bytes / topk_us / 1e3, topk_bad == 0 ? "pass" : "FAIL", n);
  fmt::print("{:<20} {:>10.1f} {:>12}  {} (all {} rows, exact)\n", "index_transform", transform_us, "",
             transform_diff.empty() ? "pass" : "FAIL: " + transform_diff, t.b);
  fmt::print("{:<20} {:>10.1f} {:>7.1f} TFLOP/s  {} ({} rows vs fp64: max |err| {:.2e}, cos diff {:.2e})\n",
             "sparse_mla_decode", attention_us, flops / attention_us / 1e6, cmp.ok ? "pass" : "FAIL", n,
             cmp.worst_out_abs, cmp.cos_diff);
  fmt::print("  (sparse_mla_decode gathers {:.0f} MB: {:.0f} GB/s; timings: median of {}, L2 flushed)\n",
             gather_bytes / 1e6, gather_bytes / attention_us / 1e3, c.timed_iters);
  if (!cmp.ok) fmt::print("  {}\n", cmp.message);
  all_ok = topk_bad == 0 && transform_diff.empty() && cmp.ok;
  all_ok &= run_mla_fp8_and_prefill(c, t, attention_args, got_slots, check, timing);

  fmt::print("\n");
  print_jit_records();
  fmt::print("\nnsajit run: {}\n", all_ok ? "all checks passed" : "CHECKS FAILED");
  return all_ok ? 0 : 1;
}

}  // namespace nsajit::tools
