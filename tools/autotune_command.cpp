// autotune_command.cpp — `nsajit autotune --config FILE [--db FILE] [--dry-run] [--jobs N]`:
// compiles the search space's candidates in parallel, checks each against the CPU reference,
// times the survivors (CUDA events, L2 flushed, median: tools/bench/bench_common.hpp) per shape
// bucket and writes the tuning database atomically (docs/notes/autotune.md).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <numeric>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include "families/sparse_mla/heuristics.hpp"
#include "families/sparse_mla/launch.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"
#include "reference/sparse_mla.hpp"
#include "reference/topk.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"
#include "runtime/json_text.hpp"
#include "runtime/runtime.hpp"
#include "tools/bench/bench_common.hpp"
#include "tools/bench/device_scores.hpp"
#include "tools/commands.hpp"
#include "tools/progress.hpp"
#include "tools/subcommands.hpp"
#include "tools/tuning_config.hpp"

namespace nsajit::tools {
namespace {

constexpr int kDim = 576;
constexpr int kDimV = 512;
constexpr int kTokenBytes = 656;
constexpr int kPageSize = kMlaKvTokensPage;
constexpr float kScale = 0.13524f;
constexpr int kCheckRows = 2;
// A winner replaces the heuristics' choice only when it stays at least this much faster on re-timing.
constexpr double kAdoptRatio = 0.99;

struct AutotuneOptions {
  std::string config;
  std::string db = "tuning_db.json";
  bool dry_run = false;
  bool quiet = false;
  int jobs = 0;
  int sm_count = 0;   // --dry-run without a GPU
  std::string arch;   // --dry-run without a GPU
};

// The kernel a plan launches (detail::topk builds the same spec).
KernelSpec topk_spec(int topk, ScoreDtype score_dtype, const detail::TopkLaunchPlan& plan, Arch arch) {
  KernelSpec s;
  s.family = Family::topk;
  s.topk = topk;
  s.score_dtype = score_dtype;
  s.arch = arch;
  s.tile = detail::topk_tile(plan);
  return with_default_tile(s);
}

// Median of three timings, re-measured alternately: a winner must hold its lead over noise.
struct Confirmed {
  double winner_us, heuristic_us;
};
Confirmed confirm(const std::function<void()>& winner, double winner_us, const std::function<void()>& heuristic,
                  double heuristic_us, const bench::TimingOptions& timing) {
  std::vector<double> w = {winner_us}, h = {heuristic_us};
  for (int round = 0; round < 2; ++round) {
    h.push_back(bench::median_us(heuristic, timing));
    w.push_back(bench::median_us(winner, timing));
  }
  std::sort(w.begin(), w.end());
  std::sort(h.begin(), h.end());
  return {w[1], h[1]};
}

struct Outcome {
  std::vector<TunedEntry> topk, sparse_mla;
  std::vector<std::string> failures;  // checks of the heuristics' own choice that failed
};

// The specs whose compile failed (their candidates are dropped).
bool compiled(const std::vector<CompileItem>& items, const KernelSpec& spec, std::string& error) {
  for (const CompileItem& it : items)
    if (it.spec == spec) {
      error = it.error;
      return it.result == "hit" || it.result == "compiled";
    }
  error = "not compiled";
  return false;
}

// A candidate that failed on the GPU (compile, launch or check): said now, not only in the
// database, so that a kernel bug a plan exposes is seen even when nothing is written.
void drop(std::vector<Dropped>& dropped, const std::string& bucket, std::string what, std::string why) {
  fmt::print(stderr, "nsajit autotune: {}: dropped {}: {}\n", bucket, what, why);
  std::fflush(stderr);
  dropped.push_back({std::move(what), std::move(why)});
}

void tune_topk_bucket(const TopkTuneBucket& b, std::vector<TopkCandidate> cands, std::vector<Dropped> dropped,
                      const std::vector<CompileItem>& compiled_items, Arch arch, const bench::TimingOptions& timing,
                      Outcome& outcome) {
  const int topk = int(b.bucket.topk.lo);
  const ScoreDtype dtype = b.bucket.score_dtype.value_or(ScoreDtype::fp32);
  std::vector<float> scores(std::size_t(b.rows) * b.width);
  bench::NormalRng rng{0x9e3779b97f4a7c15ull ^ std::uint64_t(b.rows) * 1315423911ull ^ std::uint64_t(b.width)};
  for (float& x : scores) x = rng.normal();
  // bf16: the values rounded; the reference reads them widened (exactly).
  if (dtype == ScoreDtype::bf16) scores = reference::from_bf16(reference::to_bf16(scores));
  std::vector<std::int32_t> lengths(b.rows);
  for (int r = 0; r < b.rows; ++r) lengths[r] = b.len_lo >= b.width ? b.width : std::min(b.width, b.len_lo + r);
  const std::vector<int> sampled = bench::sample_rows(b.rows);
  reference::TopkProblem sub;
  sub.rows = int(sampled.size());
  sub.width = b.width;
  sub.topk = topk;
  for (int r : sampled) {
    sub.scores.insert(sub.scores.end(), scores.begin() + std::ptrdiff_t(r) * b.width,
                      scores.begin() + std::ptrdiff_t(r + 1) * b.width);
    sub.lengths.push_back(lengths[r]);
  }
  const std::vector<std::int32_t> expected = reference::topk_index_order(sub);
  const bench::DeviceScores d_scores(dtype, scores);
  DeviceBuffer<std::int32_t> d_lengths(lengths);
  DeviceBuffer<std::int32_t> d_out(std::size_t(b.rows) * topk);
  TopkArgs args;
  args.scores = d_scores.get();
  args.score_dtype = dtype;
  args.lengths = d_lengths.get();
  args.out = d_out.get();
  args.rows = b.rows;
  args.width = b.width;
  args.topk = topk;

  struct Timed {
    const TopkCandidate* cand;
    double us;
  };
  std::vector<Timed> timed;
  for (const TopkCandidate& c : cands) {
    std::string error;
    if (!compiled(compiled_items, topk_spec(topk, dtype, c.plan, arch), error)) {
      if (c.heuristic) outcome.failures.push_back(fmt::format("topk bucket {}: heuristics' plan: {}", b.bucket.name, error));
      drop(dropped, "topk bucket " + b.bucket.name, c.describe(), "compile failed: " + error);
      continue;
    }
    // The heuristics' plan through the plain constraints (no database: autotune runs without one).
    const detail::TopkPlanConstraints constraints = c.heuristic ? detail::TopkPlanConstraints{} : c.constraints;
    auto launch = [&] { detail::topk(args, constraints); };
    std::vector<std::int32_t> got;
    try {  // a plan the device cannot launch (e.g. a cluster that does not fit) is dropped
      d_out.poison();
      launch();
      got = d_out.download();
    } catch (const std::exception& e) {
      if (c.heuristic) outcome.failures.push_back(fmt::format("topk bucket {}: heuristics' plan: {}", b.bucket.name, e.what()));
      drop(dropped, "topk bucket " + b.bucket.name, c.describe(), e.what());
      continue;
    }
    std::string check;
    for (std::size_t i = 0; i < sampled.size() && check.empty(); ++i)
      if (!std::equal(got.begin() + std::ptrdiff_t(sampled[i]) * topk, got.begin() + std::ptrdiff_t(sampled[i] + 1) * topk,
                      expected.begin() + std::ptrdiff_t(i) * topk))
        check = fmt::format("row {} differs from the CPU reference", sampled[i]);
    if (!check.empty()) {
      if (c.heuristic) outcome.failures.push_back(fmt::format("topk bucket {}: heuristics' plan: {}", b.bucket.name, check));
      drop(dropped, "topk bucket " + b.bucket.name, c.describe(), check);
      continue;
    }
    try {
      timed.push_back({&c, bench::median_us(launch, timing)});
    } catch (const std::exception& e) {
      if (c.heuristic) outcome.failures.push_back(fmt::format("topk bucket {}: heuristics' plan: {}", b.bucket.name, e.what()));
      drop(dropped, "topk bucket " + b.bucket.name, c.describe(), e.what());
    }
  }
  if (timed.empty() || !timed.front().cand->heuristic) return;  // the heuristics' plan failed: reported
  const Timed* best = &*std::min_element(timed.begin(), timed.end(), [](auto& x, auto& y) { return x.us < y.us; });
  const Timed& heuristic = timed.front();
  TunedEntry e;
  e.bucket = detail::topk_bucket_json(b.bucket);
  e.shape = {{"rows", b.rows},
             {"width", b.width},
             {"len_lo", b.len_lo},
             {"topk", topk},
             {"score_dtype", to_string(dtype)}};
  e.heuristic = heuristic.cand->describe();
  e.candidates = int(timed.size());
  e.dropped = dropped;
  e.choice = nlohmann::json::object();
  e.winner = e.heuristic;
  e.us = e.heuristic_us = heuristic.us;
  if (best != &heuristic) {
    const detail::TopkPlanConstraints wc = best->cand->constraints;
    const Confirmed c = confirm([&] { detail::topk(args, wc); }, best->us, [&] { detail::topk(args, {}); }, heuristic.us,
                                timing);
    e.heuristic_us = c.heuristic_us;
    e.us = c.heuristic_us;
    if (c.winner_us < kAdoptRatio * c.heuristic_us) {
      e.choice = detail::topk_choice_json(wc);
      e.winner = best->cand->describe();
      e.us = c.winner_us;
    }
  }
  outcome.topk.push_back(std::move(e));
}

// Host and device inputs of every sparse MLA bucket: a pool of the config's kv_tokens slots, random q
// and indices into it.
struct MlaInputs {
  std::vector<std::uint16_t> pool, dequant, q;
  std::vector<std::uint8_t> cache;
  std::vector<std::int32_t> idx;
  std::unique_ptr<DeviceBuffer<std::uint16_t>> d_pool, d_q, d_out;
  std::unique_ptr<DeviceBuffer<std::uint8_t>> d_cache;
  std::unique_ptr<DeviceBuffer<std::int32_t>> d_idx;
  std::unique_ptr<DeviceBuffer<float>> d_lse;

  std::int64_t slots;

  MlaInputs(std::size_t max_heads_rows, std::size_t max_rows, int topk, int kv_tokens) : slots(kv_tokens) {
    bench::NormalRng rng{1};
    pool.resize(std::size_t(slots) * kDim);
    for (auto& x : pool) x = reference::float_to_bf16(rng.normal());
    cache.resize(std::size_t(slots) * kTokenBytes);
    dequant.resize(pool.size());
    for (std::int64_t s = 0; s < slots; ++s) {
      reference::fp8_kv_quantize_token(pool.data() + s * kDim, Fp8ScaleFormat::fp32, cache.data() + s * kTokenBytes);
      reference::fp8_kv_dequantize_token(cache.data() + s * kTokenBytes, dequant.data() + s * kDim);
    }
    q.resize(max_heads_rows * kDim);
    for (auto& x : q) x = reference::float_to_bf16(rng.normal());
    idx.resize(max_rows * std::size_t(topk));
    for (auto& v : idx) v = std::int32_t(rng.next() % std::uint64_t(slots));
    d_pool = std::make_unique<DeviceBuffer<std::uint16_t>>(pool);
    d_cache = std::make_unique<DeviceBuffer<std::uint8_t>>(cache);
    d_q = std::make_unique<DeviceBuffer<std::uint16_t>>(q);
    d_idx = std::make_unique<DeviceBuffer<std::int32_t>>(idx);
    d_out = std::make_unique<DeviceBuffer<std::uint16_t>>(max_heads_rows * kDimV);
    d_lse = std::make_unique<DeviceBuffer<float>>(max_heads_rows);
  }

  SparseMlaDecodeArgs args(int rows, int h_q, int topk, KvDtype kv) const {
    SparseMlaDecodeArgs a;
    a.q = d_q->get();
    if (kv == KvDtype::fp8_e4m3) {
      a.kv = d_cache->get();
      a.kv_dtype = KvDtype::fp8_e4m3;
      a.page_size = kPageSize;
    } else {
      a.kv = d_pool->get();
    }
    a.num_slots = slots;
    a.indices = d_idx->get();
    a.out = d_out->get();
    a.lse = d_lse->get();
    a.rows = rows;
    a.h_q = h_q;
    a.topk = topk;
    a.sm_scale = kScale;
    return a;
  }

  // The fp64 reference of the first kCheckRows rows.
  reference::SparseMlaOutput reference_rows(int h_q, int topk, KvDtype kv) const {
    reference::SparseMlaInput in;
    in.q = std::span(q).subspan(0, std::size_t(kCheckRows) * h_q * kDim);
    in.kv = kv == KvDtype::fp8_e4m3 ? std::span<const std::uint16_t>(dequant) : std::span<const std::uint16_t>(pool);
    in.num_slots = slots;
    in.indices = std::span(idx).subspan(0, std::size_t(kCheckRows) * topk);
    in.rows = kCheckRows;
    in.h_q = h_q;
    in.topk = topk;
    in.sm_scale = double(kScale);
    return reference::sparse_mla(in);
  }
};

// "" or why the candidate's output on kCheckRows rows differs from the reference (split as timed).
std::string check_sparse_mla(const MlaInputs& in, const SparseMlaCandidate& c, int h_q, int topk, KvDtype kv,
                             const reference::SparseMlaOutput& want) {
  SparseMlaDecodeArgs a = in.args(kCheckRows, h_q, topk, kv);
  const std::size_t ws_bytes = sparse_mla::workspace_bytes(kCheckRows, h_q, c.splits);
  DeviceBuffer<std::uint8_t> ws(std::max<std::size_t>(ws_bytes, 16));
  if (c.splits > 1) {
    a.workspace = ws.get();
    a.workspace_bytes = ws.bytes();
    a.num_splits = c.splits;
  }
  in.d_out->poison();
  in.d_lse->poison();
  detail::sparse_mla_decode(a, c.spec.tile);
  const std::vector<std::uint16_t> out = in.d_out->download();
  const std::vector<float> lse = in.d_lse->download();
  const auto cmp = reference::compare_sparse_mla(std::span(out).subspan(0, std::size_t(kCheckRows) * h_q * kDimV),
                                                 std::span(lse).subspan(0, std::size_t(kCheckRows) * h_q), want,
                                                 kCheckRows, h_q);
  return cmp.ok ? "" : cmp.message;
}

void tune_sparse_mla_bucket(const SparseMlaTuneBucket& b, KvDtype kv, std::vector<SparseMlaCandidate> cands,
                            std::vector<Dropped> dropped, const std::vector<CompileItem>& compiled_items,
                            const MlaInputs& in, std::map<std::string, std::string>& checks,
                            const bench::TimingOptions& timing, Outcome& outcome) {
  const int topk = int(b.bucket.topk.lo), h_q = b.bucket.h_q;
  std::unique_ptr<reference::SparseMlaOutput> want;
  std::size_t ws_bytes = 16;
  for (const SparseMlaCandidate& c : cands)
    ws_bytes = std::max(ws_bytes, sparse_mla::workspace_bytes(b.rows, h_q, c.splits));
  DeviceBuffer<std::uint8_t> ws(ws_bytes);
  struct Timed {
    const SparseMlaCandidate* cand;
    double us;
  };
  std::vector<Timed> timed;
  auto launcher = [&](const SparseMlaCandidate& c) {
    SparseMlaDecodeArgs a = in.args(b.rows, h_q, topk, kv);
    a.workspace = ws.get();
    a.workspace_bytes = ws.bytes();
    // The heuristics' choice through the dispatcher's own path (no database while tuning).
    if (!c.heuristic) a.num_splits = c.splits;
    const TileConfig tile = c.heuristic ? TileConfig{} : c.spec.tile;
    return [a, tile] { detail::sparse_mla_decode(a, tile); };
  };
  for (const SparseMlaCandidate& c : cands) {
    std::string error;
    if (!compiled(compiled_items, c.spec, error)) {
      if (c.heuristic)
        outcome.failures.push_back(fmt::format("sparse_mla bucket {}: heuristics' choice: {}", b.bucket.name, error));
      drop(dropped, "sparse_mla bucket " + b.bucket.name, c.describe(), "compile failed: " + error);
      continue;
    }
    // Checked once per kernel and split count (the check's input does not depend on the bucket).
    const std::string key = fmt::format("{} {} {}", canonical_text(c.spec), c.splits, to_string(kv));
    if (!checks.contains(key)) {
      if (!want) want = std::make_unique<reference::SparseMlaOutput>(in.reference_rows(h_q, topk, kv));
      try {
        checks[key] = check_sparse_mla(in, c, h_q, topk, kv, *want);
      } catch (const std::exception& e) {
        checks[key] = e.what();
      }
    }
    if (!checks[key].empty()) {
      if (c.heuristic)
        outcome.failures.push_back(fmt::format("sparse_mla bucket {}: heuristics' choice: {}", b.bucket.name, checks[key]));
      drop(dropped, fmt::format("sparse_mla bucket {} {}", b.bucket.name, to_string(kv)), c.describe(), checks[key]);
      continue;
    }
    try {  // checked on kCheckRows rows; timed at the bucket's
      timed.push_back({&c, bench::median_us(launcher(c), timing)});
    } catch (const std::exception& e) {
      if (c.heuristic)
        outcome.failures.push_back(fmt::format("sparse_mla bucket {}: heuristics' choice: {}", b.bucket.name, e.what()));
      drop(dropped, fmt::format("sparse_mla bucket {} {}", b.bucket.name, to_string(kv)), c.describe(), e.what());
    }
  }
  if (timed.empty() || !timed.front().cand->heuristic) return;
  const Timed* best = &*std::min_element(timed.begin(), timed.end(), [](auto& x, auto& y) { return x.us < y.us; });
  const Timed& heuristic = timed.front();
  TunedEntry e;
  tuning::SparseMlaBucket bucket = b.bucket;
  bucket.kv_dtype = kv;
  e.bucket = tuning::sparse_mla_bucket_json(bucket);
  e.shape = {{"rows", b.rows}, {"h_q", h_q}, {"topk", topk}, {"kv_dtype", kv == KvDtype::bf16 ? "bf16" : "fp8"},
             {"num_slots", in.slots}};
  e.heuristic = heuristic.cand->describe();
  e.candidates = int(timed.size());
  e.dropped = dropped;
  tuning::SparseMlaChoice heuristic_choice;
  heuristic_choice.tile = heuristic.cand->spec.tile;
  heuristic_choice.tile.schedule = MlaSchedule::single;  // unsearched: the dispatcher's rule for each call
  e.choice = tuning::sparse_mla_choice_json(heuristic_choice);
  e.winner = e.heuristic;
  e.us = e.heuristic_us = heuristic.us;
  if (best != &heuristic) {
    const Confirmed c = confirm(launcher(*best->cand), best->us, launcher(*heuristic.cand), heuristic.us, timing);
    e.heuristic_us = e.us = c.heuristic_us;
    if (c.winner_us < kAdoptRatio * c.heuristic_us) {
      tuning::SparseMlaChoice choice = best->cand->choice;
      choice.tile = best->cand->spec.tile;  // the filled variant, whatever the heuristics would fill later
      if (!tuning::schedule_chosen(best->cand->choice)) choice.tile.schedule = MlaSchedule::single;  // unsearched: the rule's per call
      e.choice = tuning::sparse_mla_choice_json(choice);
      e.winner = best->cand->describe();
      e.us = c.winner_us;
    }
  }
  outcome.sparse_mla.push_back(std::move(e));
}

int run_autotune(const AutotuneOptions& o) {
  const TuneConfig config = load_tune_config(o.config);
  const bool gpu = driver::available();
  if (o.dry_run) {
    Arch arch = o.arch.empty() ? Arch{} : target_arch(o.arch);
    int sm_count = o.sm_count > 0 ? o.sm_count : 132;
    if (gpu && o.arch.empty()) arch = spec_for_current_device(KernelSpec{}).arch;
    if (gpu && o.sm_count == 0) sm_count = driver::current_context_info().sm_count;
    fmt::print("{}", dry_run_listing(config, arch, sm_count));
    return kExitOk;
  }
  if (!gpu) {
    fmt::print(stderr, "nsajit autotune: no GPU ({}); nothing was measured or written (--dry-run lists the "
                       "candidates without one)\n", no_gpu_reason());
    return kExitNoGpu;
  }
  // A database that cannot be written fails now, not after the run.
  {
    const std::filesystem::path parent = std::filesystem::absolute(o.db).parent_path();
    if (!std::filesystem::is_directory(parent) || ::access(parent.c_str(), W_OK) != 0)
      throw InvalidArgument(fmt::format("--db {}: the directory {} does not exist or is not writable", o.db, parent.string()));
  }
  set_tuning_db("none");  // the heuristics' choices are timed as they are, whatever database is installed
  set_strict_mode(false);  // the tool compiles its candidates whatever NSAJIT_NO_JIT says
  const tuning::TuningKey key = tuning::current_key();
  const Arch arch = parse_arch(key.arch);
  const int sm_count = key.sm_count;
  const auto start = std::chrono::steady_clock::now();

  // Candidates of every bucket, and every kernel they need.
  struct TopkWork {
    const TopkTuneBucket* b;
    std::vector<TopkCandidate> cands;
    std::vector<Dropped> dropped;
  };
  struct MlaWork {
    const SparseMlaTuneBucket* b;
    KvDtype kv;
    std::vector<SparseMlaCandidate> cands;
    std::vector<Dropped> dropped;
  };
  std::vector<TopkWork> topk_work;
  std::vector<MlaWork> mla_work;
  std::vector<CompileItem> items;
  auto need = [&](const KernelSpec& s) {
    for (const CompileItem& it : items)
      if (it.spec == s) return;
    items.push_back({.spec = s, .name = readable_name(s)});
  };
  for (const TopkTuneBucket& b : config.topk) {
    TopkWork w{&b};
    w.cands = topk_candidates(b, int(b.bucket.topk.lo), sm_count, w.dropped);
    for (const TopkCandidate& c : w.cands)
      need(topk_spec(int(b.bucket.topk.lo), b.bucket.score_dtype.value_or(ScoreDtype::fp32), c.plan, arch));
    topk_work.push_back(std::move(w));
  }
  std::size_t max_heads_rows = kCheckRows * 128, max_rows = kCheckRows;
  for (const SparseMlaTuneBucket& b : config.sparse_mla)
    for (KvDtype kv : {KvDtype::bf16, KvDtype::fp8_e4m3}) {
      if (b.bucket.kv_dtype && *b.bucket.kv_dtype != kv) continue;
      MlaWork w{&b, kv};
      w.cands = sparse_mla_candidates(b, kv, arch, sm_count, w.dropped);
      for (const SparseMlaCandidate& c : w.cands) need(c.spec);
      max_heads_rows = std::max(max_heads_rows, std::size_t(b.rows) * b.bucket.h_q);
      max_rows = std::max(max_rows, std::size_t(b.rows));
      mla_work.push_back(std::move(w));
    }
  if (!mla_work.empty()) need(spec_for_current_device(KernelSpec{.family = Family::sparse_mla_combine}));
  std::size_t total = 0;
  for (const auto& w : topk_work) total += w.cands.size();
  for (const auto& w : mla_work) total += w.cands.size();
  const int jobs = o.jobs > 0 ? o.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  if (!o.quiet)
    fmt::print("autotune: {} on {} ({} SMs, {}): {} buckets, {} candidates, {} kernels to compile on {} thread(s)\n",
               o.config, key.gpu, sm_count, key.arch, topk_work.size() + mla_work.size(), total, items.size(), jobs);
  std::fflush(stdout);
  {
    std::vector<CompileItem*> pointers;
    for (CompileItem& it : items) pointers.push_back(&it);
    compile_all(pointers, jobs, o.quiet);
  }

  const bench::TimingOptions timing{.warmup = 3, .iters = config.iters, .flush_l2 = true};
  Outcome outcome;
  {
    Progress progress(topk_work.size() + mla_work.size(), o.quiet);
    auto report = [&](const std::string& name, const std::vector<TunedEntry>& entries, std::size_t before,
                      std::chrono::steady_clock::time_point began) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
      if (entries.size() == before) {
        progress.finished(name, "failed", ms, "the heuristics' choice failed its check");
        return;
      }
      const TunedEntry& e = entries.back();
      progress.finished(name, fmt::format("{:.1f} us ({})", e.us, e.winner), ms, "");
    };
    for (TopkWork& w : topk_work) {
      const std::string name = "topk " + w.b->bucket.name;
      progress.started(name);
      const auto began = std::chrono::steady_clock::now();
      const std::size_t before = outcome.topk.size();
      tune_topk_bucket(*w.b, w.cands, w.dropped, items, arch, timing, outcome);
      report(name, outcome.topk, before, began);
    }
    if (!mla_work.empty()) {
      const MlaInputs inputs(max_heads_rows, max_rows, int(mla_work.front().b->bucket.topk.lo), config.mla_kv_tokens);
      std::map<std::string, std::string> checks;
      for (MlaWork& w : mla_work) {
        const std::string name = fmt::format("sparse_mla {} {}", w.b->bucket.name, to_string(w.kv));
        progress.started(name);
        const auto began = std::chrono::steady_clock::now();
        const std::size_t before = outcome.sparse_mla.size();
        if (std::size_t(w.b->bucket.topk.lo) * max_rows > inputs.idx.size())
          throw InvalidArgument(fmt::format("{}: every sparse_mla bucket must have the same topk", o.config));
        tune_sparse_mla_bucket(*w.b, w.kv, w.cands, w.dropped, items, inputs, checks, timing, outcome);
        report(name, outcome.sparse_mla, before, began);
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!outcome.failures.empty()) {
    for (const std::string& f : outcome.failures) fmt::print(stderr, "nsajit autotune: check failed: {}\n", f);
    fmt::print(stderr, "nsajit autotune: nothing written\n");
    return kExitFailed;
  }
  write_atomically(o.db,
                   dump_json(tuning_db_json(key, o.config, config.iters, outcome.topk, outcome.sparse_mla), 1) + "\n",
                   "--db");
  if (!o.quiet) {
    fmt::print("\n{:<44} {:>12} {:>10} {:>8}  {}\n", "bucket", "heuristic us", "tuned us", "speedup", "tuned choice");
    auto row = [](const std::string& family, const TunedEntry& e) {
      fmt::print("{:<44} {:>12.1f} {:>10.1f} {:>7.3f}x  {}\n",
                 family + " " + (e.bucket.contains("name") ? e.bucket["name"].get<std::string>() : dump_json(e.bucket)),
                 e.heuristic_us, e.us, e.heuristic_us / e.us, e.winner == e.heuristic ? "= heuristic" : e.winner);
    };
    for (const TunedEntry& e : outcome.topk) row("topk", e);
    for (const TunedEntry& e : outcome.sparse_mla) row("sparse_mla " + e.shape["kv_dtype"].get<std::string>(), e);
    fmt::print("autotune: {:.1f} s; database {}\n", seconds, o.db);
  }
  return kExitOk;
}

}  // namespace

Subcommand add_autotune_command(CLI::App& app) {
  auto o = std::make_shared<AutotuneOptions>();
  CLI::App* cmd = app.add_subcommand(
      "autotune", "time every candidate of a search space (tune/*.json) per shape bucket on this GPU and write a "
                  "tuning database (the dispatcher reads it: NSAJIT_TUNING_DB)");
  cmd->add_option("--config", o->config, "the search space, e.g. tune/h200.json")->required()->check(CLI::ExistingFile);
  cmd->add_option("--db", o->db, "the database to write (atomically)")->capture_default_str();
  cmd->add_flag("--dry-run", o->dry_run, "list each bucket's candidates and dropped points; no GPU needed");
  cmd->add_option("--jobs,-j", o->jobs, "compile threads (default: the hardware threads)")->transform(integer_in(1, 256));
  cmd->add_option("--sm-count", o->sm_count, "--dry-run without a GPU: the SM count (default 132, the H200)")
      ->transform(integer_in(1, 1024));
  cmd->add_option("--arch", o->arch, "--dry-run without a GPU: the arch (default sm_90a)");
  cmd->add_flag("--quiet,-q", o->quiet, "print nothing but errors (and the listing --dry-run asks for)");
  return {cmd, [o] { return run_autotune(*o); }};
}

}  // namespace nsajit::tools
