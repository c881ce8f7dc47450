// sparse_mla_decode.cpp — family traits of the sparse MLA decode kernel (templates/sparse_mla_decode.cuh).
#include <string>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/family.hpp"
#include "generator/families/sparse_mla_kernels.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

constexpr int kDimQK = 576;
constexpr int kMaxTopk = 16384;
constexpr unsigned kMaxSmem = 232448;  // sm_90 opt-in limit per CTA (227 KiB)

// Dynamic shared memory of one CTA. Mirrors the layout in templates/sparse_mla_decode.cuh, which
// static_asserts that its own sum equals NSAJIT_DYNAMIC_SMEM (this value), so a change on one
// side without the other fails to compile.
// bf16 KV tiles are gathered with one cp.async.bulk per token into rows padded to 1168 bytes
// (NSAJIT_KV_BULK 1). The template's NSAJIT_KV_BULK 0 path (16-byte cp.async into swizzled
// 1152-byte rows, 10-12 % slower: docs/notes/sparse_mla.md) is selected by no spec; the choice is a
// function of the spec alone, so equal specs always give the same source.
bool kv_bulk(const KernelSpec& spec) { return spec.kv_dtype == KvDtype::bf16; }

// 384 threads (FP8 at 64 heads per CTA: 512) = the warpgroup-MMA kernel
// (templates/sparse_mla_wgmma.cuh), sm_90a only (wgmma, setmaxnreg), for 16..64 heads per CTA (at
// 8 heads ptxas serializes its MMAs and spills); 256 threads = the mma.sync kernel
// (sparse_mla_decode.cuh). Which is which: generator/families/sparse_mla_kernels.hpp.
// kWgmmaMinHeads: the wgmma kernel is the default tile on sm_90a for heads_per_cta >= this (16 or
// 64); 0 = never.
// 64: the whole sparse-MLA GPU suite passed on the wgmma kernel (H200, NSAJIT_MLA_WGMMA=1, i.e. for
// 16..128 heads); it is 1.7-1.9x faster at 64 heads per CTA, but 4 % slower on the memory-bound
// 16-head shapes, which keep mma.sync (docs/notes/sparse_mla.md §5). NSAJIT_MLA_WGMMA=1 / =0
// override it at run time (runtime/sparse_mla_decode.cpp).
constexpr int kWgmmaMinHeads = 64;
// 320 threads = the mma.sync kernel with two producer warps issuing the bf16 tiles' bulk copies
// (its default for bf16 up to 32 heads per CTA; 64 heads need every register of 256 threads).
// 512 threads = the mma.sync kernel with eight producer warps that copy and dequantize the FP8
// tiles (its default for FP8 up to 16 heads per CTA: 128 registers a thread).
constexpr int kProducerThreads = 320;
constexpr int kMaxProducerHeads = 32;
constexpr int kFp8ProducerThreads = 512;
constexpr int kMaxFp8ProducerHeads = 16;
bool is_sm90a(const Arch& a) { return a.sm == 90 && a.suffix == 'a'; }
bool wgmma(const KernelSpec& spec) { return sparse_mla_uses_wgmma(spec); }

// Mirrors the layout of templates/sparse_mla_wgmma.cuh (Q + two KV tiles of nine 8 KB swizzled
// subtiles, P_lo 8 KB, validity flags 512 B, alpha and 1/l 256 B each, 64 B of mbarriers) plus
// 1024 bytes to align the base to the 128-byte swizzle's 1024-byte period.
constexpr unsigned kWgmmaSmem = 3u * 9u * 8192u + 8192u + 512u + 256u + 256u + 64u + 1024u;
static_assert(kWgmmaSmem <= kMaxSmem, "the wgmma kernel's layout must fit the 227 KiB opt-in limit");

unsigned smem_bytes(int block_tokens, int heads_per_cta, int threads, bool bulk, bool fp8) {
  const unsigned mrows = heads_per_cta < 16 ? 16u : unsigned(heads_per_cta);  // MMA rows
  const unsigned mw = mrows >= 32 ? 32u : 16u;                                // heads per warp
  const bool producers = threads == kProducerThreads || threads == kFp8ProducerThreads;
  const unsigned mma_warps = producers ? 8u : unsigned(threads / 32);
  const unsigned ncs = mma_warps / (mrows / mw);                               // warps per m-group
  // bf16: two KV tiles; fp8: one bf16 tile + raw staging (1 tile for 64 heads, else 2), with
  // producer warps two bf16 tiles + 1 staging tile.
  const unsigned nstage = fp8 ? (producers || heads_per_cta == 64 ? 1u : 2u) : 0u;
  const unsigned kv = (fp8 && !producers ? 1u : 2u) * unsigned(block_tokens) * (bulk ? 1168u : 1152u) +
                      nstage * unsigned(block_tokens) * 656u;
  const unsigned q = mrows * kDimQK * 2;                         // bf16 q
  const unsigned p = mrows * unsigned(block_tokens) * 2;         // bf16 probabilities
  const unsigned red = ncs * mrows * 4;                          // row max / sum exchange
  // QK split over the dims (ncs 8): the second half's S, [4 token groups][m16 tiles][2 n8 tiles][4][32] fp32
  const unsigned sx = ncs == 8 ? 4u * (mw / 16) * 2 * 4 * 32 * 4 : 0u;
  // validity flags (bf16 BULK: in the row padding), fp8 mbarriers (with producers full[2],
  // empty[2] and one staging mbarrier per producer warp)
  const unsigned valid = bulk ? 0u : (fp8 && !producers ? (1u + nstage) : 2u) * unsigned(block_tokens) * 4;
  const unsigned mbars = fp8 ? (producers ? 96u : 8u * nstage) : 0u;
  return kv + q + p + red + sx + valid + mbars;
}

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.block_tokens == 0) spec.tile.block_tokens = 64;
  if (spec.tile.heads_per_cta == 0) spec.tile.heads_per_cta = spec.h_q < 64 ? (spec.h_q > 0 ? spec.h_q : 64) : 64;
  if (spec.tile.threads == 0)
    spec.tile.threads = kWgmmaMinHeads > 0 && spec.tile.heads_per_cta >= kWgmmaMinHeads && spec.tile.heads_per_cta >= 16 &&
                                spec.tile.block_tokens == 64 && is_sm90a(spec.arch)
                            ? sparse_mla_wgmma_threads(spec.kv_dtype, spec.tile.heads_per_cta)
                        : kv_bulk(spec) && spec.tile.heads_per_cta <= kMaxProducerHeads ? kProducerThreads
                        : !kv_bulk(spec) && spec.tile.heads_per_cta <= kMaxFp8ProducerHeads ? kFp8ProducerThreads
                                                                                            : 256;
}

void validate_spec(const KernelSpec& spec) {
  const int h = spec.h_q;
  if (h != 8 && h != 16 && h != 32 && h != 64 && h != 128)
    throw_bad_field(spec, "h_q", h, "one of 8, 16, 32, 64, 128");
  if (spec.topk < 64 || spec.topk > kMaxTopk || spec.topk % 64 != 0)
    throw_bad_field(spec, "topk", spec.topk, "a multiple of 64 in [64, 16384]");
  if (spec.kv_dtype != KvDtype::bf16 && spec.kv_dtype != KvDtype::fp8_e4m3)
    throw_bad_field(spec, "kv_dtype", static_cast<long long>(spec.kv_dtype), "bf16 or fp8");

  const TileConfig& t = spec.tile;
  if (t.threads != 256 && t.threads != kProducerThreads && t.threads != kSparseMlaWgmmaThreads && t.threads != kFp8ProducerThreads)
    throw_bad_field(spec, "threads", t.threads,
                    "256 (mma.sync, 8 warps), 320 (mma.sync + 2 producer warps: bf16, <= 32 heads per CTA), 384 "
                    "(wgmma, 3 warpgroups) or 512 (mma.sync + 8 producer warps: FP8, <= 16 heads per CTA; wgmma "
                    "with 2 producer warpgroups: FP8, 64 heads per CTA)");
  if (t.block_tokens != 64) throw_bad_field(spec, "block_tokens", t.block_tokens, "64");
  const int hpc = t.heads_per_cta;
  if (hpc != 8 && hpc != 16 && hpc != 32 && hpc != 64)
    throw_bad_field(spec, "heads_per_cta", hpc, "one of 8, 16, 32, 64");
  if (h % hpc != 0)
    throw_bad_field(spec, "heads_per_cta", hpc, "a divisor of h_q (" + std::to_string(h) + ")");
  if (t.threads == kProducerThreads && (!kv_bulk(spec) || t.heads_per_cta > kMaxProducerHeads))
    throw_bad_field(spec, "threads", t.threads, "256 or 384 for this spec (320: bf16 KV, <= 32 heads per CTA)");
  if (t.threads == kFp8ProducerThreads && (kv_bulk(spec) || (hpc > kMaxFp8ProducerHeads && hpc != 64)))
    throw_bad_field(spec, "threads", t.threads,
                    "256 or 384 for this spec (512: FP8 KV, <= 16 or 64 heads per CTA)");
  if (wgmma(spec) && !is_sm90a(spec.arch))
    throw_bad_field(spec, "threads", t.threads,
                    "256 for " + to_string(spec.arch) + " (384, and 512 at 64 heads per CTA = wgmma, sm_90a only)");
  if (!wgmma(spec) && smem_bytes(t.block_tokens, hpc, t.threads, kv_bulk(spec), spec.kv_dtype == KvDtype::fp8_e4m3) > kMaxSmem)
    throw_bad_field(spec, "block_tokens", t.block_tokens, "a tile within 227 KiB of shared memory");
}

unsigned max_dynamic_smem(const KernelSpec& spec);

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {
      {"H_Q", spec.h_q},
      {"TOPK", spec.topk},
      {"THREADS", spec.tile.threads},
      {"BLOCK_TOKENS", spec.tile.block_tokens},
      {"HEADS_PER_CTA", spec.tile.heads_per_cta},
      {"KV_FP8", spec.kv_dtype == KvDtype::fp8_e4m3 ? 1 : 0},
      {"KV_BULK", kv_bulk(spec) ? 1 : 0},
      {"WGMMA", wgmma(spec) ? 1 : 0},
      {"DYNAMIC_SMEM", max_dynamic_smem(spec)},
  };
}

// "sparse_mla_decode.h16.topk2048.kv_bf16" (readable_name appends a non-default tile and the arch).
std::string readable_stem(const KernelSpec& spec) {
  std::string s = "sparse_mla_decode.h" + std::to_string(spec.h_q) + ".topk" + std::to_string(spec.topk) +
                  ".kv_" + to_string(spec.kv_dtype);
  return s;
}

unsigned max_dynamic_smem(const KernelSpec& spec) {
  if (wgmma(spec)) return kWgmmaSmem;
  return smem_bytes(spec.tile.block_tokens, spec.tile.heads_per_cta, spec.tile.threads, kv_bulk(spec), spec.kv_dtype == KvDtype::fp8_e4m3);
}

// Both kernels in one source; NSAJIT_WGMMA picks one (each file is wrapped in #if).
std::string_view template_source() {
  static const std::string text = std::string(embedded::sparse_mla_wgmma()) + std::string(embedded::sparse_mla_decode());
  return text;
}

}  // namespace

extern const FamilyTraits sparse_mla_decode_traits;
const FamilyTraits sparse_mla_decode_traits = {
    .family = Family::sparse_mla_decode,
    .used_fields = uses_h_q | uses_kv_dtype | uses_block_tokens | uses_heads_per_cta,  // not next_n: rows
                                                                                     // are flattened
    .name = "sparse_mla_decode",
    .kernel_entry = "nsajit_sparse_mla_decode",
    .template_source = &template_source,
    .fill_default_tile = &fill_default_tile,
    .validate = &validate_spec,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

}  // namespace nsajit
