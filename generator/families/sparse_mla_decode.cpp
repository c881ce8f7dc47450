// sparse_mla_decode.cpp — family traits of the sparse MLA decode kernel (templates/sparse_mla_decode.cuh).
#include <string>
#include <vector>

#include "generator/embedded_templates.hpp"
#include "generator/family.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

constexpr int kDimQK = 576;
constexpr int kMaxTopk = 16384;
constexpr unsigned kMaxSmem = 232448;  // sm_90 opt-in limit per CTA (227 KiB)

// Dynamic shared memory of one CTA. Mirrors the layout in templates/sparse_mla_decode.cuh, which
// static_asserts that its own sum equals NSAJIT_DYNAMIC_SMEM (this value), so a change on one
// side without the other fails to compile.
unsigned smem_bytes(int block_tokens, int heads_per_cta) {
  const unsigned kv = unsigned(block_tokens) * (kDimQK + 8) * 2;  // padded bf16 KV rows
  const unsigned q = unsigned(heads_per_cta) * kDimQK * 2;        // bf16 q of the CTA's heads
  const unsigned p = unsigned(block_tokens) * (heads_per_cta + 4) * 4;  // fp32 probabilities
  const unsigned stats = 2u * heads_per_cta * 4;                  // alpha and l per head
  const unsigned idx = unsigned(block_tokens) * 4;                // the block's slots
  return kv + q + p + stats + idx;
}

void fill_default_tile(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = 256;
  if (spec.tile.block_tokens == 0) spec.tile.block_tokens = 64;
  if (spec.tile.heads_per_cta == 0) spec.tile.heads_per_cta = spec.h_q == 8 ? 8 : 16;
}

void validate_spec(const KernelSpec& spec) {
  const int h = spec.h_q;
  if (h != 8 && h != 16 && h != 32 && h != 64 && h != 128)
    throw_bad_field(spec, "h_q", h, "one of 8, 16, 32, 64, 128");
  if (spec.topk < 64 || spec.topk > kMaxTopk || spec.topk % 64 != 0)
    throw_bad_field(spec, "topk", spec.topk, "a multiple of 64 in [64, 16384]");
  if (spec.kv_dtype != KvDtype::bf16)
    throw_bad_field(spec, "kv_dtype", static_cast<long long>(spec.kv_dtype),
                    "bf16 (" + to_string(spec.kv_dtype) + " KV is not yet supported)");
  if (spec.next_n < 1 || spec.next_n > 8) throw_bad_field(spec, "next_n", spec.next_n, "1..8");

  const TileConfig& t = spec.tile;
  if (t.threads != 128 && t.threads != 256 && t.threads != 512)
    throw_bad_field(spec, "threads", t.threads, "one of 128, 256, 512");
  if (t.block_tokens != 32 && t.block_tokens != 64 && t.block_tokens != 128)
    throw_bad_field(spec, "block_tokens", t.block_tokens, "one of 32, 64, 128");
  if (t.block_tokens > t.threads)
    throw_bad_field(spec, "block_tokens", t.block_tokens, "at most threads (" + std::to_string(t.threads) + ")");
  const int hpc = t.heads_per_cta;
  if (hpc != 8 && hpc != 16 && hpc != 32)
    throw_bad_field(spec, "heads_per_cta", hpc, "one of 8, 16, 32");
  if (h % hpc != 0)
    throw_bad_field(spec, "heads_per_cta", hpc, "a divisor of h_q (" + std::to_string(h) + ")");
  // Score phase: every warp owns heads_per_cta / warps heads.
  if (hpc % (t.threads / 32) != 0)
    throw_bad_field(spec, "heads_per_cta", hpc,
                    "a multiple of threads / 32 (" + std::to_string(t.threads / 32) + ")");
  // PV phase: each thread accumulates heads_per_cta / (threads / 64) heads x 8 dims in registers;
  // keep that at <= 64 floats so the kernel does not spill.
  if (hpc * 64 / t.threads > 8)
    throw_bad_field(spec, "heads_per_cta", hpc,
                    "at most threads / 8 (" + std::to_string(t.threads / 8) + ") for register space");
  if (smem_bytes(t.block_tokens, hpc) > kMaxSmem)
    throw_bad_field(spec, "block_tokens", t.block_tokens, "a tile within 227 KiB of shared memory");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {
      {"H_Q", spec.h_q},
      {"TOPK", spec.topk},
      {"THREADS", spec.tile.threads},
      {"BLOCK_TOKENS", spec.tile.block_tokens},
      {"HEADS_PER_CTA", spec.tile.heads_per_cta},
      {"DYNAMIC_SMEM", smem_bytes(spec.tile.block_tokens, spec.tile.heads_per_cta)},
  };
}

// "sparse_mla_decode.h16.topk2048.kv_bf16", plus ".n<next_n>" when next_n != 1 (readable_name
// appends a non-default tile and the arch).
std::string readable_stem(const KernelSpec& spec) {
  std::string s = "sparse_mla_decode.h" + std::to_string(spec.h_q) + ".topk" + std::to_string(spec.topk) +
                  ".kv_" + to_string(spec.kv_dtype);
  if (spec.next_n != 1) s += ".n" + std::to_string(spec.next_n);
  return s;
}

unsigned max_dynamic_smem(const KernelSpec& spec) {
  return smem_bytes(spec.tile.block_tokens, spec.tile.heads_per_cta);
}

}  // namespace

extern const FamilyTraits sparse_mla_decode_traits;
const FamilyTraits sparse_mla_decode_traits = {
    .family = Family::sparse_mla_decode,
    .used_fields = uses_h_q | uses_kv_dtype | uses_next_n | uses_block_tokens | uses_heads_per_cta,
    .name = "sparse_mla_decode",
    .kernel_entry = "nsajit_sparse_mla_decode",
    .template_source = &embedded::sparse_mla_decode,
    .fill_default_tile = &fill_default_tile,
    .validate = &validate_spec,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

}  // namespace nsajit
