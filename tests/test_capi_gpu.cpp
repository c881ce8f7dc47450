// test_capi_gpu.cpp — the C ABI on the GPU: a decode step (top-k, index transform, sparse MLA decode
// with and without split-KV) captured into one CUDA graph and replayed with new lengths, scores,
// queries and KV contents equals the eager calls; a call that would compile inside a capture is
// refused naming the kernel; 8 host threads on their own streams (two devices when present) race
// their first calls of mixed specs and get the results of a sequential run.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "nsajit/nsajit.h"
#include "reference/bf16.hpp"
#include "tests/gpu_support.hpp"

using nsajit::test::DeviceBuffer;

namespace {

constexpr int kB = 4, kWidth = 4096, kTopk = 512, kPage = 64, kPagesPerReq = kWidth / kPage, kHq = 16;
constexpr std::int64_t kPages = std::int64_t(kB) * kPagesPerReq;

#define CHECK_OK(call)                                                                 \
  do {                                                                                 \
    const nsajit_status s_ = (call);                                                   \
    INFO(#call << ": " << nsajit_status_name(s_) << ": " << nsajit_last_error());     \
    REQUIRE(s_ == NSAJIT_OK);                                                          \
  } while (0)

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = nsajit::reference::float_to_bf16(normal(rng));
  return v;
}

// The device buffers of one decode step on one context.
struct Step {
  DeviceBuffer<float> scores{std::size_t(kB) * kWidth};
  DeviceBuffer<std::int32_t> lengths{kB};
  DeviceBuffer<std::int32_t> table{std::size_t(kB) * kPagesPerReq};
  DeviceBuffer<std::uint16_t> kv_rows{std::size_t(kPages) * kPage * 576};
  DeviceBuffer<std::int32_t> all_slots{std::size_t(kPages) * kPage};
  DeviceBuffer<std::uint8_t> cache{std::size_t(kPages) * kPage * 656};
  DeviceBuffer<std::uint16_t> q{std::size_t(kB) * kHq * 576};
  DeviceBuffer<std::int32_t> raw{std::size_t(kB) * kTopk};
  DeviceBuffer<std::int32_t> slots{std::size_t(kB) * kTopk};
  DeviceBuffer<std::uint16_t> out_split{std::size_t(kB) * kHq * 512}, out_plain{std::size_t(kB) * kHq * 512};
  DeviceBuffer<float> lse_split{std::size_t(kB) * kHq}, lse_plain{std::size_t(kB) * kHq};
  std::size_t ws_bytes = 0;
  std::vector<std::int32_t> host_lengths;

  Step() {
    std::vector<std::int32_t> t(std::size_t(kB) * kPagesPerReq), s(all_slots.size());
    // Request r's pages in reverse order, so the page table matters.
    for (int r = 0; r < kB; ++r)
      for (int p = 0; p < kPagesPerReq; ++p) t[std::size_t(r) * kPagesPerReq + p] = r * kPagesPerReq + (kPagesPerReq - 1 - p);
    for (std::size_t i = 0; i < s.size(); ++i) s[i] = std::int32_t(i);
    table.upload(t);
    all_slots.upload(s);
    REQUIRE(nsajit_sparse_mla_workspace_bytes(kB, kHq, kTopk, 0, &ws_bytes) == NSAJIT_OK);
  }

  // New lengths, scores, queries and KV contents (the cache is re-quantized eagerly).
  void fill(unsigned seed) {
    std::mt19937 rng(seed);
    host_lengths.assign(kB, 0);
    for (auto& l : host_lengths) l = 100 + int(rng() % (kWidth - 100));  // some <= topk, most above
    host_lengths[0] = kTopk - 7;
    lengths.upload(host_lengths);
    std::normal_distribution<float> normal;
    std::vector<float> sc(scores.size());
    for (auto& x : sc) x = normal(rng);
    scores.upload(sc);
    q.upload(random_bf16(q.size(), rng, 1.f));
    kv_rows.upload(random_bf16(kv_rows.size(), rng, 0.5f));
    nsajit_fp8_kv_quantize_args a = nsajit_fp8_kv_quantize_defaults();
    a.kv = kv_rows.get();
    a.slots = all_slots.get();
    a.n = int(all_slots.size());
    a.cache = cache.get();
    a.num_pages = kPages;
    a.page_size = kPage;
    CHECK_OK(nsajit_fp8_kv_quantize(&a, nullptr));
    nsajit::test::synchronize();
  }

  void poison() {
    raw.poison();
    slots.poison();
    out_split.poison();
    out_plain.poison();
    lse_split.poison();
    lse_plain.poison();
    nsajit::test::synchronize();
  }

  // top-k -> transform -> sparse MLA decode (split-KV and batch-invariant) on `stream`.
  void run(void* stream, DeviceBuffer<std::uint8_t>& ws) {
    nsajit_topk_args t = nsajit_topk_defaults();
    t.scores = scores.get();
    t.lengths = lengths.get();
    t.out = raw.get();
    t.rows = kB;
    t.width = kWidth;
    t.topk = kTopk;
    CHECK_OK(nsajit_topk(&t, stream));
    nsajit_index_transform_args x = nsajit_index_transform_defaults();
    x.topk_indices = raw.get();
    x.out = slots.get();
    x.rows = kB;
    x.topk = kTopk;
    x.page_table = table.get();
    x.page_table_width = kPagesPerReq;
    x.page_size = kPage;
    x.num_requests = kB;
    CHECK_OK(nsajit_index_transform(&x, stream));
    nsajit_sparse_mla_args m = nsajit_sparse_mla_defaults();
    m.q = q.get();
    m.kv = cache.get();
    m.num_slots = kPages * kPage;
    m.kv_dtype = NSAJIT_KV_FP8_E4M3;
    m.page_size = kPage;
    m.indices = slots.get();
    m.rows = kB;
    m.h_q = kHq;
    m.topk = kTopk;
    m.sm_scale = 0.5f;
    m.out = out_plain.get();
    m.lse = lse_plain.get();
    CHECK_OK(nsajit_sparse_mla_decode(&m, stream));
    m.out = out_split.get();
    m.lse = lse_split.get();
    m.workspace = ws.get();
    m.workspace_bytes = ws.size();
    CHECK_OK(nsajit_sparse_mla_decode(&m, stream));
  }

  struct Result {
    std::vector<std::int32_t> raw, slots;
    std::vector<std::uint16_t> out_split, out_plain;
    std::vector<float> lse_split, lse_plain;
    bool operator==(const Result&) const = default;
  };
  Result download() const {
    return {raw.download(), slots.download(), out_split.download(), out_plain.download(), lse_split.download(),
            lse_plain.download()};
  }
};

// Every slot of row r lies in request r's first lengths[r] tokens (page table reversed); -1 only
// past min(len, topk).
void check_slots(const Step& s, const std::vector<std::int32_t>& slots) {
  for (int r = 0; r < kB; ++r) {
    const int valid = std::min(s.host_lengths[r], kTopk);
    int bad = 0;
    for (int j = 0; j < kTopk; ++j) {
      const int v = slots[std::size_t(r) * kTopk + j];
      if (j >= valid) {
        bad += v != -1;
        continue;
      }
      const int page = v / kPage - r * kPagesPerReq, pos = (kPagesPerReq - 1 - page) * kPage + v % kPage;
      bad += page < 0 || page >= kPagesPerReq || pos >= s.host_lengths[r];
    }
    CHECK_MESSAGE(bad == 0, "row " << r);
  }
}

// A spec no other test uses, with its cubin removed from the disk cache.
nsajit_kernel_spec fresh_spec() {
  nsajit_kernel_spec spec = nsajit_kernel_spec_defaults();
  spec.family = NSAJIT_FAMILY_INDEX_TRANSFORM;
  spec.topk = 64 * 173;
  spec.page_size = 4093;
  spec.mode = NSAJIT_MODE_DECODE;
  char name[256];
  REQUIRE(nsajit_kernel_name(&spec, name, sizeof name, nullptr) == NSAJIT_OK);
  char dir[4096];
  REQUIRE(nsajit_cache_dir(dir, sizeof dir, nullptr) == NSAJIT_OK);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(std::string(name) + ".", 0) == 0) std::filesystem::remove(e.path(), ec);
  return spec;
}

}  // namespace

TEST_CASE("C ABI gpu: a compile inside a capture is refused naming the kernel, and captures once precompiled") {
  NSAJIT_REQUIRE_GPU();
  const nsajit_kernel_spec spec = fresh_spec();
  char name[256];
  REQUIRE(nsajit_kernel_name(&spec, name, sizeof name, nullptr) == NSAJIT_OK);
  DeviceBuffer<std::int32_t> idx(std::size_t(spec.topk)), out(std::size_t(spec.topk)), table(8);
  idx.upload(std::vector<std::int32_t>(std::size_t(spec.topk), 3));
  table.upload({5, 6, 7, 8, 9, 10, 11, 12});
  nsajit_index_transform_args x = nsajit_index_transform_defaults();
  x.topk_indices = idx.get();
  x.out = out.get();
  x.rows = 1;
  x.topk = spec.topk;
  x.page_table = table.get();
  x.page_table_width = 8;
  x.page_size = spec.page_size;
  x.num_requests = 1;
  CUstream stream = nullptr;
  NSAJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
  auto capture = [&](nsajit_status* status) {
    NSAJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
    *status = nsajit_index_transform(&x, stream);
    CUgraph graph = nullptr;
    NSAJIT_CU(cuStreamEndCapture, stream, &graph);
    return graph;
  };
  nsajit_status status = NSAJIT_OK;
  CUgraph graph = capture(&status);
  CHECK(status == NSAJIT_ERROR_CAPTURE);
  const std::string message = nsajit_last_error();
  CHECK(message.find(name) != std::string::npos);
  CHECK(message.find("nsajit_precompile") != std::string::npos);
  if (graph) NSAJIT_CU(cuGraphDestroy, graph);

  nsajit_kernel_record record{};
  record.struct_size = sizeof record;
  CHECK_OK(nsajit_precompile(&spec, &record));
  CHECK(std::string(record.name) == name);
  CHECK(record.source == NSAJIT_SOURCE_COMPILED);
  out.poison();
  graph = capture(&status);  // the module is loaded inside the capture: allowed
  CHECK_MESSAGE(status == NSAJIT_OK, nsajit_last_error());
  REQUIRE(graph != nullptr);
  CUgraphExec exec = nullptr;
  NSAJIT_CU(cuGraphInstantiate, &exec, graph, 0);
  NSAJIT_CU(cuGraphLaunch, exec, stream);
  NSAJIT_CU(cuStreamSynchronize, stream);
  const std::vector<std::int32_t> got = out.download();
  // Position 3 of page 0 -> slot 5 * 4093 + 3.
  CHECK(std::count(got.begin(), got.end(), 5 * 4093 + 3) == spec.topk);
  NSAJIT_CU(cuGraphExecDestroy, exec);
  NSAJIT_CU(cuGraphDestroy, graph);
  NSAJIT_CU(cuStreamDestroy, stream);
}

TEST_CASE("C ABI gpu: precompile_text without arch= takes the current device's") {
  NSAJIT_REQUIRE_GPU();
  CUdevice device = 0;
  NSAJIT_CU(cuCtxGetDevice, &device);
  int major = 0, minor = 0;
  NSAJIT_CU(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  NSAJIT_CU(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  // nsajit targets the arch-specific feature set ("a") on sm_90 and later.
  const std::string arch = "sm_" + std::to_string(major * 10 + minor) + (major >= 9 ? "a" : "");
  nsajit_kernel_record record{};
  record.struct_size = sizeof record;
  CHECK_MESSAGE(nsajit_precompile_text("family=topk topk=2048", &record) == NSAJIT_OK, nsajit_last_error());
  CHECK(std::string(record.name) == "topk.topk2048." + arch);
  CHECK(record.cubin_bytes > 0);
  // Sparse MLA's default kernel depends on the arch (wgmma on sm_90a only): the device's is filled.
  record = nsajit_kernel_record{};
  record.struct_size = sizeof record;
  CHECK_MESSAGE(nsajit_precompile_text("family=sparse_mla h_q=64", &record) == NSAJIT_OK, nsajit_last_error());
  const std::string name = record.name;
  const bool ends_in_arch = name.size() > arch.size() && name.compare(name.size() - arch.size(), arch.size(), arch) == 0;
  CHECK_MESSAGE(ends_in_arch, name);
  // A text that names an arch keeps it, whatever the device (sm_100a compiles without one).
  record = nsajit_kernel_record{};
  record.struct_size = sizeof record;
  CHECK_MESSAGE(nsajit_precompile_text("family=topk topk=2048 arch=sm_100a", &record) == NSAJIT_OK, nsajit_last_error());
  CHECK(std::string(record.name) == "topk.topk2048.sm_100a");
}

TEST_CASE("C ABI gpu: top-k + transform + sparse MLA decode (split-KV too) as one CUDA graph replays equal to eager") {
  NSAJIT_REQUIRE_GPU();
  Step s;
  DeviceBuffer<std::uint8_t> ws(std::max<std::size_t>(s.ws_bytes, 16));
  int32_t splits = 0;
  CHECK_OK(nsajit_sparse_mla_num_splits(kB, kHq, kTopk, 0, &splits));
  MESSAGE("automatic split count " << splits << ", workspace " << s.ws_bytes << " bytes");
  CHECK(splits > 1);
  CUstream stream = nullptr;
  NSAJIT_CU(cuStreamCreate, &stream, CU_STREAM_DEFAULT);
  s.fill(1);
  s.poison();
  s.run(stream, ws);  // eager: loads every kernel before the capture
  NSAJIT_CU(cuStreamSynchronize, stream);
  const Step::Result eager1 = s.download();
  check_slots(s, eager1.slots);

  NSAJIT_CU(cuStreamBeginCapture, stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
  s.run(stream, ws);
  CUgraph graph = nullptr;
  NSAJIT_CU(cuStreamEndCapture, stream, &graph);
  CUgraphExec exec = nullptr;
  NSAJIT_CU(cuGraphInstantiate, &exec, graph, 0);

  for (unsigned seed : {2u, 3u}) {
    s.fill(seed);
    s.poison();
    NSAJIT_CU(cuGraphLaunch, exec, stream);
    NSAJIT_CU(cuStreamSynchronize, stream);
    const Step::Result replay = s.download();
    s.poison();
    s.run(stream, ws);
    NSAJIT_CU(cuStreamSynchronize, stream);
    const Step::Result eager = s.download();
    CHECK_MESSAGE(replay == eager, "seed " << seed);
    CHECK(replay.raw != eager1.raw);  // the graph read the new inputs
    CHECK(replay.lse_split != eager1.lse_split);
    check_slots(s, replay.slots);
    for (std::size_t i = 0; i < replay.lse_plain.size(); ++i) REQUIRE(std::isfinite(replay.lse_plain[i]));
  }
  NSAJIT_CU(cuGraphExecDestroy, exec);
  NSAJIT_CU(cuGraphDestroy, graph);
  NSAJIT_CU(cuStreamDestroy, stream);
}

TEST_CASE("C ABI gpu: 8 host threads on their own streams race first calls of mixed specs") {
  NSAJIT_REQUIRE_GPU();
  int devices = 0;
  NSAJIT_CU(cuDeviceGetCount, &devices);
  if (devices < 2) MESSAGE("one device: the two-device part is skipped (threads all use device 0)");
  std::vector<CUcontext> contexts;
  for (int d = 0; d < std::min(devices, 2); ++d) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    NSAJIT_CU(cuDeviceGet, &dev, d);
    NSAJIT_CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    contexts.push_back(ctx);
  }
  constexpr int kThreads = 8;
  // Thread t runs spec set t % 4: top-k size, sorted or not, fused or not, MLA heads and KV dtype
  // differ, so first calls of the same new spec race across threads.
  struct Out {
    std::vector<std::int32_t> idx;
    std::vector<std::uint16_t> o;
    std::vector<float> lse;
    bool operator==(const Out&) const = default;
  };
  auto work = [&](int t, void* stream) {
    const int topk = t % 2 ? 512 : 2048, rows = 3 + t % 3, width = 6000;
    std::mt19937 rng(100 + t);
    std::normal_distribution<float> normal;
    std::vector<float> sc(std::size_t(rows) * width);
    for (auto& x : sc) x = normal(rng);
    std::vector<std::int32_t> len(rows);
    for (auto& l : len) l = 1000 + int(rng() % 5000);
    DeviceBuffer<float> scores(sc);
    DeviceBuffer<std::int32_t> lengths(len), idx(std::size_t(rows) * topk), offsets(std::vector<std::int32_t>(rows, 7));
    nsajit_topk_args a = nsajit_topk_defaults();
    a.scores = scores.get();
    a.lengths = lengths.get();
    a.out = idx.get();
    a.rows = rows;
    a.width = width;
    a.topk = topk;
    a.sorted = t % 4 == 3;
    if (t % 4 == 2) {
      a.fused_transform = 1;
      a.mode = NSAJIT_MODE_RAGGED;
      a.offsets = offsets.get();
    }
    Out out;
    if (nsajit_topk(&a, stream) != NSAJIT_OK) throw std::runtime_error(nsajit_last_error());
    // Sparse MLA over the selected positions of a bf16 pool of `width` slots.
    const int h_q = t % 2 ? 64 : 16;
    DeviceBuffer<std::uint16_t> q(random_bf16(std::size_t(rows) * h_q * 576, rng, 1.f));
    DeviceBuffer<std::uint16_t> kv(random_bf16(std::size_t(width) * 576, rng, 0.5f));
    DeviceBuffer<std::uint16_t> o(std::size_t(rows) * h_q * 512);
    DeviceBuffer<float> lse(std::size_t(rows) * h_q);
    nsajit_sparse_mla_args m = nsajit_sparse_mla_defaults();
    m.q = q.get();
    m.kv = kv.get();
    m.num_slots = width;
    m.indices = idx.get();
    m.out = o.get();
    m.lse = lse.get();
    m.rows = rows;
    m.h_q = h_q;
    m.topk = topk;
    m.sm_scale = 0.5f;
    if (nsajit_sparse_mla_decode(&m, stream) != NSAJIT_OK) throw std::runtime_error(nsajit_last_error());
    NSAJIT_CU(cuStreamSynchronize, static_cast<CUstream>(stream));
    out.idx = idx.download();
    out.o = o.download();
    out.lse = lse.download();
    return out;
  };
  std::vector<Out> threaded(kThreads);
  std::vector<std::string> errors(kThreads);
  std::barrier start(kThreads);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      try {
        NSAJIT_CU(cuCtxSetCurrent, contexts[std::size_t(t) % contexts.size()]);
        CUstream stream = nullptr;
        NSAJIT_CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
        start.arrive_and_wait();
        threaded[t] = work(t, stream);
        NSAJIT_CU(cuStreamDestroy, stream);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK_MESSAGE(errors[t].empty(), "thread " << t << ": " << errors[t]);
  // The same work again, one thread at a time on device 0: identical bits (every mode here is
  // deterministic and batch-invariant).
  NSAJIT_CU(cuCtxSetCurrent, contexts[0]);
  for (int t = 0; t < kThreads; ++t) {
    if (!errors[t].empty()) continue;
    const Out again = work(t, nullptr);
    CHECK_MESSAGE(again == threaded[t], "thread " << t);
    int valid = 0;
    for (std::int32_t v : again.idx) valid += v >= 0;
    CHECK(valid > 0);
  }
}
