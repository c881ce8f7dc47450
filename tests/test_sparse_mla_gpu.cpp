// test_sparse_mla_gpu.cpp — nsajit::sparse_mla_decode (§3) against the fp64 reference, for both
// KV layouts (bf16 rows, FP8 656-byte paged tokens read directly), batch-invariant and split-KV
// modes, plus the host-side argument checks (CPU only: they throw before any driver call).
//
// Every KV row that no used index references is NaN (bf16 0x7fc0; FP8 tokens all 0xFF bytes:
// e4m3 NaN, NaN scales, NaN rope), as is the padding of each bf16 row past 576 elements, so a
// stray read of an invalid, out-of-range or past-topk_length entry shows up as NaN in out or lse.
// FP8 problems are quantized on the host (reference/fp8_kv_cache) and the reference runs on the
// dequantized bf16 values. Outputs are poisoned before every launch so unwritten elements fail too.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"
#include "reference/sparse_mla.hpp"
#include "families/sparse_mla/launch.hpp"
#include "tests/gpu_support.hpp"
#include "tests/test_dirs.hpp"

namespace ref = nsajit::reference;
using nsajit::test::DeviceBuffer;

namespace {

constexpr int D = ref::kMlaDimQK;
constexpr int DV = ref::kMlaDimV;
constexpr int kTok = 656;
constexpr float kScaleModel = 0.13524f;       // DeepSeek-V3.2's sm_scale
const float kScaleDefault = 1.f / std::sqrt(576.f);  // d_qk^-0.5
constexpr std::int32_t kIntMax = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kIntMin = std::numeric_limits<std::int32_t>::min();
constexpr int kPoisonSlots = 64;  // the last slots of every pool: never filled, always NaN

// How a problem is launched: KV layout and split mode.
struct Mode {
  bool fp8 = false;
  int page_size = 64;           // fp8
  std::int64_t page_pad = 0;    // fp8: extra bytes per page (kv_page_stride = page_size * 656 + pad)
  int splits = 1;               // 1: no workspace (batch-invariant); 0: workspace, automatic; > 1 forced
  nsajit::TileConfig tile{};    // kernel automatic: the default variant; else this one
  bool precise = false;         // P as bf16 hi + lo, checked under the precise (1e-3) tolerance
  std::string name() const {
    return std::string(fp8 ? "fp8 ps" + std::to_string(page_size) : "bf16") + " splits " +
           (splits == 0 ? std::string("auto") : std::to_string(splits)) + (precise ? " precise" : "");
  }
};

struct Problem {
  int rows = 1, h_q = 16, topk = 2048;
  std::int64_t num_slots = 0, kv_row_stride = D;
  float sm_scale = kScaleModel;
  std::vector<std::uint16_t> q, kv;  // kv: the bf16 pool (fp8: the dequantized tokens) for the reference
  std::vector<std::uint8_t> cache;   // fp8: [num_slots / page_size pages][page stride]
  std::vector<std::int32_t> indices;
  std::vector<std::int32_t> topk_length;  // empty: not passed
  std::vector<float> attn_sink;           // [h_q], empty: not passed
  std::int32_t poison_slot(int i) const { return std::int32_t(num_slots - kPoisonSlots + i); }
};

std::uint16_t random_bf16(std::mt19937& rng) {
  static std::normal_distribution<float> normal(0.f, 1.f);
  return ref::float_to_bf16(normal(rng));
}

// q random, every row's indices distinct random slots of [0, num_slots - kPoisonSlots); KV all NaN
// until finalize(). num_slots is rounded up to a multiple of 64 (whole FP8 pages).
Problem make_problem(int rows, int h_q, int topk, std::int64_t num_slots, std::uint32_t seed,
                     std::int64_t kv_row_stride = D) {
  std::mt19937 rng(seed);
  Problem p;
  p.rows = rows;
  p.h_q = h_q;
  p.topk = topk;
  p.num_slots = (num_slots + 63) / 64 * 64;
  p.kv_row_stride = kv_row_stride;
  p.q.resize(std::size_t(rows) * h_q * D);
  for (auto& v : p.q) v = random_bf16(rng);
  std::vector<std::int32_t> pool(std::size_t(p.num_slots - kPoisonSlots));
  std::iota(pool.begin(), pool.end(), 0);
  p.indices.resize(std::size_t(rows) * topk);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < topk; ++j) {  // partial Fisher-Yates: distinct slots
      std::uniform_int_distribution<std::size_t> pick(std::size_t(j), pool.size() - 1);
      std::swap(pool[std::size_t(j)], pool[pick(rng)]);
      p.indices[std::size_t(r) * topk + j] = pool[std::size_t(j)];
    }
  }
  return p;
}

// Row generator for finalize: default N(0, 1) bf16.
using RowFill = void (*)(std::mt19937&, std::uint16_t*);
void normal_row(std::mt19937& rng, std::uint16_t* row) {
  for (int d = 0; d < D; ++d) row[d] = random_bf16(rng);
}

// Fills the 576 used elements of every slot that a used, valid entry references; every other
// element stays NaN. fp8: the referenced rows are quantized into their tokens (fp32 scales, not
// powers of two) and kv holds their dequantized values; other tokens are all 0xFF.
// Call after editing indices / topk_length.
void finalize(Problem& p, const Mode& m = {}, std::uint32_t seed = 7, RowFill fill = normal_row) {
  std::mt19937 rng(seed);
  p.kv.assign(std::size_t(p.num_slots) * p.kv_row_stride, ref::kBf16QuietNaN);
  const std::int64_t page_stride = std::int64_t(m.page_size) * kTok + m.page_pad;
  if (m.fp8) p.cache.assign(std::size_t(p.num_slots / m.page_size * page_stride), 0xFF);
  std::vector<bool> filled(std::size_t(p.num_slots), false);
  std::vector<std::uint16_t> row(D);
  for (int r = 0; r < p.rows; ++r) {
    const int n = p.topk_length.empty() ? p.topk : std::clamp(p.topk_length[r], 0, p.topk);
    for (int j = 0; j < n; ++j) {
      const std::int64_t idx = p.indices[std::size_t(r) * p.topk + j];
      if (idx < 0 || idx >= p.num_slots || filled[std::size_t(idx)]) continue;
      filled[std::size_t(idx)] = true;
      fill(rng, row.data());
      if (m.fp8) {
        std::uint8_t* tok = p.cache.data() + (idx / m.page_size) * page_stride + (idx % m.page_size) * kTok;
        ref::fp8_kv_quantize_token(row.data(), nsajit::Fp8ScaleFormat::fp32, tok);
        ref::fp8_kv_dequantize_token(tok, row.data());
      }
      std::copy(row.begin(), row.end(), p.kv.begin() + std::ptrdiff_t(idx * p.kv_row_stride));
    }
  }
}

ref::SparseMlaOutput reference(const Problem& p) {
  ref::SparseMlaInput in;
  in.q = p.q;
  in.kv = p.kv;
  in.num_slots = p.num_slots;
  in.kv_row_stride = p.kv_row_stride;
  in.indices = p.indices;
  in.topk_length = p.topk_length;
  in.rows = p.rows;
  in.h_q = p.h_q;
  in.topk = p.topk;
  in.sm_scale = double(p.sm_scale);  // the kernel gets the float
  in.attn_sink = p.attn_sink;
  return ref::sparse_mla(in);
}

struct Result {
  std::vector<std::uint16_t> out;
  std::vector<float> lse, max_logits;
};

// Launches on poisoned outputs (and a poisoned workspace) and downloads them. kv_device: a pool
// already on the device (bf16 or fp8 per the mode) instead of p.kv / p.cache. run: how the call
// is made (default: nsajit::sparse_mla_decode on the null stream).
using Runner = std::function<void(const nsajit::SparseMlaDecodeArgs&)>;
Result launch(const Problem& p, const Mode& m = {}, const void* kv_device = nullptr, const Runner& run = {}) {
  DeviceBuffer<std::uint16_t> q(p.q);
  DeviceBuffer<std::uint16_t> kv(kv_device || m.fp8 ? std::vector<std::uint16_t>{} : p.kv);
  DeviceBuffer<std::uint8_t> cache(kv_device || !m.fp8 ? std::vector<std::uint8_t>{} : p.cache);
  DeviceBuffer<std::int32_t> indices(p.indices);
  DeviceBuffer<std::int32_t> lengths(p.topk_length);
  DeviceBuffer<float> sink(p.attn_sink);
  DeviceBuffer<std::uint16_t> out(std::size_t(p.rows) * p.h_q * DV);
  DeviceBuffer<float> lse(std::size_t(p.rows) * p.h_q);
  DeviceBuffer<float> max_logits(std::size_t(p.rows) * p.h_q);
  out.poison();
  lse.poison();
  max_logits.poison();
  nsajit::SparseMlaDecodeArgs a;
  a.q = q.get();
  if (m.fp8) {
    a.kv = kv_device ? kv_device : cache.get();
    a.kv_dtype = nsajit::KvDtype::fp8_e4m3;
    a.page_size = m.page_size;
    a.kv_page_stride = m.page_pad ? std::int64_t(m.page_size) * kTok + m.page_pad : 0;
  } else {
    a.kv = kv_device ? kv_device : kv.get();
    a.kv_row_stride = p.kv_row_stride;
  }
  a.num_slots = p.num_slots;
  a.indices = indices.get();
  a.topk_length = p.topk_length.empty() ? nullptr : lengths.get();
  a.out = out.get();
  a.lse = lse.get();
  a.max_logits = max_logits.get();
  a.rows = p.rows;
  a.h_q = p.h_q;
  a.topk = p.topk;
  a.sm_scale = p.sm_scale;
  a.precise = m.precise;
  a.attn_sink = p.attn_sink.empty() ? nullptr : sink.get();
  std::size_t ws_bytes = 0;
  if (m.splits != 1) {
    a.num_splits = m.splits;
    ws_bytes = std::max<std::size_t>(16, nsajit::sparse_mla_workspace_bytes(p.rows, p.h_q, p.topk, m.splits));
  }
  DeviceBuffer<std::uint8_t> ws(ws_bytes);
  if (ws_bytes) {
    ws.poison(0xFF);  // NaN floats: an unwritten partial would show
    a.workspace = ws.get();
    a.workspace_bytes = ws_bytes;
  }
  if (run) run(a);
  else if (m.tile.kernel != nsajit::MlaKernel::automatic) nsajit::detail::sparse_mla_decode(a, m.tile);
  else nsajit::sparse_mla_decode(a);
  return {out.download(), lse.download(), max_logits.download()};
}

// Launch + compare with the fp64 reference under the spec's tolerance (the mode's precision).
Result check(const Problem& p, const std::string& what, const Mode& m = {}) {
  INFO(what, " [", m.name(), "] (rows ", p.rows, ", h_q ", p.h_q, ", topk ", p.topk, ", sm_scale ", p.sm_scale, ")");
  Result got = launch(p, m);
  const ref::SparseMlaOutput want = reference(p);
  const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, want, p.rows, p.h_q, ref::mla_tolerance(m.precise));
  CHECK_MESSAGE(c.ok, c.message);
  std::string msg;
  const std::size_t bad_max = ref::compare_max_logits(got.max_logits, want, msg);
  CHECK_MESSAGE(bad_max == 0, msg);
  return got;
}

// The modes every correctness case runs in.
const std::vector<Mode>& all_modes() {
  static const std::vector<Mode> modes = {
      Mode{},                                        // bf16, batch-invariant
      Mode{.fp8 = true, .page_size = 64},            // fp8, batch-invariant
      Mode{.splits = 3},                             // bf16, split-KV
      Mode{.fp8 = true, .page_size = 1, .splits = 0} // fp8 page size 1, automatic splits
  };
  return modes;
}

// The bf16 wgmma kernel's seesaw schedule as a mode, where the device runs it (sm_90a).
std::optional<Mode> seesaw_mode() {
  if (const auto& device = nsajit::driver::current_context_info(); device.major != 9 || device.minor != 0)
    return std::nullopt;
  Mode m;
  m.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = nsajit::MlaKernel::wgmma,
            .producer_warps = 4, .schedule = nsajit::MlaSchedule::seesaw};
  return m;
}

// all_modes() with P carried as bf16 hi + lo (the precise option).
std::vector<Mode> precise_modes() {
  std::vector<Mode> modes = all_modes();
  for (Mode& m : modes) m.precise = true;
  return modes;
}

// Every out element of (row, all heads) is exactly 0, every lse +inf, every max_logits -inf.
void check_empty_row(const Result& r, const Problem& p, int row) {
  INFO("row ", row, " has no valid index");
  bool zeros = true, infs = true, ninfs = true;
  for (std::size_t i = std::size_t(row) * p.h_q * DV; i < std::size_t(row + 1) * p.h_q * DV; ++i)
    zeros &= ref::bf16_to_float(r.out[i]) == 0.f;
  for (int h = 0; h < p.h_q; ++h) {
    infs &= r.lse[std::size_t(row) * p.h_q + h] == std::numeric_limits<float>::infinity();
    ninfs &= r.max_logits[std::size_t(row) * p.h_q + h] == -std::numeric_limits<float>::infinity();
  }
  CHECK(zeros);
  CHECK(infs);
  CHECK(ninfs);
}

void set_range(Problem& p, int row, int begin, int end, std::int32_t value) {
  for (int j = begin; j < end; ++j) p.indices[std::size_t(row) * p.topk + j] = value;
}

bool same_bits(const Result& a, std::size_t a_head, const Result& b, std::size_t b_head, std::size_t heads) {
  for (std::size_t i = 0; i < heads * DV; ++i)
    if (a.out[a_head * DV + i] != b.out[b_head * DV + i]) return false;
  for (std::size_t h = 0; h < heads; ++h)
    if (std::bit_cast<std::uint32_t>(a.lse[a_head + h]) != std::bit_cast<std::uint32_t>(b.lse[b_head + h]) ||
        std::bit_cast<std::uint32_t>(a.max_logits[a_head + h]) != std::bit_cast<std::uint32_t>(b.max_logits[b_head + h]))
      return false;
  return true;
}

}  // namespace

TEST_CASE("sparse_mla gpu: every h_q at topk 2048, both sm_scales, every mode") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    for (int h_q : {8, 16, 32, 64, 128}) {
      for (float scale : {kScaleModel, kScaleDefault}) {
        Problem p = make_problem(2, h_q, 2048, 6000, std::uint32_t(h_q));
        p.sm_scale = scale;
        finalize(p, m);
        check(p, "random valid slots", m);
      }
    }
  }
}

// A kernel variant the defaults do not pick, launched through an explicit plan: 4 rows of
// topk 2048 per (mode, h_q), seeded seed + h_q: a gap mid-row, a row with every entry invalid,
// every third entry invalid.
namespace {
void check_forced_variant(nsajit::TileConfig tile, std::uint32_t seed, std::initializer_list<Mode> modes,
                          std::initializer_list<int> heads) {
  for (Mode m : modes) {
    m.tile = tile;
    for (int h_q : heads) {
      Problem p = make_problem(4, h_q, 2048, 5000, seed + std::uint32_t(h_q));
      set_range(p, 1, 1000, 1100, -1);  // a gap mid-row
      set_range(p, 2, 0, 2048, -1);     // every entry invalid
      for (int j = 0; j < 2048; j += 3) p.indices[3 * 2048 + j] = -1;
      finalize(p, m);
      const Result r = check(p, nsajit::to_string(tile.kernel) + " + " + std::to_string(tile.producer_warps) +
                                    " producer warps, h_q " + std::to_string(h_q), m);
      check_empty_row(r, p, 2);
    }
  }
}
}  // namespace

// The mma.sync kernel without producer warps: the default only for FP8 at 32 heads per CTA (and
// off sm_90a at 64), a tuning point below.
TEST_CASE("sparse_mla gpu: the mma_sync kernel without producer warps up to 32 heads, bf16 and FP8, splits, invalid entries") {
  NSAJIT_REQUIRE_GPU();
  check_forced_variant({.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 0}, 700,
                       {Mode{}, Mode{.splits = 3}, Mode{.splits = 0}, Mode{.fp8 = true},
                        Mode{.fp8 = true, .page_size = 1, .splits = 3}, Mode{.fp8 = true, .splits = 0}},
                       {8, 16, 32});
}

// The FP8 direct kernel (2 producer warps copy raw tokens; the MMA warps take e4m3 fragments):
// the forced-variant rows at 8 and 16 heads (page sizes 64 and 1, splits, a gap, an all-invalid
// row, every third entry invalid); topk 64 and 576 (fewer tiles than its 4 buffers, an odd count a
// split), topk_length, 40 rows of h_q 64 in 16-head groups; attention sinks (the scale
// magnitudes case below runs it too: per-token scales 1e-8..1e3 in one tile).
TEST_CASE("sparse_mla gpu: the FP8 direct kernel at 8 and 16 heads: splits, invalid entries, topk 64/576, topk_length, attn_sink") {
  NSAJIT_REQUIRE_GPU();
  const nsajit::TileConfig direct{.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 2};
  check_forced_variant(direct, 1300,
                       {Mode{.fp8 = true}, Mode{.fp8 = true, .page_size = 1, .splits = 3},
                        Mode{.fp8 = true, .splits = 0}, Mode{.fp8 = true, .splits = 16}},
                       {8, 16});
  for (const int splits : {1, 0}) {
    const Mode m{.fp8 = true, .splits = splits, .tile = direct};
    for (const int topk : {64, 576}) {
      Problem p = make_problem(3, 16, topk, 2000, std::uint32_t(1310 + topk));
      set_range(p, 1, topk - 64, topk, -1);
      finalize(p, m);
      check(p, "direct topk " + std::to_string(topk), m);
    }
    Problem lens = make_problem(5, 16, 2048, 6000, 1320);
    lens.topk_length = {2048, 0, 1, 700, 2047};
    finalize(lens, m);
    check_empty_row(check(lens, "direct topk_length", m), lens, 1);
    Problem wide = make_problem(40, 64, 2048, 9000, 1321);
    Mode m16 = m;
    m16.tile.heads_per_cta = 16;
    finalize(wide, m16);
    check(wide, "direct h_q 64 in 16-head groups", m16);
    Problem sinks = make_problem(4, 16, 2048, 6000, 1322);
    set_range(sinks, 2, 0, 2048, -1);
    std::mt19937 rng(1323);
    std::uniform_real_distribution<float> around(std::log(2048.f) - 3.f, std::log(2048.f) + 6.f);
    sinks.attn_sink.resize(16);
    for (float& v : sinks.attn_sink) v = around(rng);
    sinks.attn_sink[0] = std::numeric_limits<float>::infinity();
    sinks.attn_sink[1] = -std::numeric_limits<float>::infinity();
    finalize(sinks, m);
    check_empty_row(check(sinks, "direct attn_sink", m), sinks, 2);
  }
}

// The bf16 wgmma kernel below 64 heads per CTA (no default: 4 % slower than mma_sync at 16), a
// tuning point.
TEST_CASE("sparse_mla gpu: the bf16 wgmma kernel at 16 and 32 heads, splits, invalid entries") {
  NSAJIT_REQUIRE_GPU();
  if (const auto& device = nsajit::driver::current_context_info(); device.major != 9 || device.minor != 0) {
    MESSAGE("skipped: the wgmma kernel needs sm_90a");
    return;
  }
  check_forced_variant({.kernel = nsajit::MlaKernel::wgmma, .producer_warps = 4}, 900,
                       {Mode{}, Mode{.splits = 3}, Mode{.splits = 0}}, {16, 32});
}

// The single schedule of the bf16 wgmma kernel at 64 heads per CTA, unsplit and split: the defaults
// take the seesaw there (sparse_mla::default_schedule), so only an explicit plan (or a database
// entry naming it) reaches it.
TEST_CASE("sparse_mla gpu: the single-schedule bf16 wgmma kernel at 64 heads, unsplit and split, invalid entries") {
  NSAJIT_REQUIRE_GPU();
  if (const auto& device = nsajit::driver::current_context_info(); device.major != 9 || device.minor != 0) {
    MESSAGE("skipped: the wgmma kernel needs sm_90a");
    return;
  }
  check_forced_variant({.heads_per_cta = 64, .kernel = nsajit::MlaKernel::wgmma, .producer_warps = 4,
                        .schedule = nsajit::MlaSchedule::single},
                       940, {Mode{}, Mode{.splits = 3}, Mode{.splits = 0}}, {64, 128});
}

// The precise option (P = P_hi + P_lo) on every kernel the defaults pick and on the forced
// variants, under the precise tolerance (1e-3 floor), which bf16 P alone does not meet on these
// inputs; and it reaches the kernel: its results differ from the default's.
TEST_CASE("sparse_mla gpu: precise: every h_q and mode under the 1e-3 tolerance; forced variants") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : precise_modes()) {
    for (int h_q : {8, 16, 32, 64, 128}) {
      Problem p = make_problem(2, h_q, 2048, 6000, std::uint32_t(300 + h_q));
      set_range(p, 1, 500, 600, -1);
      finalize(p, m);
      const Result precise = check(p, "precise, random valid slots", m);
      Mode field = m;
      field.precise = false;
      const Result standard = launch(p, field);
      CHECK_MESSAGE(!same_bits(precise, 0, standard, 0, std::size_t(p.rows) * p.h_q),
                    "the precise option changed nothing (h_q ", h_q, ", ", m.name(), ")");
    }
  }
  check_forced_variant({.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 0}, 760,
                       {Mode{.precise = true}, Mode{.fp8 = true, .precise = true}}, {16, 32});
  if (const auto& device = nsajit::driver::current_context_info(); device.major == 9 && device.minor == 0)
    check_forced_variant({.kernel = nsajit::MlaKernel::wgmma, .producer_warps = 4}, 960, {Mode{.precise = true}}, {16});
}

// The seesaw schedule of the bf16 wgmma kernel (tile.schedule = seesaw, docs/notes/sparse_mla.md
// "The seesaw schedule for the bf16 prefill"), launched through an explicit plan, unsplit, in 2, 3
// and 16 splits (splits of whole pairs; at topk 128 and 512, or short rows, some splits empty), and
// in 2 splits merged by a 2-CTA cluster (tile.combine cluster): prefill rows at h_q 64 and 128, topk 128 / 512 / 2048: every entry invalid, a gap, every
// third entry invalid, invalid values other than -1; topk_length 0, one tile, a partial tile,
// topk - 1, odd tile counts past the first pair, negative and past topk (entries past it point at
// NaN slots); then the same rows with attention sinks (random, +inf, -inf); against the fp64
// reference at the default tolerance.
TEST_CASE("sparse_mla gpu: the seesaw schedule: h64/h128, topk 128/512/2048, splits 1/2/3/16, cluster combine, invalid entries, topk_length, attn_sink") {
  NSAJIT_REQUIRE_GPU();
  const std::optional<Mode> seesaw = seesaw_mode();
  if (!seesaw) {
    MESSAGE("skipped: the wgmma kernel needs sm_90a");
    return;
  }
  try {
    nsajit::validate(nsajit::with_default_tile(
        {.family = nsajit::Family::sparse_mla, .h_q = 64, .topk = 2048, .tile = seesaw->tile, .arch = {90, 'a'}}));
  } catch (const nsajit::InvalidArgument& e) {
    FAIL("the seesaw schedule is not selectable: ", e.what());
    return;
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (const int splits : {1, 2, 3, 16, -2}) {  // -2: 2 splits, tile.combine cluster
    Mode m = *seesaw;
    m.splits = std::abs(splits);
    if (splits < 0) m.tile.combine = nsajit::MlaCombine::cluster;
    for (int h_q : {64, 128}) {
      for (int topk : {128, 512, 2048}) {
        const int rows = 16;
        Problem p = make_problem(rows, h_q, topk, 7000, std::uint32_t(1100 + h_q + topk));
        set_range(p, 1, 0, topk, -1);                 // every entry invalid
        set_range(p, 2, topk / 4, topk / 4 + 50, -1);  // a gap across a tile boundary
        for (int j = 0; j < topk; j += 3) p.indices[std::size_t(3) * topk + j] = -1;
        p.topk_length.assign(std::size_t(rows), topk);
        p.topk_length[4] = 0;         // no entry used
        p.topk_length[5] = 64;        // one tile: the pair's odd tile is empty
        p.topk_length[6] = 100;       // a partial second tile
        p.topk_length[7] = topk - 1;  // the last tile one short
        p.topk_length[8] = std::min(topk - 1, 2 * 64 + 30);  // 3 tiles: an odd count past the first pair (topk 128: 2)
        p.topk_length[9] = topk - 123;                       // 2k + 1 tiles (topk 128: 1)
        p.topk_length[10] = -3;                              // as 0
        p.topk_length[11] = kIntMax;                         // as topk
        // Row 12: invalid values other than -1, sprinkled: other negatives and slots >= num_slots.
        const std::int32_t odd[] = {-2, -1000, kIntMin, std::int32_t(p.num_slots), std::int32_t(p.num_slots + 1), kIntMax};
        for (int j = 0; j < topk; j += 7) p.indices[std::size_t(12) * topk + j] = odd[(j / 7) % 6];
        // Row 13: the first valid token in an odd tile (WG0's tile 0 all invalid) and, past the
        // first pair, an even tile all invalid while the running max is finite.
        set_range(p, 13, 0, 64, -1);
        if (topk >= 256) set_range(p, 13, 128, 192, -1);
        // Rows 14 / 15: the same slots in opposite tile orders, KV scaled up tile by tile along row 14,
        // so that its tile maxima rise (WG1's tile raises the pair's max: the correction each pair)
        // and row 15's fall (never).
        for (int t = 0; t < topk / 64; ++t)
          for (int j = 0; j < 64; ++j)
            p.indices[std::size_t(15) * topk + std::size_t(topk - 64 * (t + 1) + j)] =
                p.indices[std::size_t(14) * topk + std::size_t(64 * t + j)];
        // Entries past topk_length point at never-filled (NaN) slots: reading one would poison the row.
        for (int r = 0; r < rows; ++r)
          for (int j = std::clamp(p.topk_length[std::size_t(r)], 0, topk); j < topk; ++j)
            p.indices[std::size_t(r) * topk + j] = p.poison_slot(j % kPoisonSlots);
        finalize(p, m);
        for (int t = 0; t < topk / 64; ++t) {
          const float scale = 1.f + 0.125f * float(t);
          for (int j = 0; j < 64; ++j) {
            std::uint16_t* row = p.kv.data() + p.indices[std::size_t(14) * topk + std::size_t(64 * t + j)] * p.kv_row_stride;
            for (int d = 0; d < D; ++d) row[d] = ref::float_to_bf16(ref::bf16_to_float(row[d]) * scale);
          }
        }
        const std::string what = "seesaw h_q " + std::to_string(h_q) + " topk " + std::to_string(topk) + " " + m.name() +
                                 (splits < 0 ? " cluster combine" : "");
        const Result r = check(p, what, m);
        check_empty_row(r, p, 1);
        check_empty_row(r, p, 4);
        check_empty_row(r, p, 10);

        Problem sinks = p;
        std::mt19937 rng(std::uint32_t(h_q + topk));
        std::uniform_real_distribution<float> around(std::log(float(topk)) - 3.f, std::log(float(topk)) + 6.f);
        sinks.attn_sink.resize(std::size_t(h_q));
        for (float& s : sinks.attn_sink) s = around(rng);
        sinks.attn_sink[0] = inf;
        sinks.attn_sink[1] = -inf;
        const Result s = check(sinks, what + " attn_sink", m);
        check_empty_row(s, sinks, 1);
        check_empty_row(s, sinks, 4);
        check_empty_row(s, sinks, 10);
      }
    }
  }
  {  // the cluster combine with the caller's tile and a forced count other than 2: an error naming it
    Mode m = *seesaw;
    m.splits = 3;
    m.tile.combine = nsajit::MlaCombine::cluster;
    Problem p = make_problem(2, 64, 256, 3000, 77);
    finalize(p, m);
    CHECK_THROWS_WITH_AS(launch(p, m), doctest::Contains("num_splits"), nsajit::InvalidArgument);
  }
}

// FlashMLA's attention sink in the epilogue (split: in the combine): out of head h times
// 1 / (1 + exp(sink[h] - lse)); sinks random around the rows' lse, head 0 +inf (out 0), head 1
// -inf (the plain output, bit for bit); lse and max_logits bit-identical to the call without a
// sink; rows with no valid index (all -1, topk_length 0) keep out 0, lse +inf. Decode rows
// (both kernels the defaults pick, the forced mma_sync kernel at 64 heads, bf16 and FP8, split
// and unsplit, precise) and prefill rows.
TEST_CASE("sparse_mla gpu: attn_sink: random, +inf, -inf; split and unsplit; both kernels; lse unchanged") {
  NSAJIT_REQUIRE_GPU();
  std::vector<Mode> modes = all_modes();
  modes.push_back(Mode{.splits = 3, .precise = true});
  modes.push_back(Mode{.tile = {.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 0}});
  modes.push_back(Mode{.fp8 = true, .splits = 4, .tile = {.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 0}});
  const float inf = std::numeric_limits<float>::infinity();
  for (bool prefill : {false, true}) {
    for (const Mode& m : modes) {
      if (prefill && m.splits != 1) continue;  // prefill rows fill the GPU: one CTA per row
      for (int h_q : {16, 64, 128}) {
        if (m.tile.kernel == nsajit::MlaKernel::mma_sync && h_q != 64) continue;
        const int rows = prefill ? 48 : 4, topk = prefill ? 512 : 2048;
        Problem p = make_problem(rows, h_q, topk, 6000, std::uint32_t(500 + h_q + rows));
        set_range(p, 1, 0, topk, -1);  // no valid index
        p.topk_length.assign(std::size_t(rows), topk);
        p.topk_length[2] = 0;          // no entry used
        p.topk_length[3] = topk / 3;
        finalize(p, m);
        // lse of these rows is ~ln(topk) + a few: sinks around it make the factor anywhere in (0, 1).
        std::mt19937 rng(std::uint32_t(h_q + 7 * rows));
        std::uniform_real_distribution<float> around(std::log(float(topk)) - 3.f, std::log(float(topk)) + 6.f);
        p.attn_sink.resize(std::size_t(h_q));
        for (float& s : p.attn_sink) s = around(rng);
        p.attn_sink[0] = inf;
        p.attn_sink[1] = -inf;
        INFO((prefill ? "prefill" : "decode"), " rows ", rows, " h_q ", h_q, " ", m.name(),
             (m.tile.kernel == nsajit::MlaKernel::mma_sync ? " forced mma_sync" : ""));
        Runner run;  // a forced tile goes through launch()'s explicit plan
        if (prefill && m.tile.kernel == nsajit::MlaKernel::automatic)
          run = [](const nsajit::SparseMlaDecodeArgs& a) { nsajit::sparse_mla_prefill(a); };
        const Result got = launch(p, m, nullptr, run);
        const ref::SparseMlaOutput want = reference(p);
        const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, want, p.rows, p.h_q, ref::mla_tolerance(m.precise));
        CHECK_MESSAGE(c.ok, c.message);
        Problem plain = p;
        plain.attn_sink.clear();
        const Result base = launch(plain, m, nullptr, run);
        bool lse_same = true, zero = true, plain_same = true, scaled = false;
        for (int r = 0; r < rows; ++r) {
          for (int h = 0; h < h_q; ++h) {
            const std::size_t hd = std::size_t(r) * h_q + h;
            lse_same &= std::bit_cast<std::uint32_t>(got.lse[hd]) == std::bit_cast<std::uint32_t>(base.lse[hd]) &&
                        std::bit_cast<std::uint32_t>(got.max_logits[hd]) == std::bit_cast<std::uint32_t>(base.max_logits[hd]);
            for (int d = 0; d < DV; ++d) {
              const std::uint16_t g = got.out[hd * DV + d], b = base.out[hd * DV + d];
              if (h == 0) zero &= ref::bf16_to_float(g) == 0.f;
              if (h == 1) plain_same &= g == b;
              if (h >= 2 && g != b) scaled = true;
            }
          }
        }
        CHECK_MESSAGE(lse_same, "lse / max_logits changed by the sink");
        CHECK_MESSAGE(zero, "sink +inf: out must be 0");
        CHECK_MESSAGE(plain_same, "sink -inf: out must equal the call without a sink");
        CHECK_MESSAGE(scaled, "the finite sinks changed nothing");
        check_empty_row(got, p, 1);
        check_empty_row(got, p, 2);
      }
    }
  }
}

TEST_CASE("sparse_mla gpu: invalid entries at the front, middle, end, whole blocks, all") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    for (int h_q : {16, 128}) {
      Problem p = make_problem(10, h_q, 2048, 5000, 11);
      set_range(p, 0, 0, 100, -1);        // front
      set_range(p, 1, 1000, 1100, -1);    // middle
      set_range(p, 2, 1748, 2048, -1);    // end
      set_range(p, 3, 640, 704, -1);      // exactly one 64-token block
      set_range(p, 4, 0, 2048, -1);       // everything
      set_range(p, 5, 0, 2048, -1);       // one valid entry after 23 all-invalid blocks
      p.indices[5 * 2048 + 1500] = 42;
      set_range(p, 6, 1, 2048, -1);       // one valid entry, first
      for (int j = 0; j < 2048; j += 2) p.indices[7 * 2048 + j] = -1;  // every other entry
      for (int b = 0; b < 32; b += 2) set_range(p, 8, b * 64, b * 64 + 64, -1);  // every other block
      // Row 9: invalid values other than -1, sprinkled: other negatives and slots >= num_slots.
      const std::int32_t odd[] = {-2, -1000, kIntMin, std::int32_t(p.num_slots), std::int32_t(p.num_slots + 1),
                                  kIntMax};
      for (int j = 0; j < 2048; j += 7) p.indices[9 * 2048 + j] = odd[(j / 7) % 6];
      finalize(p, m);
      const Result r = check(p, "invalid entries", m);
      check_empty_row(r, p, 4);
    }
  }
}

TEST_CASE("sparse_mla gpu: rows whose every entry is an out-of-range value") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    Problem p = make_problem(3, 32, 512, 1000, 3);
    set_range(p, 0, 0, 512, -7);
    set_range(p, 1, 0, 512, std::int32_t(p.num_slots));
    set_range(p, 2, 0, 512, kIntMin);
    finalize(p, m);
    const Result r = check(p, "all invalid, not -1", m);
    for (int row = 0; row < 3; ++row) check_empty_row(r, p, row);
  }
}

TEST_CASE("sparse_mla gpu: topk_length uses only the first n entries") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    const std::vector<std::int32_t> lengths{0, 1, 63, 64, 65, 1000, 2047, 2048, 5000, -3, kIntMin, kIntMax};
    Problem p = make_problem(int(lengths.size()), 16, 2048, 9000, 5);
    p.topk_length = lengths;
    // Entries past n point at never-filled (NaN) slots: reading one would poison the row.
    for (int r = 0; r < p.rows; ++r)
      for (int j = std::clamp(lengths[std::size_t(r)], 0, p.topk); j < p.topk; ++j)
        p.indices[std::size_t(r) * p.topk + j] = p.poison_slot(j % kPoisonSlots);
    finalize(p, m);
    const Result r = check(p, "topk_length", m);
    check_empty_row(r, p, 0);
    check_empty_row(r, p, 9);
    check_empty_row(r, p, 10);
  }
}

TEST_CASE("sparse_mla gpu: MTP next_n 1..4 with requests shorter than next_n") {
  NSAJIT_REQUIRE_GPU();
  // Request lengths; MTP row j of a request of length L sees L - next_n + j + 1 keys (valid
  // prefix of distinct slots, then -1), so requests shorter than next_n have empty first rows.
  const std::vector<int> lens{1, 2, 3, 700, 4000};
  for (const Mode& m : {Mode{}, Mode{.fp8 = true, .page_size = 64, .splits = 0}}) {
    for (int next_n = 1; next_n <= 4; ++next_n) {
      const int b = int(lens.size());
      Problem p = make_problem(b * next_n, 64, 2048, 8000, 60 + next_n);
      for (int r = 0; r < b; ++r)
        for (int j = 0; j < next_n; ++j) {
          const int row = r * next_n + j;
          const int seen = lens[std::size_t(r)] - next_n + j + 1;
          set_range(p, row, std::clamp(seen, 0, p.topk), p.topk, -1);
        }
      finalize(p, m);
      INFO("next_n ", next_n);
      const Result res = check(p, "MTP", m);
      for (int r = 0; r < b; ++r)
        for (int j = 0; j < next_n; ++j)
          if (lens[std::size_t(r)] - next_n + j + 1 <= 0) check_empty_row(res, p, r * next_n + j);
    }
  }
}

TEST_CASE("sparse_mla gpu: kv_row_stride > 576 (padding is NaN and never read)") {
  NSAJIT_REQUIRE_GPU();
  for (std::int64_t stride : {584, 640, 656 * 2}) {
    Problem p = make_problem(3, 64, 1024, 3000, 9, stride);
    set_range(p, 1, 100, 200, -1);
    finalize(p);
    check(p, "kv_row_stride " + std::to_string(stride));
  }
  // The seesaw's producer: one base address a row, its 256-byte fills over a row not 128-byte aligned.
  if (const std::optional<Mode> seesaw = seesaw_mode()) {
    Problem p = make_problem(3, 128, 1024, 3000, 10, 584);
    set_range(p, 1, 100, 200, -1);
    finalize(p, *seesaw);
    check(p, "seesaw kv_row_stride 584", *seesaw);
  }
}

// An empty pool (num_slots 0, kv null): every entry is invalid, so every row is empty (out 0, lse
// +inf, max_logits -inf); the kernels' ignored copy addresses then point at q, not at the pool.
TEST_CASE("sparse_mla gpu: an empty pool (num_slots 0, kv null): every row empty in every kernel and mode") {
  NSAJIT_REQUIRE_GPU();
  std::vector<Mode> modes = all_modes();
  if (const std::optional<Mode> seesaw = seesaw_mode()) modes.push_back(*seesaw);
  std::mt19937 rng(31);
  std::uniform_int_distribution<std::int32_t> entry(-3, 5000);
  for (const Mode& m : modes)
    for (int h_q : {16, 64, 128}) {
      if (m.tile.schedule == nsajit::MlaSchedule::seesaw && h_q < 64) continue;
      Problem p;
      p.rows = 4;
      p.h_q = h_q;
      p.topk = 256;
      p.q.resize(std::size_t(p.rows) * h_q * D);
      for (auto& v : p.q) v = random_bf16(rng);
      p.indices.resize(std::size_t(p.rows) * p.topk);
      for (auto& v : p.indices) v = entry(rng);
      finalize(p, m);  // kv and the FP8 cache stay empty: null on the device
      REQUIRE(p.kv.empty());
      const Result r = check(p, "empty pool h_q " + std::to_string(h_q), m);
      for (int row = 0; row < p.rows; ++row) check_empty_row(r, p, row);
    }
}

// Page size 3: the slot -> page division (the wgmma kernel takes a power of two by shifts, the
// mma.sync kernel always divides); h_q 32 runs the mma.sync kernel, 128 the wgmma one. Only the
// padded pages (pad 48) tell a wrong page from a right one: unpadded, page * stride + row * 656 is
// slot * 656 whatever the page.
TEST_CASE("sparse_mla gpu: FP8 page sizes 1, 3 and 64, padded pages, shuffled page tables") {
  NSAJIT_REQUIRE_GPU();
  for (int page_size : {1, 3, 64})
    for (int h_q : {16, 32, 128})  // 16: FP8 producer warps dequantizing in place
      for (std::int64_t pad : {0, 48}) {
        // Positions 0..len-1 of each request map to slots through a shuffled page table.
        const int num_pages = 12000 / page_size + 2;
        Problem p = make_problem(4, h_q, 1024, std::int64_t(num_pages) * page_size, std::uint32_t(70 + page_size + h_q));
        std::mt19937 rng(71);
        std::vector<std::int32_t> table(std::size_t(num_pages) - 1);  // the last page stays NaN
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), rng);
        const int len = 3000;
        for (int r = 0; r < p.rows; ++r)
          for (int j = 0; j < p.topk; ++j) {
            const int pos = std::uniform_int_distribution<int>(0, len - 1)(rng);
            p.indices[std::size_t(r) * p.topk + j] = table[std::size_t(pos / page_size)] * page_size + pos % page_size;
          }
        set_range(p, 2, 512, 1024, -1);
        p.num_slots = std::int64_t(num_pages) * page_size;
        Mode m{.fp8 = true, .page_size = page_size, .page_pad = pad};
        finalize(p, m);
        check(p, "page size " + std::to_string(page_size) + " h_q " + std::to_string(h_q) + " pad " + std::to_string(pad), m);
        if (h_q == 16) {  // and the FP8 direct kernel
          m.tile = {.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 2};
          check(p, "direct, page size " + std::to_string(page_size) + " pad " + std::to_string(pad), m);
        }
      }
}

TEST_CASE("sparse_mla gpu: FP8 tiles zero, tiny, 448, huge, non-power-of-two scales") {
  NSAJIT_REQUIRE_GPU();
  // Tile t of each token: kind chosen per token: N(0,1) x {0, 1e-6, 1, 448-peaked, 3e5}. q dims of
  // tiles 2 and 3 are scaled down so scores stay moderate.
  auto fill = [](std::mt19937& rng, std::uint16_t* row) {
    static const float mags[] = {0.f, 1e-6f, 1.f, 100.f, 3e5f};
    std::normal_distribution<float> normal(0.f, 1.f);
    for (int t = 0; t < 4; ++t) {
      const float mag = mags[std::uniform_int_distribution<int>(0, 4)(rng)];
      const int peak = std::uniform_int_distribution<int>(0, 127)(rng);
      for (int d = 0; d < 128; ++d) {
        float v = mag * normal(rng);
        if (mag == 100.f && d == peak) v = 448.f;  // amax exactly 448: scale 1
        row[128 * t + d] = ref::float_to_bf16(v);
      }
    }
    for (int d = 512; d < D; ++d) row[d] = ref::float_to_bf16(normal(rng));
  };
  for (int h_q : {16, 64}) {
    Problem p = make_problem(3, h_q, 512, 3000, 80);
    for (int r = 0; r < p.rows; ++r)
      for (int h = 0; h < h_q; ++h)
        for (int d = 256; d < 512; ++d) {
          std::uint16_t& v = p.q[(std::size_t(r) * h_q + h) * D + d];
          v = ref::float_to_bf16(ref::bf16_to_float(v) * (d < 384 ? 1e-2f : 1e-5f));
        }
    set_range(p, 1, 0, 100, -1);
    for (const int pw : {-1, 2}) {  // the default kernel; the FP8 direct kernel at 16 heads
      if (pw == 2 && h_q != 16) continue;
      Mode m{.fp8 = true, .page_size = 64};
      if (pw == 2) m.tile = {.kernel = nsajit::MlaKernel::mma_sync, .producer_warps = 2};
      Problem run = p;
      finalize(run, m, 81, +fill);
      check(run, "fp8 tile magnitudes" + std::string(pw == 2 ? " (direct)" : ""), m);
    }
  }
}

TEST_CASE("sparse_mla gpu: rows = 1 and rows = 64") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    Problem one = make_problem(1, 128, 2048, 4096, 21);
    finalize(one, m);
    check(one, "rows 1", m);
    Problem many = make_problem(64, 16, 2048, 20000, 22);
    for (int r = 0; r < 64; r += 5) set_range(many, r, (r * 37) % 2000, (r * 37) % 2000 + 48, -1);
    finalize(many, m);
    check(many, "rows 64", m);
  }
}

TEST_CASE("sparse_mla gpu: topk 64, 576 (odd block count), 16384") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : all_modes()) {
    for (int h_q : {16, 32})  // 16: FP8 producer warps, one tile (topk 64) and an odd count a split
      for (int topk : {64, 576}) {
        Problem p = make_problem(4, h_q, topk, 2000, std::uint32_t(topk + h_q));
        set_range(p, 1, topk - 64, topk, -1);
        finalize(p, m);
        check(p, "topk " + std::to_string(topk) + " h_q " + std::to_string(h_q), m);
      }
    Problem big = make_problem(1, 16, 16384, 17000, 17);
    set_range(big, 0, 8000, 9000, -1);
    finalize(big, m);
    check(big, "topk 16384", m);
  }
}

TEST_CASE("sparse_mla gpu: peaked softmax (large scores) stays finite and accurate") {
  NSAJIT_REQUIRE_GPU();
  std::vector<Mode> modes = all_modes();
  for (const Mode& m : precise_modes()) modes.push_back(m);
  for (const Mode& m : modes) {
    Problem p = make_problem(4, 16, 1024, 3000, 31);
    p.sm_scale = 1.0f;  // scores ~ N(0, 24^2): one token dominates, exp underflows for most
    set_range(p, 2, 0, 512, -1);
    finalize(p, m);
    check(p, "sm_scale 1.0", m);
  }
}

TEST_CASE("sparse_mla gpu: scores that jump mid-row raise the softmax reference late (lazy rescale)") {
  NSAJIT_REQUIRE_GPU();
  // The 64-head kernel exponentiates against a reference max raised only when a tile's max
  // exceeds it by more than 8 in log2 units (templates/sparse_mla_wgmma.cuh). Row 0's KV rows are
  // scaled by 4 from its 11th 64-token tile on and by 4.5 from its 21st, row 1's the other way
  // round; the rows share about a third of their slots, so every tile mixes some scaled tokens
  // in. The result (simulated in fp64 for this data): most heads raise the reference after O is
  // no longer zero, in several tiles, and also run tiles without a raise whose probabilities
  // reach 2^8; dropping either warpgroup's rescale, l's rescale, or taking max_logits from the
  // reference or lse from the true max each fails in dozens of heads. max_logits must stay the
  // true maximum.
  for (const Mode& m : {Mode{}, Mode{.splits = 3}, Mode{.precise = true}}) {
    for (int h_q : {64, 128}) {
      Problem p = make_problem(2, h_q, 2048, 6000, 41);
      finalize(p, m);
      std::vector<bool> scaled(std::size_t(p.num_slots), false);
      for (int r = 0; r < p.rows; ++r) {
        for (int j = 0; j < p.topk; ++j) {
          const int tile = r == 0 ? j / 64 : 31 - j / 64;
          const float c = tile >= 20 ? 4.5f : tile >= 10 ? 4.f : 1.f;
          const std::int64_t idx = p.indices[std::size_t(r) * p.topk + j];
          if (c == 1.f || scaled[std::size_t(idx)]) continue;
          scaled[std::size_t(idx)] = true;
          for (int d = 0; d < D; ++d) {
            std::uint16_t& v = p.kv[std::size_t(idx * p.kv_row_stride + d)];
            v = ref::float_to_bf16(ref::bf16_to_float(v) * c);
          }
        }
      }
      check(p, "KV scaled by 1, 4, 4.5 along the row (and reversed)", m);
    }
  }
}

TEST_CASE("sparse_mla gpu: batch-invariant mode: deterministic and independent of batchmates") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : {Mode{}, Mode{.fp8 = true, .page_size = 64}}) {
    for (int h_q : {16, 128}) {
      INFO(m.name(), " h_q ", h_q);
      Problem batch = make_problem(6, h_q, 1024, 5000, 41);
      set_range(batch, 3, 0, 1024, -1);
      finalize(batch, m);
      const Result a = launch(batch, m);
      const Result b = launch(batch, m);
      CHECK(same_bits(a, 0, b, 0, std::size_t(6 * h_q)));
      // Row 2 alone, and with other batchmates, gives the same bits as inside the batch.
      Problem alone = batch;
      alone.rows = 1;
      alone.q.assign(batch.q.begin() + 2 * h_q * D, batch.q.begin() + 3 * h_q * D);
      alone.indices.assign(batch.indices.begin() + 2 * 1024, batch.indices.begin() + 3 * 1024);
      const Result c = launch(alone, m);
      CHECK(same_bits(c, 0, a, std::size_t(2 * h_q), std::size_t(h_q)));
      Problem other = make_problem(200, h_q, 1024, 5000, 43);  // different batchmates, row 2 at 117
      other.kv = batch.kv;
      other.cache = batch.cache;
      std::copy(alone.q.begin(), alone.q.end(), other.q.begin() + 117 * h_q * D);
      for (auto& v : other.indices) v = v % 64 == 0 ? -1 : std::int32_t(v % 4000);
      std::copy(alone.indices.begin(), alone.indices.end(), other.indices.begin() + 117 * 1024);
      const Result d = launch(other, m);
      CHECK(same_bits(d, std::size_t(117 * h_q), a, std::size_t(2 * h_q), std::size_t(h_q)));
    }
  }
}

TEST_CASE("sparse_mla gpu: split-KV partial results are combined for every split count") {
  NSAJIT_REQUIRE_GPU();
  // h_q 64: the wgmma kernel; 16: the mma.sync kernel with producer warps (splits of invalid
  // entries only: the producers zero every row of their tiles).
  for (int h_q : {64, 16}) {
    for (int splits : {2, 5, 32, 64}) {
      Problem p = make_problem(3, h_q, 2048, 6000, 90 + splits);
      set_range(p, 1, 0, 1500, -1);  // most splits of row 1 are empty
      set_range(p, 2, 0, 2048, -1);  // every split of row 2 is empty
      finalize(p, Mode{.splits = splits});
      const Result r = check(p, "h_q " + std::to_string(h_q) + " splits " + std::to_string(splits), Mode{.splits = splits});
      check_empty_row(r, p, 2);
    }
  }
}

// The combine of split-KV is a programmatic dependent launch (sm_90+); inside a captured graph
// that becomes a programmatic edge. SGLang runs decode in captured graphs.
TEST_CASE("sparse_mla gpu: a split-KV call captured into a CUDA graph matches the eager call") {
  NSAJIT_REQUIRE_GPU();
  for (const Mode& m : {Mode{.splits = 4}, Mode{.fp8 = true, .page_size = 64, .splits = 3}}) {
    Problem p = make_problem(5, 128, 2048, 6000, 4242);
    finalize(p, m);
    const Result eager = check(p, "eager", m);  // also loads the kernels before the capture
    const Result graphed = launch(p, m, nullptr, [](const nsajit::SparseMlaDecodeArgs& a) {
      CUstream stream = nullptr;
      NSAJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
      NSAJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_RELAXED);
      nsajit::sparse_mla_decode(a, stream);
      CUgraph graph = nullptr;
      NSAJIT_CU(cuStreamEndCapture, stream, &graph);
      CUgraphExec exec = nullptr;
      NSAJIT_CU(cuGraphInstantiate, &exec, graph, 0);
      NSAJIT_CU(cuGraphLaunch, exec, stream);
      NSAJIT_CU(cuStreamSynchronize, stream);
      NSAJIT_CU(cuGraphExecDestroy, exec);
      NSAJIT_CU(cuGraphDestroy, graph);
      NSAJIT_CU(cuStreamDestroy, stream);
    });
    CHECK(same_bits(graphed, 0, eager, 0, std::size_t(p.rows) * p.h_q));
  }
}

namespace {

// The child of the test below, in a process of its own with an empty NSAJIT_CACHE_DIR: the split
// kernel is precompiled, the combine is not, and strict mode forbids compiling it.
void split_without_combine_child() {
  Problem p = make_problem(2, 16, 2048, 6000, 31);
  const Mode m{.splits = 4};
  finalize(p, m);
  std::string error = "(no error)";
  std::vector<std::uint8_t> workspace;
  launch(p, m, nullptr, [&](const nsajit::SparseMlaDecodeArgs& a) {
    nsajit::precompile(nsajit::detail::plan_sparse_mla(a).spec);  // the split kernel only
    nsajit::set_strict_mode(true);
    try {
      nsajit::sparse_mla_decode(a);
    } catch (const nsajit::KernelNotPrecompiled& e) {
      error = e.what();
    }
    nsajit::test::synchronize();
    workspace.resize(a.workspace_bytes);
    NSAJIT_CU(cuMemcpyDtoH, workspace.data(), reinterpret_cast<CUdeviceptr>(a.workspace), workspace.size());
  });
  INFO(error);
  CHECK(error.find("kernel sparse_mla_combine.") != std::string::npos);
  // The split kernel did not run: its partials' workspace keeps its poison (0xFF) everywhere.
  REQUIRE_FALSE(workspace.empty());
  CHECK(std::all_of(workspace.begin(), workspace.end(), [](std::uint8_t b) { return b == 0xFF; }));
}

}  // namespace

TEST_CASE("sparse_mla gpu: a split-KV call whose combine kernel strict mode cannot have launches nothing") {
  NSAJIT_REQUIRE_GPU();
  if (std::getenv("NSAJIT_TEST_SPLIT_ORDER_CHILD")) return split_without_combine_child();
  // This binary again, on this case alone, with a cache of its own (a process's cache directory
  // and strict mode are fixed at first use); the environment is built before fork.
  const nsajit::test::TempDir dir("split-order");
  std::vector<std::string> env_text{"NSAJIT_TEST_SPLIT_ORDER_CHILD=1", "NSAJIT_CACHE_DIR=" + dir.path()};
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "NSAJIT_CACHE_DIR=", 17) != 0 && std::strncmp(*e, "NSAJIT_NO_JIT=", 14) != 0)
      env_text.emplace_back(*e);
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "-tc=sparse_mla gpu: a split-KV call whose combine kernel strict mode cannot have*";
  std::string no_intro = "--no-intro=true";
  char* argv[] = {const_cast<char*>("nsajit_tests"), filter.data(), no_intro.data(), nullptr};
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execve("/proc/self/exe", argv, envp.data());
    ::_exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // the child's own checks (its output above says which failed)
}

namespace {

// The reference's compact copy of a problem over a huge pool: each distinct valid slot gets the next of
// `distinct` positions, whose KV row `fill(slot, row)` writes (and uploads to the pool); invalid entries become -1.
template <class Fill>
Problem compact_problem(const Problem& p, int distinct, Fill fill) {
  Problem compact = p;
  compact.num_slots = distinct;
  compact.kv.assign(std::size_t(distinct) * D, ref::kBf16QuietNaN);
  int next = 0;
  std::vector<std::int32_t> seen(std::size_t(distinct), -1);
  for (auto& idx : compact.indices) {
    if (idx < 0 || idx >= p.num_slots) {
      idx = -1;
      continue;
    }
    const auto it = std::find(seen.begin(), seen.begin() + next, idx);
    const int pos = int(it - seen.begin());
    if (pos == next) {
      seen[std::size_t(next++)] = idx;
      fill(idx, compact.kv.data() + std::ptrdiff_t(pos) * D);
    }
    idx = pos;
  }
  return compact;
}

}  // namespace

TEST_CASE("sparse_mla gpu: bf16 slot offsets past 2^31 bytes use 64-bit arithmetic") {
  NSAJIT_REQUIRE_GPU();
  // 3.8M slots x 576 bf16 = 4.4 GB: idx * 576 exceeds 2^31 for idx >= 3 728 271.
  const std::int64_t slots = 3'800'000;
  Problem p = make_problem(2, 16, 128, 2 * kPoisonSlots + 256, 51);  // q and the index layout only
  std::mt19937 rng(52);
  // Half the indices near the top of the pool, half low; row 1 also has invalid entries.
  for (int j = 0; j < 256; ++j)
    p.indices[std::size_t(j)] = j % 2 ? std::int32_t(slots - 1 - 3 * j) : std::int32_t(5 * j);
  set_range(p, 1, 0, 40, -1);
  p.indices[std::size_t(128 + 100)] = std::int32_t(slots);  // just out of range
  p.num_slots = slots;

  DeviceBuffer<std::uint16_t> pool(std::size_t(slots) * D);
  // Two NaN bf16 per 32-bit word (D is even).
  NSAJIT_CU(cuMemsetD32, CUdeviceptr(pool.get()), 0x7fc07fc0u, std::size_t(slots) * D / 2);
  const Problem compact = compact_problem(p, 256, [&](std::int32_t idx, std::uint16_t* row) {
    for (int i = 0; i < D; ++i) row[i] = random_bf16(rng);
    NSAJIT_CU(cuMemcpyHtoD, CUdeviceptr(pool.get() + std::size_t(idx) * D), row, D * 2);
  });
  const Result got = launch(p, Mode{}, pool.get());
  const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, reference(compact), p.rows, p.h_q);
  CHECK_MESSAGE(c.ok, c.message);
}

TEST_CASE("sparse_mla gpu: FP8 pool larger than 2^31 bytes, pages referenced above that offset") {
  NSAJIT_REQUIRE_GPU();
  // 54 000 pages x 64 tokens x 656 B = 2.27 GB; page 51 150 starts past 2^31 bytes.
  const int page_size = 64;
  const std::int64_t pages = 54'000, slots = pages * page_size;
  Problem p = make_problem(2, 32, 256, 2 * kPoisonSlots + 512, 53);
  std::mt19937 rng(54);
  for (int j = 0; j < 512; ++j)  // most indices in pages >= 51 200, a few low ones
    p.indices[std::size_t(j)] = j % 8 == 0 ? std::int32_t(7 * j) : std::int32_t(slots - 1 - 5 * j);
  set_range(p, 1, 10, 50, -1);
  p.indices[std::size_t(256 + 60)] = std::int32_t(slots);  // just out of range
  p.num_slots = slots;

  DeviceBuffer<std::uint8_t> pool(std::size_t(slots) * kTok);
  NSAJIT_CU(cuMemsetD8, CUdeviceptr(pool.get()), 0xFF, std::size_t(slots) * kTok);  // NaN everywhere
  std::vector<std::uint8_t> tok(kTok);
  const Problem compact = compact_problem(p, 512, [&](std::int32_t idx, std::uint16_t* row) {
    for (int i = 0; i < D; ++i) row[i] = random_bf16(rng);
    ref::fp8_kv_quantize_token(row, nsajit::Fp8ScaleFormat::fp32, tok.data());
    ref::fp8_kv_dequantize_token(tok.data(), row);
    NSAJIT_CU(cuMemcpyHtoD, CUdeviceptr(pool.get() + std::size_t(idx) * kTok), tok.data(), kTok);
  });
  for (int splits : {1, 4}) {
    const Result got = launch(p, Mode{.fp8 = true, .page_size = page_size, .splits = splits}, pool.get());
    const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, reference(compact), p.rows, p.h_q);
    CHECK_MESSAGE(c.ok, c.message);
  }
}

// ---- host-side argument checks (no GPU needed: they throw before any driver call) -------------

namespace {

// Plausible, aligned fake device pointers: never dereferenced because validation fails first.
nsajit::SparseMlaDecodeArgs valid_args() {
  nsajit::SparseMlaDecodeArgs a;
  a.q = reinterpret_cast<const void*>(std::uintptr_t(0x10000));
  a.kv = reinterpret_cast<const void*>(std::uintptr_t(0x20000));
  a.num_slots = 100;
  a.indices = reinterpret_cast<const std::int32_t*>(std::uintptr_t(0x30000));
  a.out = reinterpret_cast<void*>(std::uintptr_t(0x40000));
  a.lse = reinterpret_cast<float*>(std::uintptr_t(0x50000));
  a.rows = 1;
  a.h_q = 16;
  a.topk = 2048;
  a.sm_scale = kScaleModel;
  return a;
}

std::string error_of(const nsajit::SparseMlaDecodeArgs& a) {
  try {
    nsajit::sparse_mla_decode(a);
  } catch (const nsajit::InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST_CASE("sparse_mla args: bad arguments throw InvalidArgument naming the argument and value") {
  struct Case {
    const char* expect;  // substring of the message
    void (*edit)(nsajit::SparseMlaDecodeArgs&);
  };
  const Case cases[] = {
      {"argument h_q = 24: expected one of 8, 16, 32, 64, 128", [](auto& a) { a.h_q = 24; }},
      {"argument h_q = 0", [](auto& a) { a.h_q = 0; }},
      {"argument topk = 100", [](auto& a) { a.topk = 100; }},
      {"argument topk = 0", [](auto& a) { a.topk = 0; }},
      {"argument topk = 16448", [](auto& a) { a.topk = 16448; }},
      {"argument rows = -1", [](auto& a) { a.rows = -1; }},
      {"argument rows = 268435456: expected <= 268435455 for h_q 128", [](auto& a) { a.rows = 268435456; a.h_q = 128; }},
      {"argument rows = 536870912: expected <= 536870911 for h_q 64", [](auto& a) { a.rows = 536870912; a.h_q = 64; }},
      {"argument sm_scale = 0", [](auto& a) { a.sm_scale = 0.f; }},
      {"argument sm_scale = -0.5", [](auto& a) { a.sm_scale = -0.5f; }},
      {"argument sm_scale = nan", [](auto& a) { a.sm_scale = std::numeric_limits<float>::quiet_NaN(); }},
      {"argument sm_scale = inf", [](auto& a) { a.sm_scale = std::numeric_limits<float>::infinity(); }},
      {"argument page_size = 0: expected >= 1",
       [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; a.page_size = 0; }},
      {"argument kv_page_stride = 100",
       [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; a.page_size = 1; a.kv_page_stride = 100; }},
      {"argument kv_page_stride = 664",
       [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; a.page_size = 2; a.kv_page_stride = 664; }},
      {"argument num_slots = 100: expected num_pages * page_size",
       [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; a.page_size = 64; }},
      {"argument next_n = 9: expected 1..8", [](auto& a) { a.next_n = 9; }},
      {"argument next_n = 0", [](auto& a) { a.next_n = 0; }},
      {"argument rows = 3: expected a multiple of next_n (2)", [](auto& a) { a.rows = 3; a.next_n = 2; }},
      {"argument num_splits = 65", [](auto& a) { a.num_splits = 65; }},
      {"argument num_splits = 2: expected 0 or 1 without a workspace", [](auto& a) { a.num_splits = 2; }},
      {"argument workspace_bytes = 4096: expected >= sparse_mla_workspace_bytes",
       [](auto& a) { a.workspace = reinterpret_cast<void*>(std::uintptr_t(0x70000)); a.workspace_bytes = 4096; a.num_splits = 4; }},
      {"argument workspace = ",
       [](auto& a) { a.workspace = reinterpret_cast<void*>(std::uintptr_t(0x70008)); }},
      {"argument max_logits = ",
       [](auto& a) { a.max_logits = reinterpret_cast<float*>(std::uintptr_t(0x80002)); }},
      {"argument num_slots = -1", [](auto& a) { a.num_slots = -1; }},
      {"argument kv_row_stride = 575", [](auto& a) { a.kv_row_stride = 575; }},
      {"argument kv_row_stride = 580", [](auto& a) { a.kv_row_stride = 580; }},
      {"argument q = null", [](auto& a) { a.q = nullptr; }},
      {"argument kv = null", [](auto& a) { a.kv = nullptr; }},
      {"argument indices = null", [](auto& a) { a.indices = nullptr; }},
      {"argument out = null", [](auto& a) { a.out = nullptr; }},
      {"argument lse = null", [](auto& a) { a.lse = nullptr; }},
      {"argument q = ", [](auto& a) { a.q = static_cast<const char*>(a.q) + 8; }},
      {"16-byte aligned", [](auto& a) { a.kv = static_cast<const char*>(a.kv) + 2; }},
      {"argument out = ", [](auto& a) { a.out = static_cast<char*>(a.out) + 4; }},
      {"argument indices = ",
       [](auto& a) { a.indices = reinterpret_cast<const std::int32_t*>(std::uintptr_t(0x30002)); }},
      {"argument lse = ", [](auto& a) { a.lse = reinterpret_cast<float*>(std::uintptr_t(0x50001)); }},
      {"argument topk_length = ",
       [](auto& a) { a.topk_length = reinterpret_cast<const std::int32_t*>(std::uintptr_t(0x60002)); }},
  };
  for (const Case& c : cases) {
    nsajit::SparseMlaDecodeArgs a = valid_args();
    c.edit(a);
    const std::string message = error_of(a);
    INFO("message: ", message);
    CHECK(message.rfind("nsajit::sparse_mla_decode: ", 0) == 0);
    CHECK(message.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("sparse_mla args: a forced split count needs a workspace only when it resolves to several splits") {
  // As the workspace sizing: topk 64 caps any count at one split (0 bytes), and an empty batch
  // splits nothing. The misaligned lse, checked after the split count, ends each call unlaunched.
  CHECK(nsajit::sparse_mla_workspace_bytes(1, 16, 64, 4) == 0);
  nsajit::SparseMlaDecodeArgs a = valid_args();
  a.topk = 64;
  a.num_splits = 4;
  a.lse = reinterpret_cast<float*>(std::uintptr_t(0x50001));
  CHECK(error_of(a).find("argument lse = ") != std::string::npos);
  a.topk = 128;
  CHECK(error_of(a).find("argument num_splits = 4: expected 0 or 1 without a workspace") != std::string::npos);
  a.rows = 0;
  CHECK_NOTHROW(nsajit::sparse_mla_decode(a));  // returns before any driver call
}

TEST_CASE("sparse_mla args: prefill takes next_n 1 only; the sizing queries refuse what a launch refuses") {
  nsajit::SparseMlaDecodeArgs a = valid_args();
  a.rows = 2;
  a.next_n = 2;
  auto prefill_error = [&] {
    try {
      nsajit::sparse_mla_prefill(a);
    } catch (const nsajit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no InvalidArgument)");
  };
  CHECK(prefill_error().find("nsajit::sparse_mla_prefill: argument next_n = 2") != std::string::npos);
  a.next_n = 1;  // every other check names the prefill entry point too
  a.sm_scale = -1.f;
  CHECK(prefill_error().rfind("nsajit::sparse_mla_prefill: argument sm_scale = -1", 0) == 0);
  a.sm_scale = 0.5f;
  a.lse = reinterpret_cast<float*>(std::uintptr_t(0x50001));
  CHECK(prefill_error().rfind("nsajit::sparse_mla_prefill: argument lse = ", 0) == 0);
  auto sizing_error = [](auto query) {
    try {
      query();
    } catch (const nsajit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(no InvalidArgument)");
  };
  using nsajit::sparse_mla_num_splits, nsajit::sparse_mla_workspace_bytes;
  CHECK(sizing_error([] { sparse_mla_num_splits(1, 12, 2048, 4); }).find("argument h_q = 12") != std::string::npos);
  CHECK(sizing_error([] { sparse_mla_num_splits(-1, 16, 2048, 4); }).find("argument rows = -1") != std::string::npos);
  CHECK(sizing_error([] { sparse_mla_workspace_bytes(268435456, 128, 2048, 2); }).find("argument rows = 268435456") !=
        std::string::npos);
  CHECK(sparse_mla_num_splits(268435455, 128, 2048, 1) == 1);  // the largest rows the bound accepts at h_q 128
  CHECK(sizing_error([] { sparse_mla_workspace_bytes(1, 16, 2048, 65); }).find("argument num_splits = 65") !=
        std::string::npos);
  CHECK(sizing_error([] { sparse_mla_workspace_bytes(1, 16, 100, 2); }).find("argument topk = 100") !=
        std::string::npos);
  CHECK(sparse_mla_workspace_bytes(0, 16, 2048, 4) == 0);
  CHECK(sparse_mla_num_splits(0, 16, 2048, 4) == 1);
}

TEST_CASE("sparse_mla args: rows = 0 launches nothing; an empty pool may be null") {
  nsajit::SparseMlaDecodeArgs a = valid_args();
  a.rows = 0;
  a.q = nullptr;
  a.out = nullptr;
  a.lse = nullptr;
  a.indices = nullptr;
  CHECK_NOTHROW(nsajit::sparse_mla_decode(a));  // returns before any driver call: no GPU needed
  a.h_q = 12;  // scalars are still checked
  CHECK_THROWS_AS(nsajit::sparse_mla_decode(a), nsajit::InvalidArgument);
}

TEST_CASE("sparse_mla spec: traits validate fields and name kernels") {
  using nsajit::Family;
  using nsajit::KernelSpec;
  using nsajit::MlaKernel;
  using nsajit::TileConfig;
  auto spec = [](int h_q, nsajit::KvDtype kv = nsajit::KvDtype::bf16, TileConfig tile = {}) {
    return nsajit::with_default_tile({.family = Family::sparse_mla, .h_q = h_q, .kv_dtype = kv, .tile = tile});
  };
  auto message = [](const KernelSpec& s) {
    try {
      nsajit::validate(s);
    } catch (const nsajit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(valid)");
  };
  const auto fp8 = nsajit::KvDtype::fp8_e4m3;
  for (int h_q : {8, 16, 32, 64, 128}) {
    CHECK(message(spec(h_q)) == "(valid)");
    CHECK(message(spec(h_q, fp8)) == "(valid)");
  }
  CHECK(spec(8).tile.heads_per_cta == 8);
  CHECK(spec(32).tile.heads_per_cta == 32);
  CHECK(spec(128).tile.heads_per_cta == 64);
  // Defaults on sm_90a: bf16 mma_sync + 2 producer warps up to 32 heads per CTA, FP8 mma_sync + 2
  // up to 16 (the direct kernel; precise: + 8; none at 32), wgmma at 64 (FP8: two producer warpgroups).
  CHECK(spec(16).tile.kernel == MlaKernel::mma_sync);
  CHECK(spec(16).tile.producer_warps == 2);
  CHECK(spec(16).tile.threads == 320);
  CHECK(spec(16, fp8).tile.producer_warps == 2);
  CHECK(spec(16, fp8).tile.threads == 320);
  CHECK(nsajit::with_default_tile({.family = Family::sparse_mla, .h_q = 16, .kv_dtype = fp8, .precise = true}).tile.producer_warps == 8);
  CHECK(spec(32, fp8).tile.producer_warps == 0);
  CHECK(spec(128).tile.kernel == MlaKernel::wgmma);
  CHECK(spec(128).tile.threads == 384);
  CHECK(spec(128, fp8).tile.producer_warps == 8);
  CHECK(spec(128, fp8).tile.threads == 512);
  // The former spelling (threads alone) reads as the same variants.
  CHECK(spec(16, fp8, {.threads = 256}).tile == spec(16, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 0}).tile);
  CHECK(spec(128, fp8, {.threads = 512}).tile == spec(128, fp8).tile);
  CHECK(spec(16, nsajit::KvDtype::bf16, {.threads = 384}).tile.kernel == MlaKernel::wgmma);
  // Variants outside their range name the field.
  // FP8 with 2 producer warps: the direct kernel, up to 16 heads per CTA, not precise.
  CHECK(message(spec(16, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 2})) == "(valid)");
  CHECK(message(spec(8, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 2})) == "(valid)");
  CHECK(message(spec(32, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 2})).find("producer_warps = 2") != std::string::npos);
  {
    KernelSpec t = spec(16, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 2});
    t.precise = true;
    CHECK(message(t).find("precise = 1") != std::string::npos);
  }
  CHECK(message(spec(64, nsajit::KvDtype::bf16, {.kernel = MlaKernel::mma_sync, .producer_warps = 2})).find("producer_warps = 2") != std::string::npos);
  CHECK(message(spec(32, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 8})).find("producer_warps = 8") != std::string::npos);
  CHECK(message(spec(128, fp8, {.kernel = MlaKernel::wgmma, .producer_warps = 4})).find("producer_warps = 4") != std::string::npos);
  CHECK(message(spec(8, nsajit::KvDtype::bf16, {.kernel = MlaKernel::wgmma, .producer_warps = 4})).find("heads_per_cta = 8") != std::string::npos);
  CHECK(message(spec(16, nsajit::KvDtype::bf16, {.kernel = MlaKernel::wgmma, .producer_warps = 4})) == "(valid)");
  CHECK(message(spec(16, fp8, {.kernel = MlaKernel::mma_sync, .producer_warps = 0})) == "(valid)");
  {
    KernelSpec t = spec(16);
    t.tile.threads = 128;  // not 256 + 32 * producer_warps
    CHECK(message(t).find("threads = 128") != std::string::npos);
  }
  {
    KernelSpec other = spec(64);
    other.tile = {};
    other.arch = nsajit::Arch{100, 'a'};
    other = nsajit::with_default_tile(other);
    CHECK(other.tile.kernel == MlaKernel::mma_sync);  // wgmma is sm_90a only
    CHECK(other.tile.threads == 256);
    other.tile = {.threads = 384, .block_tokens = 64, .heads_per_cta = 64, .kernel = MlaKernel::wgmma, .producer_warps = 4};
    CHECK(message(other).find("kernel = wgmma") != std::string::npos);
  }
  CHECK(spec(128).tile.block_tokens == 64);
  CHECK(message(spec(24)).find("h_q = 24: expected one of 8, 16, 32, 64, 128") != std::string::npos);
  KernelSpec c;
  c.family = Family::sparse_mla_combine;
  c = nsajit::with_default_tile(c);
  CHECK(message(c) == "(valid)");
  CHECK(nsajit::readable_name(c) == "sparse_mla_combine.sm_90a");
  c.h_q = 16;
  CHECK(message(c).find("h_q = 16") != std::string::npos);
  KernelSpec s = spec(16);
  s.next_n = 2;  // rows are flattened: next_n is not part of this family's kernels
  CHECK(message(s).find("next_n = 2") != std::string::npos);
  CHECK(message(s).find("does not use") != std::string::npos);
  s = spec(16);
  s.topk = 100;
  CHECK(message(s).find("topk = 100") != std::string::npos);
  s = spec(16);
  s.tile.heads_per_cta = 32;
  CHECK(message(s).find("heads_per_cta = 32") != std::string::npos);  // does not divide h_q
  // Names carry the variant, defaults included.
  CHECK(nsajit::readable_name(spec(16)) == "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a");
  CHECK(nsajit::readable_name(spec(16, fp8)) == "sparse_mla.h16.topk2048.kv_fp8.mma_sync.hpc16.pw2.sm_90a");
  CHECK(nsajit::readable_name(spec(16, fp8, {.threads = 512})) == "sparse_mla.h16.topk2048.kv_fp8.mma_sync.hpc16.pw8.sm_90a");
  CHECK(nsajit::readable_name(spec(16, fp8, {.threads = 256})) == "sparse_mla.h16.topk2048.kv_fp8.mma_sync.hpc16.pw0.sm_90a");
  CHECK(nsajit::readable_name(spec(128, fp8)) == "sparse_mla.h128.topk2048.kv_fp8.wgmma.hpc64.pw8.sm_90a");
  // precise: a named field, in the name only when set, a different kernel (source and cache key).
  KernelSpec precise = spec(128, fp8);
  precise.precise = true;
  CHECK(message(precise) == "(valid)");
  CHECK(nsajit::readable_name(precise) == "sparse_mla.h128.topk2048.kv_fp8.wgmma.hpc64.pw8.precise.sm_90a");
  CHECK(nsajit::canonical_text(precise).find("precise=1") != std::string::npos);
  CHECK(nsajit::canonical_text(spec(128, fp8)).find("precise=0") != std::string::npos);
  CHECK(nsajit::generate_source(precise).find("#define NSAJIT_PRECISE 1") != std::string::npos);
  CHECK(nsajit::generate_source(spec(128, fp8)).find("#define NSAJIT_PRECISE 0") != std::string::npos);
  CHECK_FALSE(nsajit::KernelSpecHash{}(precise) == nsajit::KernelSpecHash{}(spec(128, fp8)));
  KernelSpec topk_precise{.family = Family::topk, .precise = true};
  topk_precise = nsajit::with_default_tile(topk_precise);
  CHECK(message(topk_precise).find("precise = 1") != std::string::npos);
  CHECK(message(topk_precise).find("does not use") != std::string::npos);
}
