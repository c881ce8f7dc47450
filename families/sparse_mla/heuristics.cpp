// heuristics.cpp — default kernel variant and split count of sparse MLA (why: docs/design/sparse_mla.md).
#include "families/sparse_mla/heuristics.hpp"

#include <algorithm>

namespace nsajit::sparse_mla {
namespace {

bool is_sm90a(const Arch& a) { return a.sm == 90 && a.suffix == 'a'; }

// Heads per CTA from which wgmma is the default on sm_90a: 1.7-1.9x faster at 64, 4 % slower at 16.
constexpr int kWgmmaMinHeads = 64;
// bf16 producer warps fit up to 32 heads per CTA (64 need every register of 256 threads);
// FP8 producer warps up to 16 (the direct kernel's 2, or for precise calls the 512-thread kernel's 8:
// 128 registers a thread).
constexpr int kMaxBf16ProducerHeads = 32;
constexpr int kMaxFp8ProducerHeads = 16;

// The former spelling: a tile given as threads alone.
void variant_from_threads(TileConfig& t) {
  const int threads = t.threads;
  if (threads == 384 || (threads == 512 && t.heads_per_cta == 64)) t.kernel = MlaKernel::wgmma;
  else t.kernel = MlaKernel::mma_sync;
  if (threads >= 256 && threads % 32 == 0) t.producer_warps = (threads - 256) / 32;
}

}  // namespace

void fill_default_tile(KernelSpec& spec) {
  TileConfig& t = spec.tile;
  if (t.block_tokens == 0) t.block_tokens = kBlockTokens;
  if (t.heads_per_cta == 0) t.heads_per_cta = default_heads_per_cta(spec.h_q);
  if (t.kernel == MlaKernel::automatic && t.producer_warps < 0 && t.threads != 0) variant_from_threads(t);
  const bool fp8 = spec.kv_dtype == KvDtype::fp8_e4m3;
  if (t.kernel == MlaKernel::automatic)
    t.kernel = t.heads_per_cta >= kWgmmaMinHeads && t.block_tokens == kBlockTokens && is_sm90a(spec.arch)
                   ? MlaKernel::wgmma
                   : MlaKernel::mma_sync;
  if (t.producer_warps < 0) {
    if (t.kernel == MlaKernel::wgmma) t.producer_warps = fp8 && t.heads_per_cta == 64 ? 8 : 4;
    else if (!fp8) t.producer_warps = t.heads_per_cta <= kMaxBf16ProducerHeads ? 2 : 0;
    // The direct kernel: H100 b1 / b8 n1 -6 %, b128 n2 -4 %, the rest within +-1.5 % (docs/notes/sparse_mla.md).
    else t.producer_warps = t.heads_per_cta <= kMaxFp8ProducerHeads ? (spec.precise ? 8 : 2) : 0;
  }
  if (t.threads == 0) t.threads = threads_of(t.producer_warps);
}

int auto_splits(long long rows, int h_q, int topk, int sm_count) {
  const long long ctas = rows * (h_q / default_heads_per_cta(h_q));
  if (ctas <= 0 || ctas * 4 > sm_count * 3) return 1;
  const int max_by_tiles = std::max(1, topk / kBlockTokens / 2);
  return int(std::clamp<long long>(sm_count / ctas, 1, std::min(kMaxSplits, max_by_tiles)));
}

MlaSchedule default_schedule(const KernelSpec& filled) {
  const TileConfig& t = filled.tile;
  const bool takes = t.kernel == MlaKernel::wgmma && t.heads_per_cta == 64 && filled.kv_dtype == KvDtype::bf16 &&
                     seesaw_takes(filled.topk, filled.precise);
  return takes ? MlaSchedule::seesaw : MlaSchedule::single;
}

}  // namespace nsajit::sparse_mla
