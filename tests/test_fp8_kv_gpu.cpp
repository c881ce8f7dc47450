// test_fp8_kv_gpu.cpp — nsajit::fp8_kv_quantize and nsajit::fp8_kv_gather (§4) on the GPU against
// reference/fp8_kv_cache (byte-exact; a latent byte may differ by one e4m3 code only where x / scale
// sits exactly on a rounding tie), with poisoned pools and outputs, plus host-side argument checks
// (no GPU needed for those).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/fp8_kv_cache.hpp"
#include "tests/argument_cases.hpp"
#include "tests/gpu_support.hpp"

namespace ref = nsajit::reference;
using nsajit::Fp8ScaleFormat;
using nsajit::test::DeviceBuffer;
using Bytes = std::vector<std::uint8_t>;
using Row = std::vector<std::uint16_t>;
using Slots = std::vector<std::int32_t>;

namespace {

constexpr std::uint8_t kPoison = 0x5a;
constexpr int kD = ref::kFp8KvDims;
constexpr int kT = ref::kFp8KvTokenBytes;

std::uint16_t bf(float f) { return ref::float_to_bf16(f); }

// One 128-dim tile of a random kind: normal at a random magnitude, all zero, tiny, amax exactly
// 448 (scale 1), huge (up to 3e5), one spike, raw finite bf16 bit patterns (subnormals to 3e38).
void fill_tile(std::mt19937& rng, std::uint16_t* tile) {
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int kind = int(rng() % 8);
  const float magnitude = std::pow(10.0f, std::uniform_real_distribution<float>(-8.0f, 5.0f)(rng));
  for (int i = 0; i < 128; ++i) {
    float x = 0.0f;
    switch (kind) {
      case 0: x = 0.0f; break;
      case 1: x = normal(rng) * magnitude; break;
      case 2: x = normal(rng) * 1e-6f; break;
      case 3: x = uniform(rng) * 448.0f; break;
      case 4: x = std::fmax(-3e5f, std::fmin(3e5f, normal(rng) * 1e5f)); break;
      case 5: x = i == 77 ? -magnitude : normal(rng) * magnitude * 1e-3f; break;
      case 6: {
        std::uint16_t b;
        do b = std::uint16_t(rng()); while ((b & 0x7f80) == 0x7f80);  // finite
        tile[i] = b;
        continue;
      }
      default: x = normal(rng); break;
    }
    tile[i] = bf(x);
  }
  if (kind == 3) tile[rng() % 128] = bf(rng() % 2 ? 448.0f : -448.0f);
}

// n rows of row_stride elements: random tiles, rope any 16-bit pattern (NaN payloads included).
Row random_rows(std::mt19937& rng, int n, std::int64_t row_stride) {
  Row rows(std::size_t(n) * std::size_t(row_stride), 0xdead);
  for (int r = 0; r < n; ++r) {
    std::uint16_t* row = rows.data() + std::size_t(r) * std::size_t(row_stride);
    for (int t = 0; t < 4; ++t) fill_tile(rng, row + 128 * t);
    for (int d = 512; d < kD; ++d) row[d] = std::uint16_t(rng());
  }
  return rows;
}

// n distinct valid slots in shuffled order; then about 1/8 of them replaced by skipped values.
Slots shuffled_slots(std::mt19937& rng, int n, std::int64_t num_slots, bool with_invalid) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  Slots slots(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) slots[std::size_t(i)] = std::int32_t(all[std::size_t(i)]);
  if (with_invalid) {
    const std::int32_t invalid[] = {-1, -7, std::numeric_limits<std::int32_t>::min(), std::int32_t(num_slots),
                                    std::int32_t(num_slots + 5), std::numeric_limits<std::int32_t>::max()};
    for (int i = 0; i < n; ++i)
      if (rng() % 8 == 0) slots[std::size_t(i)] = invalid[rng() % 6];
  }
  return slots;
}

struct QuantizeCase {
  int page_size = 64;
  std::int64_t num_pages = 0;
  std::int64_t page_stride_bytes = 0;
  std::int64_t kv_row_stride = kD;
  bool misalign_kv = false;  // kv pointer 2 bytes past a 16-byte boundary: the scalar load path
  Fp8ScaleFormat fmt = Fp8ScaleFormat::fp32;
};

ref::Fp8KvCacheLayout layout_of(const QuantizeCase& c) {
  return {.num_pages = c.num_pages, .page_size = c.page_size, .page_stride_bytes = c.page_stride_bytes};
}

// Quantizes `rows` into a poisoned pool on the GPU; checks every written token against the
// reference (ties tolerated) and every other byte for the poison. Returns the GPU pool.
Bytes check_quantize(const QuantizeCase& c, const Row& rows, const Slots& slots) {
  const int n = int(slots.size());
  const ref::Fp8KvCacheLayout layout = layout_of(c);
  const std::size_t pool_bytes = std::size_t(layout.num_pages * layout.page_stride());
  DeviceBuffer<std::uint8_t> pool(pool_bytes);
  pool.poison(kPoison);
  Row padded(rows.size() + 8, 0);
  std::copy(rows.begin(), rows.end(), padded.begin() + (c.misalign_kv ? 1 : 0));
  DeviceBuffer<std::uint16_t> kv(padded);
  DeviceBuffer<std::int32_t> slot_buf(slots);
  nsajit::Fp8KvQuantizeArgs a;
  a.kv = kv.get() + (c.misalign_kv ? 1 : 0);
  a.kv_row_stride = c.kv_row_stride;
  a.slots = slot_buf.get();
  a.n = n;
  a.cache = pool.get();
  a.num_pages = c.num_pages;
  a.page_size = c.page_size;
  a.page_stride_bytes = c.page_stride_bytes;
  a.scale_fmt = c.fmt;
  nsajit::fp8_kv_quantize(a);
  Bytes got = pool.download();

  Bytes expected(pool_bytes, kPoison);
  ref::fp8_kv_quantize(rows.data(), c.kv_row_stride, slots.data(), n, layout, c.fmt, expected.data());
  int written = 0, ties = 0;
  for (int i = 0; i < n; ++i) {
    if (!layout.valid(slots[std::size_t(i)])) continue;
    ++written;
    const std::size_t off = std::size_t(layout.offset(slots[std::size_t(i)]));
    const std::uint16_t* row = rows.data() + std::size_t(i) * std::size_t(c.kv_row_stride);
    const std::string diff = ref::fp8_kv_token_difference(got.data() + off, expected.data() + off, row, true);
    if (!diff.empty()) {
      FAIL_CHECK("row " << i << " slot " << slots[std::size_t(i)] << ": " << diff);
      return got;
    }
    ties += std::memcmp(got.data() + off, expected.data() + off, kT) != 0;
    std::memcpy(got.data() + off, expected.data() + off, kT);  // the rest must now match exactly
  }
  if (ties) MESSAGE(ties << " token(s) differ from the reference only on rounding ties");
  std::size_t first_bad = pool_bytes;
  for (std::size_t b = 0; b < pool_bytes && first_bad == pool_bytes; ++b)
    if (got[b] != expected[b]) first_bad = b;
  CHECK_MESSAGE(first_bad == pool_bytes, "byte " << first_bad << " outside the written tokens changed");
  CHECK(written > 0);
  return expected;  // equal to the GPU's pool up to tolerated ties
}

// Gathers `slots` from a device pool on the GPU into a poisoned output; compares bit-exactly with
// the reference on the host copy of the pool (allow_nan: two NaNs of any payload match).
void check_gather(const ref::Fp8KvCacheLayout& layout, const std::uint8_t* device_pool, const Bytes& host_pool,
                  const Slots& slots, std::int64_t out_row_stride, bool misalign_out, bool allow_nan = false) {
  const int n = int(slots.size());
  DeviceBuffer<std::int32_t> slot_buf(slots);
  DeviceBuffer<std::uint16_t> out(std::size_t(n) * std::size_t(out_row_stride) + 8);
  out.poison(kPoison);
  nsajit::Fp8KvGatherArgs a;
  a.cache = device_pool;
  a.num_pages = layout.num_pages;
  a.page_size = layout.page_size;
  a.page_stride_bytes = layout.page_stride_bytes;
  a.slots = slot_buf.get();
  a.n = n;
  a.out = out.get() + (misalign_out ? 1 : 0);
  a.out_row_stride = out_row_stride;
  nsajit::fp8_kv_gather(a);
  const Row all = out.download();
  const Row expected = ref::fp8_kv_gather(host_pool.data(), layout, slots.data(), n);
  const std::uint16_t* got = all.data() + (misalign_out ? 1 : 0);
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < kD; ++d) {
      const std::uint16_t g = got[std::size_t(i) * std::size_t(out_row_stride) + std::size_t(d)];
      const std::uint16_t e = expected[std::size_t(i) * kD + std::size_t(d)];
      const bool both_nan = allow_nan && std::isnan(ref::bf16_to_float(g)) && std::isnan(ref::bf16_to_float(e));
      if (g != e && !both_nan) {
        FAIL_CHECK("row " << i << " slot " << slots[std::size_t(i)] << " dim " << d << ": got 0x" << std::hex << g
                          << ", expected 0x" << e);
        return;
      }
    }
    // Padding between rows is not written.
    for (std::int64_t d = kD; d < out_row_stride; ++d)
      REQUIRE(got[std::size_t(i) * std::size_t(out_row_stride) + std::size_t(d)] == 0x5a5a);
  }
}

}  // namespace

TEST_CASE("fp8_kv gpu: quantize is byte-exact on random rows, page sizes 1 and 64, shuffled and skipped slots") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  for (const int page_size : {1, 64}) {
    for (const Fp8ScaleFormat fmt : {Fp8ScaleFormat::fp32, Fp8ScaleFormat::ue8m0}) {
      for (int variant = 0; variant < 4; ++variant) {
        QuantizeCase c;
        c.page_size = page_size;
        c.fmt = fmt;
        c.num_pages = page_size == 1 ? 700 : 11;
        c.kv_row_stride = variant == 1 ? 577 : variant == 2 ? 640 : kD;  // 577: rows of every alignment
        c.misalign_kv = variant == 3;
        c.page_stride_bytes = variant == 2 ? page_size * kT + 48 : 0;     // padded pages
        INFO("page size " << page_size << " ue8m0 " << (fmt == Fp8ScaleFormat::ue8m0) << " variant " << variant);
        const int n = 333;
        const Row rows = random_rows(rng, n, c.kv_row_stride);
        const Bytes pool = check_quantize(c, rows, shuffled_slots(rng, n, c.num_pages * page_size, true));
        // Gather back every slot (and invalid ones): exact against the reference dequantization.
        Slots gather_slots = shuffled_slots(rng, 400, c.num_pages * page_size, true);
        DeviceBuffer<std::uint8_t> device_pool(pool);
        check_gather(layout_of(c), device_pool.get(), pool, gather_slots, variant == 1 ? 577 : kD, variant == 3);
      }
    }
  }
}

TEST_CASE("fp8_kv gpu: quantize tile edge cases (zero, tiny, 448, huge, non-power-of-two, bf16 sweep)") {
  NSAJIT_REQUIRE_GPU();
  // Rows of chosen tiles; the sweep puts every bf16 value in [-448, 448] into a tile with amax 448
  // (scale exactly 1), which covers every e4m3 rounding tie.
  std::vector<float> sweep;
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const float x = ref::bf16_to_float(std::uint16_t(b));
    if (std::fabs(x) <= 448.0f) sweep.push_back(x);
  }
  std::mt19937 rng(99);
  std::normal_distribution<float> normal;
  Row rows;
  auto add_row = [&](auto&& tile_value) {
    Row row(kD);
    for (int d = 0; d < 512; ++d) row[std::size_t(d)] = bf(tile_value(d / 128, d % 128));
    for (int d = 512; d < kD; ++d) row[std::size_t(d)] = std::uint16_t(rng());
    rows.insert(rows.end(), row.begin(), row.end());
  };
  for (std::size_t i = 0; i < sweep.size(); i += 4 * 127)
    add_row([&](int t, int k) {
      const std::size_t j = i + std::size_t(t) * 127 + std::size_t(k);
      return k == 127 ? 448.0f : j < sweep.size() ? sweep[j] : 0.0f;
    });
  const float amaxes[] = {0.0f, 1e-6f, 1e-37f, 448.0f, 3e5f, 1.0f, 0.3f, 1000.0f, 3.0f, 1e-4f, 5e-2f};
  for (const float a : amaxes)
    for (const float b : amaxes)
      add_row([&](int t, int k) {
        const float amax = (t % 2 ? a : b);
        return k == 5 ? amax : std::fmax(-amax, std::fmin(amax, normal(rng) * amax / 2));
      });
  const int n = int(rows.size() / kD);
  for (const int page_size : {1, 64})
    for (const Fp8ScaleFormat fmt : {Fp8ScaleFormat::fp32, Fp8ScaleFormat::ue8m0}) {
      INFO("page size " << page_size << " ue8m0 " << (fmt == Fp8ScaleFormat::ue8m0));
      QuantizeCase c;
      c.page_size = page_size;
      c.fmt = fmt;
      c.num_pages = (n + page_size - 1) / page_size + 1;
      std::mt19937 shuffle_rng(page_size);
      const Bytes pool = check_quantize(c, rows, shuffled_slots(shuffle_rng, n, c.num_pages * page_size, false));
      // Scales of the all-zero tiles are FLT_MIN (fp32) or 2^-13 (ue8m0) and nothing is NaN.
      for (std::size_t b = 0; b + kT <= pool.size(); b += kT)
        for (int t = 0; t < 4; ++t) {
          float s;
          std::memcpy(&s, pool.data() + b + 512 + 4 * t, 4);
          if (std::bit_cast<std::uint32_t>(s) == 0x5a5a5a5au) continue;  // an unwritten slot
          CHECK(std::isfinite(s));
          CHECK(s >= (fmt == Fp8ScaleFormat::fp32 ? FLT_MIN : std::ldexp(1.0f, -13)));
        }
    }
}

TEST_CASE("fp8_kv gpu: a pool larger than 2^31 bytes, slots above that offset") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  const ref::Fp8KvCacheLayout layout{.num_pages = 51300, .page_size = 64};  // 2 153 779 200 bytes
  const std::int64_t pool_bytes = layout.num_pages * layout.page_stride();
  REQUIRE(pool_bytes > (1LL << 31));
  const std::int64_t first_high = ((1LL << 31) + kT - 1) / kT;  // first slot at offset >= 2^31
  const std::int64_t lo = first_high - 2000, hi = layout.num_slots();  // the window we download
  DeviceBuffer<std::uint8_t> pool(static_cast<std::size_t>(pool_bytes));
  pool.poison(kPoison);

  const int n = 500;
  Slots slots(n);
  for (int i = 0; i < n; ++i) slots[std::size_t(i)] = std::int32_t(lo + std::int64_t(rng() % std::uint64_t(hi - lo)));
  slots.push_back(std::int32_t(first_high));  // the first token at offset >= 2^31
  slots.push_back(std::int32_t(hi - 1));      // the very last token of the pool
  std::sort(slots.begin(), slots.end());
  slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  std::shuffle(slots.begin(), slots.end(), rng);
  slots[3] = -1;                        // skipped
  slots[4] = std::int32_t(hi);          // one past the end: skipped
  const Row rows = random_rows(rng, int(slots.size()), kD);
  DeviceBuffer<std::uint16_t> kv(rows);
  DeviceBuffer<std::int32_t> slot_buf(slots);
  nsajit::Fp8KvQuantizeArgs a;
  a.kv = kv.get();
  a.slots = slot_buf.get();
  a.n = int(slots.size());
  a.cache = pool.get();
  a.num_pages = layout.num_pages;
  a.page_size = layout.page_size;
  nsajit::fp8_kv_quantize(a);
  nsajit::test::synchronize();

  // Download [lo, hi) and compare against the reference on a host window of the same slots.
  const std::size_t window = std::size_t((hi - lo) * kT);
  Bytes got(window);
  NSAJIT_CU(cuMemcpyDtoH, got.data(), CUdeviceptr(pool.get() + lo * kT), window);
  Bytes expected(window, kPoison);
  const ref::Fp8KvCacheLayout window_layout{.num_pages = hi - lo, .page_size = 1};
  Slots shifted = slots;
  for (auto& s : shifted) s = s >= lo && s < hi ? std::int32_t(s - lo) : -1;
  ref::fp8_kv_quantize(rows.data(), kD, shifted.data(), int(shifted.size()), window_layout,
                       Fp8ScaleFormat::fp32, expected.data());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (shifted[i] < 0) continue;
    const std::size_t off = std::size_t(shifted[i]) * kT;
    const std::string diff = ref::fp8_kv_token_difference(got.data() + off, expected.data() + off,
                                                          rows.data() + i * kD, true);
    CHECK_MESSAGE(diff.empty(), "slot " << slots[i] << ": " << diff);
    std::memcpy(got.data() + off, expected.data() + off, kT);
  }
  CHECK_MESSAGE(got == expected, "bytes outside the written tokens changed");
  // The first byte of the pool is still poison (nothing wrapped around).
  std::uint8_t first = 0;
  NSAJIT_CU(cuMemcpyDtoH, &first, CUdeviceptr(pool.get()), 1);
  CHECK(first == kPoison);

  // Gather the same slots back (plus invalid ones) from the big pool.
  Slots gather_slots = slots;
  gather_slots.push_back(std::numeric_limits<std::int32_t>::max());
  gather_slots.push_back(std::int32_t(first_high - 1));  // a poison token below 2^31: still exact
  Slots gather_shifted = gather_slots;
  for (auto& s : gather_shifted) s = s >= lo && s < hi ? std::int32_t(s - lo) : -1;
  DeviceBuffer<std::int32_t> gslots(gather_slots);
  DeviceBuffer<std::uint16_t> out(gather_slots.size() * kD);
  out.poison();
  nsajit::Fp8KvGatherArgs g;
  g.cache = pool.get();
  g.num_pages = layout.num_pages;
  g.page_size = layout.page_size;
  g.slots = gslots.get();
  g.n = int(gather_slots.size());
  g.out = out.get();
  nsajit::fp8_kv_gather(g);
  const Row got_rows = out.download();
  const Row want_rows = ref::fp8_kv_gather(expected.data(), window_layout, gather_shifted.data(), g.n);
  CHECK(got_rows == want_rows);
}

TEST_CASE("fp8_kv gpu: gather-dequantize is exact on arbitrary bytes and zeroes invalid slots") {
  NSAJIT_REQUIRE_GPU_WITH_RNG(rng);
  for (const int page_size : {1, 64}) {
    for (const bool nan_codes : {false, true}) {
      INFO("page size " << page_size << " NaN codes " << nan_codes);
      const ref::Fp8KvCacheLayout layout{.num_pages = page_size == 1 ? 900 : 13, .page_size = page_size,
                                         .page_stride_bytes = page_size == 64 ? 64 * kT + 16 : 0};
      Bytes pool(std::size_t(layout.num_pages * layout.page_stride()));
      for (auto& b : pool) {
        b = std::uint8_t(rng());
        if (!nan_codes && (b & 0x7f) == 0x7f) b ^= 1;
      }
      // Finite scales: random exponents and mantissas (products may be bf16 subnormals or overflow).
      for (std::int64_t s = 0; s < layout.num_slots(); ++s)
        for (int t = 0; t < 4; ++t) {
          const float scale = std::ldexp(1.0f + float(rng() % 8388608) / 8388608.0f, int(rng() % 200) - 130);
          std::memcpy(pool.data() + layout.offset(s) + 512 + 4 * t, &scale, 4);
        }
      DeviceBuffer<std::uint8_t> device_pool(pool);
      const Slots slots = shuffled_slots(rng, 777, layout.num_slots(), true);
      for (const std::int64_t stride : {std::int64_t(kD), std::int64_t(577), std::int64_t(1000)})
        for (const bool misalign : {false, true}) {
          INFO("out row stride " << stride << " misaligned " << misalign);
          check_gather(layout, device_pool.get(), pool, slots, stride, misalign, nan_codes);
        }
    }
  }
}

TEST_CASE("fp8_kv gpu: n = 0 launches nothing, an empty pool is never touched") {
  NSAJIT_REQUIRE_GPU();
  nsajit::Fp8KvQuantizeArgs q;  // n = 0, null pointers
  nsajit::fp8_kv_quantize(q);
  // No pages: every slot is invalid, the gather writes zeros and never reads the (null) cache.
  const Slots slots = {0, -1, 5};
  DeviceBuffer<std::int32_t> slot_buf(slots);
  DeviceBuffer<std::uint16_t> out(3 * kD);
  out.poison();
  nsajit::Fp8KvGatherArgs g;
  g.slots = slot_buf.get();
  g.n = 3;
  g.out = out.get();
  nsajit::fp8_kv_gather(g);
  const Row got = out.download();
  CHECK(std::all_of(got.begin(), got.end(), [](std::uint16_t v) { return v == 0; }));
}

// ---- host-side argument checks (no GPU needed: they throw before any driver call) -------------

namespace {

alignas(16) std::uint8_t fake_storage[64];

// Plausible, aligned fake device pointers: never dereferenced because validation fails first.
const auto* const fake_slots = reinterpret_cast<const std::int32_t*>(fake_storage);

nsajit::Fp8KvQuantizeArgs valid_quantize_args() {
  return {.kv = fake_storage, .slots = fake_slots, .n = 4, .cache = fake_storage, .num_pages = 10, .page_size = 64};
}

nsajit::Fp8KvGatherArgs valid_gather_args() {
  return {.cache = fake_storage, .num_pages = 10, .page_size = 64, .slots = fake_slots, .n = 4, .out = fake_storage};
}

}  // namespace

TEST_CASE("fp8_kv arguments: quantize names each bad argument before anything is launched") {
  using Args = nsajit::Fp8KvQuantizeArgs;
  nsajit::test::check_bad_arguments<Args>(
      [](const Args& a) { nsajit::fp8_kv_quantize(a); }, valid_quantize_args(),
      {{[](Args& a) { a.n = -1; }, "nsajit::fp8_kv_quantize: argument n = -1: expected >= 0", true},
       {[](Args& a) { a.kv_row_stride = 575; }, "nsajit::fp8_kv_quantize: argument kv_row_stride = 575"},
       {[](Args& a) { a.scale_fmt = Fp8ScaleFormat(7); }, "argument scale_fmt = 7: expected fp32 or ue8m0"},
       {[](Args& a) { a.page_size = 0; }, "argument page_size = 0"},
       {[](Args& a) { a.page_size = 5000; }, "argument page_size = 5000"},
       {[](Args& a) { a.num_pages = -3; }, "argument num_pages = -3"},
       {[](Args& a) { a.page_stride_bytes = 64 * 656 - 16; },
        "argument page_stride_bytes = 41968: expected 0 (= page_size * 656) or a multiple of 16 >= page_size * "
        "656 = 41984"},
       {[](Args& a) { a.page_stride_bytes = 64 * 656 + 8; }, "argument page_stride_bytes = 41992"},
       {[](Args& a) { a.num_pages = std::numeric_limits<std::int64_t>::max() / 1000; }, "argument num_pages"},
       {[](Args& a) { a.cache = nullptr; }, "argument cache = null: expected a device pointer"},
       {[](Args& a) { a.cache = fake_storage + 8; }, "argument cache = "},
       {[](Args& a) { a.cache = fake_storage + 8; }, "expected a 16-byte aligned device pointer"},
       {[](Args& a) { a.kv = nullptr; }, "argument kv = null"},
       {[](Args& a) { a.kv = fake_storage + 1; }, "expected a 2-byte aligned device pointer"},
       {[](Args& a) { a.slots = nullptr; }, "argument slots = null"},
       {[](Args& a) { a.slots = reinterpret_cast<const std::int32_t*>(fake_storage + 2); },
        "expected a 4-byte aligned device pointer"}});
}

TEST_CASE("fp8_kv arguments: gather names each bad argument before anything is launched") {
  using Args = nsajit::Fp8KvGatherArgs;
  nsajit::test::check_bad_arguments<Args>(
      [](const Args& a) { nsajit::fp8_kv_gather(a); }, valid_gather_args(),
      {{[](Args& a) { a.n = -2; }, "nsajit::fp8_kv_gather: argument n = -2: expected >= 0", true},
       {[](Args& a) { a.out_row_stride = 512; }, "nsajit::fp8_kv_gather: argument out_row_stride = 512"},
       {[](Args& a) { a.page_size = -1; }, "argument page_size = -1"},
       {[](Args& a) { a.num_pages = -1; }, "argument num_pages = -1"},
       {[](Args& a) { a.page_stride_bytes = 100; }, "argument page_stride_bytes = 100"},
       {[](Args& a) { a.cache = nullptr; }, "argument cache = null"},
       {[](Args& a) { a.slots = nullptr; }, "argument slots = null"},
       {[](Args& a) { a.out = nullptr; }, "argument out = null"},
       {[](Args& a) { a.out = fake_storage + 1; }, "argument out = "}});
}
