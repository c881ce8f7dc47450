// bench_sparse_mla.cpp — `nsajit bench sparse-mla`: nsajit::sparse_mla_decode against the PyTorch
// reference (gather + bf16 einsum + softmax, bench/torch_baseline.py) on the same inputs.
//
// Cases (topk 2048, a pool of 262 144 slots, uniformly random indices):
//   decode b {1, 8, 64, 128} x next_n {1, 2} x h_q {16, 64, 128} x KV {bf16, fp8 (page size 64)}
//   prefill s_q 4096 x h_q {64, 128} x KV {bf16, fp8} over s_kv 262144 slots; bf16 also over the
//   first 8192 and 32768 slots (indices uniform in [0, s_kv): the shorter contexts live in L2)
//   prefill "fp8 gather": the FP8 cache as SGLang's RAGGED prefill and vLLM read it: the context's
//   s_kv tokens gathered and dequantized once (nsajit::fp8_kv_gather) into a bf16 buffer, then the
//   bf16 prefill over it, both launches timed; compared with the anchor of the bf16 case (the
//   issue's "FP8 prefill no slower than FlashMLA's bf16 prefill of the same shape")
// nsajit runs with a workspace (split-KV where the batch cannot fill the GPU; params.num_splits)
// and, for comparison, batch-invariant (params.batch_invariant_us). The torch reference of an
// FP8 case runs on the dequantized bf16 pool (baseline_us: torch pays no dequantisation); the same
// reference reading the FP8 cache itself (gather + dequantize in torch) is recorded beside it as
// params.torch_fp8_cache_us. FLOPs = 2 rows h_q topk (576 + 512); bytes = q +
// gathered KV (rows x topk x 1152 or 656) + indices + out + lse; gbps is on gathered KV bytes.
// Each case's output is checked against the fp64 reference on its first and last row.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "families/sparse_mla/launch.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"
#include "reference/sparse_mla.hpp"
#include "runtime/device_buffer.hpp"
#include "tools/bench/bench_common.hpp"

namespace nsajit::tools::bench {
namespace {

constexpr int D = 576;
constexpr int DV = 512;
constexpr int kTok = 656;
constexpr int kTopk = 2048;
constexpr std::int64_t kSlots = 262144;
constexpr int kPageSize = 64;
constexpr float kScale = 0.13524f;

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  NormalRng r{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = reference::float_to_bf16(r.normal());
  return v;
}

struct Shape {
  bool prefill;
  int b, next_n, h_q;
  bool fp8;
  std::int64_t s_kv = kSlots;  // indices are drawn from [0, s_kv)
  bool gather = false;         // fp8 prefill: gather-dequantize the context, then the bf16 kernel
  int rows() const { return prefill ? b : b * next_n; }
  std::string name() const {
    return prefill ? fmt::format("prefill h{} sq{} skv{} {}{}", h_q, b, s_kv, fp8 ? "fp8" : "bf16", gather ? " gather" : "")
                   : fmt::format("decode h{} b{} n{} {}", h_q, b, next_n, fp8 ? "fp8" : "bf16");
  }
};

// The kernel spec of --tile's fields for a case: its h_q and topk, its KV dtype (the kernel spec
// has no page size: the pool's is a launch argument). Throws InvalidArgument.
KernelSpec tile_spec(const Shape& sh, const std::string& tile) {
  const std::string kv = sh.fp8 && !sh.gather ? " kv_dtype=fp8 " : std::string(" ");
  return parse_spec_text("family=sparse_mla h_q=" + std::to_string(sh.h_q) + " topk=" + std::to_string(kTopk) + kv + tile);
}

}  // namespace

std::string sparse_mla_tile_error(const std::string& tile) {
  std::string first;
  for (bool fp8 : {false, true})
    for (int h : {16, 64, 128}) try {
        tile_spec({false, 1, 1, h, fp8}, tile);
        return "";
      } catch (const InvalidArgument& e) {
        if (first.empty()) first = e.what();
      }
  return first;
}

int bench_sparse_mla(const BenchOptions& options) {
  std::vector<Shape> shapes;
  for (bool fp8 : {false, true})
    for (int h : {16, 64, 128})
      for (int b : {1, 8, 64, 128})
        for (int n : {1, 2}) shapes.push_back({false, b, n, h, fp8});
  for (bool fp8 : {false, true})
    for (int h : {64, 128})
      for (std::int64_t s_kv : {std::int64_t(8192), std::int64_t(32768), kSlots})
        if (!fp8 || s_kv == kSlots) shapes.push_back({true, 4096, 1, h, fp8, s_kv});
  for (int h : {64, 128}) shapes.push_back({true, 4096, 1, h, true, kSlots, true});
  std::erase_if(shapes, [&](const Shape& s) { return !options.only.empty() && s.name().find(options.only) == std::string::npos; });
  if (shapes.empty()) {
    fmt::print(stderr, "nsajit bench sparse-mla: no case matches --only {}\n", options.only);
    return 2;
  }

  // ---- pools: bf16 rows; FP8 tokens quantized from the same rows, and their dequantized bf16.
  fmt::print(stderr, "building pools ({} slots)...\n", kSlots);
  const std::vector<std::uint16_t> pool = random_bf16(std::size_t(kSlots) * D, 1);
  std::vector<std::uint8_t> cache(std::size_t(kSlots) * kTok);
  std::vector<std::uint16_t> dequant(std::size_t(kSlots) * D);
  for (std::int64_t s = 0; s < kSlots; ++s) {
    reference::fp8_kv_quantize_token(pool.data() + s * D, Fp8ScaleFormat::fp32, cache.data() + s * kTok);
    reference::fp8_kv_dequantize_token(cache.data() + s * kTok, dequant.data() + s * D);
  }
  DeviceBuffer<std::uint16_t> d_pool(pool);
  DeviceBuffer<std::uint8_t> d_cache(cache);
  // "fp8 gather" cases: the context's slots (all of the pool's, in order) and their bf16 rows
  const bool any_gather = std::any_of(shapes.begin(), shapes.end(), [](const Shape& s) { return s.gather; });
  std::vector<std::int32_t> context(any_gather ? std::size_t(kSlots) : 0);
  for (std::size_t s = 0; s < context.size(); ++s) context[s] = std::int32_t(s);
  DeviceBuffer<std::int32_t> d_context(context);
  DeviceBuffer<std::uint16_t> d_gathered(any_gather ? std::size_t(kSlots) * D : 1);
  const std::string dir = options.work_dir + "/sparse_mla";
  const bool baseline = !options.baseline_script.empty();
  if (baseline) {
    write_blob(dir, "pool_bf16.bf16", pool.data(), pool.size() * 2);
    write_blob(dir, "pool_fp8_dequant.bf16", dequant.data(), dequant.size() * 2);
    write_blob(dir, "cache_fp8.u8", cache.data(), cache.size());
  }

  std::vector<Case> cases;
  int failures = 0;
  const TimingOptions timing{
      .warmup = 5, .iters = options.iters, .soak_ms = options.soak_ms, .flush_l2 = true, .sample_clock = true};
  for (const Shape& sh : shapes) {
    const int rows = sh.rows();
    const std::uint64_t seed = std::uint64_t(rows) * 1000 + sh.h_q + (sh.s_kv == kSlots ? 0 : std::uint64_t(sh.s_kv) << 20);
    const std::vector<std::uint16_t> q = random_bf16(std::size_t(rows) * sh.h_q * D, seed);
    std::vector<std::int32_t> idx(std::size_t(rows) * kTopk);
    NormalRng r{seed + 77};
    for (auto& v : idx) v = std::int32_t(r.next() % std::uint64_t(sh.s_kv));
    DeviceBuffer<std::uint16_t> d_q(q);
    DeviceBuffer<std::int32_t> d_idx(idx);
    DeviceBuffer<std::uint16_t> d_out(std::size_t(rows) * sh.h_q * DV);
    DeviceBuffer<float> d_lse(std::size_t(rows) * sh.h_q);
    SparseMlaDecodeArgs a;
    a.q = d_q.get();
    if (sh.gather) {
      a.kv = d_gathered.get();  // bf16, filled by the gather inside the timed call
    } else if (sh.fp8) {
      a.kv = d_cache.get();
      a.kv_dtype = KvDtype::fp8_e4m3;
      a.page_size = kPageSize;
    } else {
      a.kv = d_pool.get();
    }
    a.num_slots = kSlots;
    a.indices = d_idx.get();
    a.out = d_out.get();
    a.lse = d_lse.get();
    a.rows = rows;
    a.next_n = sh.prefill ? 1 : sh.next_n;
    a.h_q = sh.h_q;
    a.topk = kTopk;
    a.sm_scale = kScale;
    const int splits = sparse_mla_num_splits(rows, sh.h_q, kTopk);
    const std::size_t ws_bytes = sparse_mla_workspace_bytes(rows, sh.h_q, kTopk);
    DeviceBuffer<std::uint8_t> d_ws(std::max<std::size_t>(ws_bytes, 16));

    // --tile: every launch of this case takes that variant (validated with the case's h_q / topk;
    // the KV dtype as the case's). The default: the product's choice (heuristics, tuning database).
    TileConfig forced{};
    if (!options.tile.empty()) try {
      forced = tile_spec(sh, options.tile).tile;
    } catch (const InvalidArgument& e) {
      // A case the variant does not support (e.g. FP8 KV for the seesaw) is skipped, not failed.
      fmt::print(stderr, "nsajit bench sparse-mla: {}: skipped for --tile: {}\n", sh.name(), e.what());
      continue;
    }
    Fp8KvGatherArgs g;
    g.cache = d_cache.get();
    g.num_pages = kSlots / kPageSize;
    g.page_size = kPageSize;
    g.slots = d_context.get();
    g.n = int(sh.s_kv);
    g.out = d_gathered.get();
    const auto sparse_mla_decode = [&](const SparseMlaDecodeArgs& args) {
      if (sh.gather) fp8_kv_gather(g);
      if (options.tile.empty()) nsajit::sparse_mla_decode(args);
      else detail::sparse_mla_decode(args, forced);
    };
    // Batch-invariant first (also the checked output of row 0 / last), then with the workspace.
    const Timing invariant = time_us([&] { sparse_mla_decode(a); }, timing);
    const double invariant_us = invariant.median_us;
    SparseMlaDecodeArgs split_args = a;
    split_args.workspace = d_ws.get();
    split_args.workspace_bytes = d_ws.bytes();
    // Split mode differs from batch-invariant exactly when the runtime asks for a workspace.
    const bool split_mode = ws_bytes > 0;
    const Timing timed = time_us([&] { sparse_mla_decode(split_mode ? split_args : a); }, timing);
    const double us = timed.median_us;

    // Check the split-mode output (the timed one) on the first and last row.
    d_out.poison();
    d_lse.poison();
    if (sh.gather) d_gathered.poison();  // the check covers the gather too
    sparse_mla_decode(split_mode ? split_args : a);
    const std::vector<std::uint16_t> out = d_out.download();
    const std::vector<float> lse = d_lse.download();
    std::string check = "pass";
    for (int row : {0, rows - 1}) {
      reference::SparseMlaInput in;
      in.q = std::span(q).subspan(std::size_t(row) * sh.h_q * D, std::size_t(sh.h_q) * D);
      in.kv = sh.fp8 ? std::span<const std::uint16_t>(dequant) : std::span<const std::uint16_t>(pool);
      in.num_slots = kSlots;
      in.indices = std::span(idx).subspan(std::size_t(row) * kTopk, kTopk);
      in.rows = 1;
      in.h_q = sh.h_q;
      in.topk = kTopk;
      in.sm_scale = double(kScale);
      const reference::SparseMlaOutput want = reference::sparse_mla(in);
      const auto c = reference::compare_sparse_mla(
          std::span(out).subspan(std::size_t(row) * sh.h_q * DV, std::size_t(sh.h_q) * DV),
          std::span(lse).subspan(std::size_t(row) * sh.h_q, std::size_t(sh.h_q)), want, 1, sh.h_q,
          reference::MlaTolerance::unit_scale);  // N(0, 1) inputs: the spec's literal bound, as FlashMLA meets it
      if (!c.ok) check = fmt::format("FAIL row {}: {}", row, c.message);
    }
    if (check != "pass") ++failures;

    const double kv_bytes = double(rows) * kTopk * (sh.fp8 && !sh.gather ? kTok : 2 * D);
    const double gather_bytes = sh.gather ? double(sh.s_kv) * (kTok + 2 * D + 4) : 0.0;  // read, write, slots
    const double bytes = double(rows) * sh.h_q * D * 2 + kv_bytes + gather_bytes + double(rows) * kTopk * 4 +
                         double(rows) * sh.h_q * (DV * 2 + 4);
    const double flops = 2.0 * rows * sh.h_q * kTopk * (576 + 512);
    Case c;
    c.name = sh.name();
    c.params = {{"mode", sh.prefill ? "prefill" : "decode"}, {"rows", rows}, {"b", sh.prefill ? 1 : sh.b},
                {"next_n", sh.prefill ? 1 : sh.next_n}, {"s_q", sh.prefill ? sh.b : 0}, {"h_q", sh.h_q},
                {"topk", kTopk}, {"kv", sh.fp8 ? "fp8" : "bf16"}, {"num_slots", kSlots}, {"s_kv", sh.s_kv},
                {"page_size", sh.fp8 ? kPageSize : 1}, {"num_splits", splits},
                {"batch_invariant_us", invariant_us}, {"gathered_bytes", kv_bytes}, {"bytes", bytes},
                {"flops", flops}, {"precise", false}};  // the default precision, checked under its tolerance
    if (sh.gather) {
      c.params["fp8_path"] = "gather: fp8_kv_gather of the s_kv context tokens, then the bf16 kernel";
      c.params["gather_bytes"] = gather_bytes;
      c.anchor_case = Shape{true, sh.b, 1, sh.h_q, false, sh.s_kv}.name();  // FlashMLA's bf16 prefill
    }
    add_clock_params(c.params, invariant, "batch_invariant_");
    add_clock_params(c.params, timed);
    c.nsajit_us = us;
    c.nsajit_min_us = timed.min_us;
    c.nsajit_max_us = timed.max_us;
    c.baseline = "torch gather + bf16 einsum + softmax (ref_sparse_bf16)";
    c.floor_us = floor_us(bytes, flops);
    c.tflops = flops / us / 1e6;
    c.gbps = kv_bytes / us / 1e3;
    c.check = check;
    if (baseline) {
      const std::string in_dir = fmt::format("{}/r{}h{}skv{}", dir, rows, sh.h_q, sh.s_kv);
      if (!std::filesystem::exists(in_dir + "/idx.i32")) {
        write_blob(in_dir, "q.bf16", q.data(), q.size() * 2);
        write_blob(in_dir, "idx.i32", idx.data(), idx.size() * 4);
      }
      c.baseline_input = in_dir;
      c.params["pool"] = dir + (sh.fp8 ? "/pool_fp8_dequant.bf16" : "/pool_bf16.bf16");
      if (sh.fp8) c.params["fp8_cache"] = dir + "/cache_fp8.u8";
    }
    fmt::print(stderr, "{:<42} {:>9.1f} us (batch-invariant {:.1f}, splits {})  {:6.1f} TFLOP/s  {:6.0f} GB/s  floor {:.1f}  {}\n",
               c.name, us, invariant_us, splits, *c.tflops, c.gbps, c.floor_us, check);
    cases.push_back(std::move(c));
  }

  if (baseline) {
    const std::string why = run_python_baseline(options.baseline_script, "sparse_mla", cases, options.work_dir);
    if (!why.empty()) fmt::print(stderr, "baseline not measured: {}\n", why);
    for (const Case& c : cases)
      if (c.params.contains("torch_fp8_cache_us") && c.params["torch_fp8_cache_us"].is_number()) {
        const double fp8_us = c.params["torch_fp8_cache_us"].get<double>();
        fmt::print(stderr, "{:<32} torch reading the FP8 cache itself: {:.1f} us ({:.2f}x)\n", c.name, fp8_us,
                   fp8_us / c.nsajit_us);
      }
  }
  write_results({.family = "sparse_mla", .command = options.command, .anchors = options.anchors}, cases, options.out);
  return failures == 0 ? 0 : 1;
}

}  // namespace nsajit::tools::bench
