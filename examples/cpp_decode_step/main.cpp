// One DeepSeek-V3.2 decode step of DSA on nsajit's C++ API, as a serving engine would run it:
// write the new tokens into the FP8 KV cache, pick each request's top-k tokens from the indexer
// scores straight into cache slots (fused top-k + page-table transform), then sparse MLA decode
// with split-KV. Without a GPU it says so and exits 0. `--precompile` puts the step's kernels on their
// default tiles into the disk cache (exit 1 if one could not be written); a tuning database may pick
// other variants per shape, which `nsajit precompile` (the fleet tool) enumerates too.
#include <cuda.h>
#include <dlfcn.h>

#include <nsajit/jit.hpp>
#include <nsajit/kernels.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace {

// The few Driver API calls the host needs, from libcuda.so.1 at run time (no link-time libcuda).
struct Cuda {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*mem_alloc)(CUdeviceptr*, size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void*, size_t);
  CUresult (*dtoh)(void*, CUdeviceptr, size_t);
  CUresult (*ctx_synchronize)();
  bool load() {
    void* h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == nullptr) return false;
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name)); };
    sym(init, "cuInit");
    sym(device_get, "cuDeviceGet");
    sym(primary_ctx_retain, "cuDevicePrimaryCtxRetain");
    sym(ctx_set_current, "cuCtxSetCurrent");
    sym(mem_alloc, "cuMemAlloc_v2");
    sym(mem_free, "cuMemFree_v2");
    sym(htod, "cuMemcpyHtoD_v2");
    sym(dtoh, "cuMemcpyDtoH_v2");
    sym(ctx_synchronize, "cuCtxSynchronize");
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    return init(0) == CUDA_SUCCESS && device_get(&dev, 0) == CUDA_SUCCESS &&
           primary_ctx_retain(&ctx, dev) == CUDA_SUCCESS && ctx_set_current(ctx) == CUDA_SUCCESS;
  }
};

Cuda cuda;

template <class T>
T* upload(const std::vector<T>& host) {
  CUdeviceptr p = 0;
  if (cuda.mem_alloc(&p, host.size() * sizeof(T)) != CUDA_SUCCESS) throw std::runtime_error("cuMemAlloc");
  cuda.htod(p, host.data(), host.size() * sizeof(T));
  return reinterpret_cast<T*>(p);
}

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return std::uint16_t((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  const int b = 4, h_q = 16, topk = 2048, page_size = 64, max_len = 8192, pages_per_req = max_len / page_size;
  const float sm_scale = 0.13524f;
  if (argc > 1 && std::strcmp(argv[1], "--precompile") == 0) {
    int status = 0;
    for (nsajit::KernelSpec s : {nsajit::KernelSpec{.family = nsajit::Family::fp8_kv_quantize, .page_size = page_size},
                                 nsajit::KernelSpec{.family = nsajit::Family::topk, .topk = topk, .page_size = page_size,
                                                    .fused_transform = true},
                                 nsajit::KernelSpec{.family = nsajit::Family::sparse_mla_decode, .h_q = h_q,
                                                    .topk = topk, .kv_dtype = nsajit::KvDtype::fp8_e4m3},
                                 nsajit::KernelSpec{.family = nsajit::Family::sparse_mla_combine}}) {
      const nsajit::KernelRecord r = nsajit::precompile(s);
      std::printf("precompiled %s (%s)%s\n", r.name.c_str(),
                  r.source == nsajit::CubinSource::compiled ? "compiled" : "cached",
                  r.on_disk ? "" : ", but its cache entry could not be written");
      if (!r.on_disk) status = 1;
    }
    return status;
  }
  if (!cuda.load()) {
    std::printf("no GPU: nothing to run (nsajit %s; --precompile fills %s)\n", nsajit::version().c_str(),
                nsajit::cache_dir().c_str());
    return 0;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<int> lengths(b);
  for (int r = 0; r < b; ++r) lengths[r] = 3000 + int(rng() % (max_len - 3000));  // > topk: a real selection

  // Paged FP8 cache: request r owns pages [r * pages_per_req, (r + 1) * pages_per_req).
  const int num_pages = b * pages_per_req;
  std::vector<std::int32_t> page_table(b * pages_per_req);
  for (int i = 0; i < b * pages_per_req; ++i) page_table[i] = i;
  std::vector<std::uint16_t> kv(std::size_t(num_pages) * page_size * 576);
  for (auto& x : kv) x = to_bf16(0.1f * normal(rng));
  std::vector<std::int32_t> slots(std::size_t(num_pages) * page_size);
  for (std::size_t i = 0; i < slots.size(); ++i) slots[i] = std::int32_t(i);
  std::vector<float> scores(std::size_t(b) * max_len);
  for (auto& x : scores) x = normal(rng);
  std::vector<std::uint16_t> q(std::size_t(b) * h_q * 576);
  for (auto& x : q) x = to_bf16(normal(rng));

  auto* d_kv = upload(kv);
  auto* d_slots = upload(slots);
  auto* d_cache = upload(std::vector<std::uint8_t>(std::size_t(num_pages) * page_size * 656));
  auto* d_table = upload(page_table);
  auto* d_scores = upload(scores);
  auto* d_lengths = upload(lengths);
  auto* d_q = upload(q);
  auto* d_indices = upload(std::vector<std::int32_t>(std::size_t(b) * topk));
  auto* d_out = upload(std::vector<std::uint16_t>(std::size_t(b) * h_q * 512));
  auto* d_lse = upload(std::vector<float>(std::size_t(b) * h_q));
  const std::size_t ws_bytes = nsajit::sparse_mla_workspace_bytes(b, h_q, topk);
  auto* d_ws = upload(std::vector<std::uint8_t>(ws_bytes > 0 ? ws_bytes : 16));
  CUstream stream = nullptr;

  nsajit::fp8_kv_quantize({.kv = d_kv, .slots = d_slots, .n = int(slots.size()), .cache = d_cache,
                           .num_pages = num_pages, .page_size = page_size}, stream);
  nsajit::topk({.scores = d_scores, .lengths = d_lengths, .out = d_indices, .rows = b, .width = max_len,
                .topk = topk, .fused_transform = true, .mode = nsajit::IndexMode::decode, .page_table = d_table,
                .page_table_width = pages_per_req, .page_size = page_size, .num_requests = b}, stream);
  nsajit::sparse_mla_decode({.q = d_q, .kv = d_cache, .num_slots = std::int64_t(num_pages) * page_size,
                             .kv_dtype = nsajit::KvDtype::fp8_e4m3, .page_size = page_size, .indices = d_indices,
                             .out = d_out, .lse = d_lse, .rows = b, .h_q = h_q, .topk = topk, .sm_scale = sm_scale,
                             .workspace = d_ws, .workspace_bytes = ws_bytes}, stream);
  cuda.ctx_synchronize();

  std::vector<float> lse(std::size_t(b) * h_q);
  cuda.dtoh(lse.data(), reinterpret_cast<CUdeviceptr>(d_lse), lse.size() * 4);
  std::vector<std::int32_t> indices(std::size_t(b) * topk);
  cuda.dtoh(indices.data(), reinterpret_cast<CUdeviceptr>(d_indices), indices.size() * 4);
  int finite = 0, in_range = 0;
  for (float x : lse) finite += std::isfinite(x);
  for (int r = 0; r < b; ++r)
    for (int j = 0; j < topk; ++j) {
      const int s = indices[std::size_t(r) * topk + j];
      in_range += s >= r * pages_per_req * page_size && s < r * pages_per_req * page_size + lengths[r];
    }
  std::printf("decode step: b %d, h_q %d, topk %d, %zu-byte split-KV workspace; %d/%d lse finite, %d/%d slots "
              "in their request's first lengths[r] tokens\n",
              b, h_q, topk, ws_bytes, finite, b * h_q, in_range, b * topk);
  for (const auto& r : nsajit::jit_records()) std::printf("  kernel %s\n", r.name.c_str());
  return finite == b * h_q && in_range == b * topk ? 0 : 1;
}
