// test_sparse_mla_gpu.cpp — nsajit::sparse_mla_decode (§3) against the fp64 reference, plus the
// host-side argument checks (CPU only: they throw before any driver call).
//
// Every KV row that no used index references is NaN (bf16 0x7fc0), as is the padding of each row
// past 576 elements, so a stray read of an invalid, out-of-range or past-topk_length entry shows up
// as NaN in out or lse. Outputs are poisoned before every launch so unwritten elements fail too.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "reference/bf16.hpp"
#include "reference/sparse_mla.hpp"
#include "tests/gpu_support.hpp"

namespace ref = nsajit::reference;
using nsajit::test::DeviceBuffer;

namespace {

constexpr int D = ref::kMlaDimQK;
constexpr int DV = ref::kMlaDimV;
constexpr float kScaleModel = 0.13524f;       // DeepSeek-V3.2's sm_scale
const float kScaleDefault = 1.f / std::sqrt(576.f);  // d_qk^-0.5
constexpr std::int32_t kIntMax = std::numeric_limits<std::int32_t>::max();
constexpr std::int32_t kIntMin = std::numeric_limits<std::int32_t>::min();
constexpr int kPoisonSlots = 64;  // the last slots of every pool: never filled, always NaN

struct Problem {
  int rows = 1, h_q = 16, topk = 2048;
  std::int64_t num_slots = 0, kv_row_stride = D;
  float sm_scale = kScaleModel;
  std::vector<std::uint16_t> q, kv;
  std::vector<std::int32_t> indices;
  std::vector<std::int32_t> topk_length;  // empty: not passed
  std::int32_t poison_slot(int i) const { return std::int32_t(num_slots - kPoisonSlots + i); }
};

std::uint16_t random_bf16(std::mt19937& rng) {
  static std::normal_distribution<float> normal(0.f, 1.f);
  return ref::float_to_bf16(normal(rng));
}

// q random, every row's indices distinct random slots of [0, num_slots - kPoisonSlots); KV all NaN
// until finalize().
Problem make_problem(int rows, int h_q, int topk, std::int64_t num_slots, std::uint32_t seed,
                     std::int64_t kv_row_stride = D) {
  std::mt19937 rng(seed);
  Problem p;
  p.rows = rows;
  p.h_q = h_q;
  p.topk = topk;
  p.num_slots = num_slots;
  p.kv_row_stride = kv_row_stride;
  p.q.resize(std::size_t(rows) * h_q * D);
  for (auto& v : p.q) v = random_bf16(rng);
  std::vector<std::int32_t> pool(std::size_t(num_slots - kPoisonSlots));
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

// Fills the 576 used elements of every slot that a used, valid entry references with random bf16;
// every other element of the pool stays NaN. Call after editing indices / topk_length.
void finalize(Problem& p, std::uint32_t seed = 7) {
  std::mt19937 rng(seed);
  p.kv.assign(std::size_t(p.num_slots) * p.kv_row_stride, ref::kBf16QuietNaN);
  std::vector<bool> filled(std::size_t(p.num_slots), false);
  for (int r = 0; r < p.rows; ++r) {
    const int n = p.topk_length.empty() ? p.topk : std::clamp(p.topk_length[r], 0, p.topk);
    for (int j = 0; j < n; ++j) {
      const std::int64_t idx = p.indices[std::size_t(r) * p.topk + j];
      if (idx < 0 || idx >= p.num_slots || filled[std::size_t(idx)]) continue;
      filled[std::size_t(idx)] = true;
      for (int d = 0; d < D; ++d) p.kv[std::size_t(idx) * p.kv_row_stride + d] = random_bf16(rng);
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
  return ref::sparse_mla(in);
}

struct Result {
  std::vector<std::uint16_t> out;
  std::vector<float> lse;
};

// Launches on poisoned outputs and downloads them.
Result launch(const Problem& p, const void* kv_device = nullptr) {
  DeviceBuffer<std::uint16_t> q(p.q);
  DeviceBuffer<std::uint16_t> kv(kv_device ? std::vector<std::uint16_t>{} : p.kv);
  DeviceBuffer<std::int32_t> indices(p.indices);
  DeviceBuffer<std::int32_t> lengths(p.topk_length);
  DeviceBuffer<std::uint16_t> out(std::size_t(p.rows) * p.h_q * DV);
  DeviceBuffer<float> lse(std::size_t(p.rows) * p.h_q);
  out.poison();
  lse.poison();
  nsajit::SparseMlaDecodeArgs a;
  a.q = q.get();
  a.kv = kv_device ? kv_device : kv.get();
  a.num_slots = p.num_slots;
  a.kv_row_stride = p.kv_row_stride;
  a.indices = indices.get();
  a.topk_length = p.topk_length.empty() ? nullptr : lengths.get();
  a.out = out.get();
  a.lse = lse.get();
  a.rows = p.rows;
  a.h_q = p.h_q;
  a.topk = p.topk;
  a.sm_scale = p.sm_scale;
  nsajit::sparse_mla_decode(a);
  return {out.download(), lse.download()};
}

// Launch + compare with the fp64 reference under the spec's tolerance.
Result check(const Problem& p, const std::string& what) {
  INFO(what, " (rows ", p.rows, ", h_q ", p.h_q, ", topk ", p.topk, ", sm_scale ", p.sm_scale, ")");
  Result got = launch(p);
  const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, reference(p), p.rows, p.h_q);
  CHECK_MESSAGE(c.ok, c.message);
  return got;
}

// Every out element of (row, all heads) is exactly 0 and every lse is +inf.
void check_empty_row(const Result& r, const Problem& p, int row) {
  INFO("row ", row, " has no valid index");
  bool zeros = true, infs = true;
  for (std::size_t i = std::size_t(row) * p.h_q * DV; i < std::size_t(row + 1) * p.h_q * DV; ++i)
    zeros &= ref::bf16_to_float(r.out[i]) == 0.f;
  for (int h = 0; h < p.h_q; ++h) infs &= r.lse[std::size_t(row) * p.h_q + h] == std::numeric_limits<float>::infinity();
  CHECK(zeros);
  CHECK(infs);
}

void set_range(Problem& p, int row, int begin, int end, std::int32_t value) {
  for (int j = begin; j < end; ++j) p.indices[std::size_t(row) * p.topk + j] = value;
}

}  // namespace

TEST_CASE("sparse_mla gpu: every h_q at topk 2048, both sm_scales") {
  NSAJIT_REQUIRE_GPU();
  for (int h_q : {8, 16, 32, 64, 128}) {
    for (float scale : {kScaleModel, kScaleDefault}) {
      Problem p = make_problem(2, h_q, 2048, 6000, std::uint32_t(h_q));
      p.sm_scale = scale;
      finalize(p);
      check(p, "random valid slots");
    }
  }
}

TEST_CASE("sparse_mla gpu: invalid entries at the front, middle, end, whole blocks, all") {
  NSAJIT_REQUIRE_GPU();
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
    finalize(p);
    const Result r = check(p, "invalid entries");
    check_empty_row(r, p, 4);
  }
}

TEST_CASE("sparse_mla gpu: rows whose every entry is an out-of-range value") {
  NSAJIT_REQUIRE_GPU();
  Problem p = make_problem(3, 32, 512, 1000, 3);
  set_range(p, 0, 0, 512, -7);
  set_range(p, 1, 0, 512, std::int32_t(p.num_slots));
  set_range(p, 2, 0, 512, kIntMin);
  finalize(p);
  const Result r = check(p, "all invalid, not -1");
  for (int row = 0; row < 3; ++row) check_empty_row(r, p, row);
}

TEST_CASE("sparse_mla gpu: topk_length uses only the first n entries") {
  NSAJIT_REQUIRE_GPU();
  const std::vector<std::int32_t> lengths{0, 1, 63, 64, 65, 1000, 2047, 2048, 5000, -3, kIntMin, kIntMax};
  Problem p = make_problem(int(lengths.size()), 16, 2048, 9000, 5);
  p.topk_length = lengths;
  // Entries past n point at never-filled (NaN) slots: reading one would poison the row.
  for (int r = 0; r < p.rows; ++r)
    for (int j = std::clamp(lengths[std::size_t(r)], 0, p.topk); j < p.topk; ++j)
      p.indices[std::size_t(r) * p.topk + j] = p.poison_slot(j % kPoisonSlots);
  finalize(p);
  const Result r = check(p, "topk_length");
  check_empty_row(r, p, 0);
  check_empty_row(r, p, 9);
  check_empty_row(r, p, 10);
}

TEST_CASE("sparse_mla gpu: kv_row_stride > 576 (padding is NaN and never read)") {
  NSAJIT_REQUIRE_GPU();
  for (std::int64_t stride : {584, 640, 656 * 2}) {
    Problem p = make_problem(3, 64, 1024, 3000, 9, stride);
    set_range(p, 1, 100, 200, -1);
    finalize(p);
    check(p, "kv_row_stride " + std::to_string(stride));
  }
}

TEST_CASE("sparse_mla gpu: rows = 1 and rows = 64") {
  NSAJIT_REQUIRE_GPU();
  Problem one = make_problem(1, 128, 2048, 4096, 21);
  finalize(one);
  check(one, "rows 1");
  Problem many = make_problem(64, 16, 2048, 20000, 22);
  for (int r = 0; r < 64; r += 5) set_range(many, r, (r * 37) % 2000, (r * 37) % 2000 + 48, -1);
  finalize(many);
  check(many, "rows 64");
}

TEST_CASE("sparse_mla gpu: topk 64, 576 (odd block count), 16384") {
  NSAJIT_REQUIRE_GPU();
  for (int topk : {64, 576}) {
    Problem p = make_problem(4, 32, topk, 2000, std::uint32_t(topk));
    set_range(p, 1, topk - 64, topk, -1);
    finalize(p);
    check(p, "topk " + std::to_string(topk));
  }
  Problem big = make_problem(1, 16, 16384, 17000, 17);
  set_range(big, 0, 8000, 9000, -1);
  finalize(big);
  check(big, "topk 16384");
}

TEST_CASE("sparse_mla gpu: peaked softmax (large scores) stays finite and accurate") {
  NSAJIT_REQUIRE_GPU();
  Problem p = make_problem(4, 16, 1024, 3000, 31);
  p.sm_scale = 1.0f;  // scores ~ N(0, 24^2): one token dominates, exp underflows for most
  set_range(p, 2, 0, 512, -1);
  finalize(p);
  check(p, "sm_scale 1.0");
}

TEST_CASE("sparse_mla gpu: deterministic and independent of batchmates") {
  NSAJIT_REQUIRE_GPU();
  Problem batch = make_problem(4, 32, 1024, 5000, 41);
  set_range(batch, 3, 0, 1024, -1);
  finalize(batch);
  const Result a = launch(batch);
  const Result b = launch(batch);
  CHECK(a.out == b.out);
  CHECK(std::equal(a.lse.begin(), a.lse.end(), b.lse.begin(), b.lse.end(),
                   [](float x, float y) { return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y); }));
  // Row 2 alone gives the same bits as inside the batch.
  Problem alone = batch;
  alone.rows = 1;
  alone.q.assign(batch.q.begin() + 2 * 32 * D, batch.q.begin() + 3 * 32 * D);
  alone.indices.assign(batch.indices.begin() + 2 * 1024, batch.indices.begin() + 3 * 1024);
  const Result c = launch(alone);
  CHECK(std::equal(c.out.begin(), c.out.end(), a.out.begin() + 2 * 32 * DV));
  for (int h = 0; h < 32; ++h) CHECK(c.lse[std::size_t(h)] == a.lse[std::size_t(2 * 32 + h)]);
}

TEST_CASE("sparse_mla gpu: slot offsets past 2^31 elements use 64-bit arithmetic") {
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
  // Compact host copy for the reference: slot -> position; invalid stays invalid.
  Problem compact = p;
  compact.num_slots = 256;
  compact.kv.assign(256 * D, ref::kBf16QuietNaN);
  int next = 0;
  std::vector<std::int32_t> seen(256, -1);
  for (auto& idx : compact.indices) {
    if (idx < 0 || idx >= slots) {
      idx = -1;
      continue;
    }
    const auto it = std::find(seen.begin(), seen.begin() + next, idx);
    const int pos = int(it - seen.begin());
    if (pos == next) {
      seen[std::size_t(next++)] = idx;
      std::vector<std::uint16_t> row(D);
      for (auto& v : row) v = random_bf16(rng);
      std::copy(row.begin(), row.end(), compact.kv.begin() + std::ptrdiff_t(pos) * D);
      NSAJIT_CU(cuMemcpyHtoD, CUdeviceptr(pool.get() + std::size_t(idx) * D), row.data(), D * 2);
    }
    idx = pos;
  }
  const Result got = launch(p, pool.get());
  const ref::MlaComparison c = ref::compare_sparse_mla(got.out, got.lse, reference(compact), p.rows, p.h_q);
  CHECK_MESSAGE(c.ok, c.message);
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
      {"argument sm_scale = 0", [](auto& a) { a.sm_scale = 0.f; }},
      {"argument sm_scale = -0.5", [](auto& a) { a.sm_scale = -0.5f; }},
      {"argument sm_scale = nan", [](auto& a) { a.sm_scale = std::numeric_limits<float>::quiet_NaN(); }},
      {"argument sm_scale = inf", [](auto& a) { a.sm_scale = std::numeric_limits<float>::infinity(); }},
      {"argument kv_dtype = fp8", [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; }},
      {"not yet supported", [](auto& a) { a.kv_dtype = nsajit::KvDtype::fp8_e4m3; }},
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
  auto spec = [](int h_q) {
    KernelSpec s;
    s.family = Family::sparse_mla_decode;
    s.h_q = h_q;
    return nsajit::with_default_tile(s);
  };
  auto message = [](const KernelSpec& s) {
    try {
      nsajit::validate(s);
    } catch (const nsajit::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("(valid)");
  };
  for (int h_q : {8, 16, 32, 64, 128}) CHECK(message(spec(h_q)) == "(valid)");
  CHECK(spec(8).tile.heads_per_cta == 8);
  CHECK(spec(128).tile.heads_per_cta == 16);
  CHECK(spec(128).tile.threads == 256);
  CHECK(spec(128).tile.block_tokens == 64);
  CHECK(message(spec(24)).find("h_q = 24: expected one of 8, 16, 32, 64, 128") != std::string::npos);
  KernelSpec s = spec(16);
  s.kv_dtype = nsajit::KvDtype::fp8_e4m3;
  CHECK(message(s).find("not yet supported") != std::string::npos);
  s = spec(16);
  s.next_n = 9;
  CHECK(message(s).find("next_n = 9") != std::string::npos);
  s = spec(16);
  s.topk = 100;
  CHECK(message(s).find("topk = 100") != std::string::npos);
  s = spec(16);
  s.tile.heads_per_cta = 32;
  s.h_q = 16;
  CHECK(message(s).find("heads_per_cta = 32") != std::string::npos);  // does not divide h_q

  s = spec(16);
  CHECK(nsajit::readable_name(s) == "sparse_mla_decode.h16.topk2048.kv_bf16.sm_90a");
  s.next_n = 2;
  CHECK(nsajit::readable_name(s) == "sparse_mla_decode.h16.topk2048.kv_bf16.n2.sm_90a");
}
