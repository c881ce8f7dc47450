// traits.cpp — family traits of sparse MLA (decode and prefill rows share its kernels): the
// mma_sync kernel (templates/sparse_mla_mma_sync.cuh) and its FP8 direct form
// (templates/sparse_mla_fp8_direct.cuh: FP8 with 2 producer warps), the wgmma kernel
// (templates/sparse_mla_wgmma.cuh) and its seesaw schedule (templates/sparse_mla_seesaw.cuh), one
// variant per spec (tile.kernel, tile.producer_warps, tile.schedule).
#include <string>
#include <vector>

#include "families/sparse_mla/heuristics.hpp"
#include "generator/family.hpp"
#include "nsajit/errors.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

constexpr int kMaxTopk = 16384;
constexpr unsigned kMaxSmem = 232448;  // sm_90 opt-in limit per CTA (227 KiB)

bool is_sm90a(const Arch& a) { return a.sm == 90 && a.suffix == 'a'; }
bool wgmma(const KernelSpec& spec) { return spec.tile.kernel == MlaKernel::wgmma; }
bool fp8(const KernelSpec& spec) { return spec.kv_dtype == KvDtype::fp8_e4m3; }
bool seesaw(const KernelSpec& spec) { return spec.tile.schedule == MlaSchedule::seesaw; }
// FP8 tokens as MMA operands, copied by 2 producer warps (no dequantized tile).
bool fp8_direct(const KernelSpec& spec) {
  return spec.tile.kernel == MlaKernel::mma_sync && fp8(spec) && spec.tile.producer_warps == 2;
}

static_assert(sparse_mla_wgmma_smem_bytes() <= kMaxSmem, "the wgmma kernel's layout must fit the 227 KiB opt-in limit");
static_assert(sparse_mla_seesaw_smem_bytes() <= kMaxSmem, "the seesaw plan must fit the 227 KiB opt-in limit");
static_assert(sparse_mla_fp8_direct_smem_bytes() <= kMaxSmem, "the FP8 direct plan must fit the 227 KiB opt-in limit");

unsigned smem_bytes(const KernelSpec& spec) {
  if (wgmma(spec)) return seesaw(spec) ? sparse_mla_seesaw_smem_bytes() : sparse_mla_wgmma_smem_bytes();
  if (fp8_direct(spec)) return sparse_mla_fp8_direct_smem_bytes();
  return sparse_mla_mma_sync_smem_bytes(spec.tile.block_tokens, spec.tile.heads_per_cta, spec.tile.threads, fp8(spec));
}

void validate_spec(const KernelSpec& spec) {
  const int h = spec.h_q;
  if (h != 8 && h != 16 && h != 32 && h != 64 && h != 128)
    throw_bad_field(spec, "h_q", h, "one of 8, 16, 32, 64, 128");
  require_topk_multiple_of_64(spec, kMaxTopk);
  if (spec.kv_dtype != KvDtype::bf16 && spec.kv_dtype != KvDtype::fp8_e4m3)
    throw_bad_field(spec, "kv_dtype", static_cast<long long>(spec.kv_dtype), "bf16 or fp8");

  const TileConfig& t = spec.tile;
  if (t.block_tokens != sparse_mla::kBlockTokens) throw_bad_field(spec, "block_tokens", t.block_tokens, "64");
  const int hpc = t.heads_per_cta;
  if (hpc != 8 && hpc != 16 && hpc != 32 && hpc != 64)
    throw_bad_field(spec, "heads_per_cta", hpc, "one of 8, 16, 32, 64");
  if (h % hpc != 0)
    throw_bad_field(spec, "heads_per_cta", hpc, "a divisor of h_q (" + std::to_string(h) + ")");
  const int pw = t.producer_warps;
  if (t.kernel == MlaKernel::mma_sync) {
    if (pw != 0 && pw != 2 && pw != 8)
      throw_bad_field(spec, "producer_warps", pw, "0, 2 or 8 (FP8) for kernel mma_sync");
    if (pw == 2 && hpc > (fp8(spec) ? 16 : 32))
      throw_bad_field(spec, "producer_warps", pw, "0 for this spec (2: bf16 KV up to 32 heads per CTA, FP8 up to 16)");
    if (pw == 2 && fp8(spec) && spec.precise)
      throw_bad_field(spec, "precise", 1, "0 for FP8 KV with 2 producer warps (the direct kernel has no P_lo)");
    if (pw == 8 && (!fp8(spec) || hpc > 16))
      throw_bad_field(spec, "producer_warps", pw, "0 or 2 for this spec (8: FP8 KV, <= 16 heads per CTA)");
  } else if (t.kernel == MlaKernel::wgmma) {
    if (!is_sm90a(spec.arch))
      throw_bad_field(spec, "kernel", to_string(t.kernel), "mma_sync for " + to_string(spec.arch) + " (wgmma: sm_90a only)");
    if (hpc < 16) throw_bad_field(spec, "heads_per_cta", hpc, "16, 32 or 64 for kernel wgmma");
    if (!fp8(spec) && pw != 4) throw_bad_field(spec, "producer_warps", pw, "4 for kernel wgmma with bf16 KV");
    if (fp8(spec) && hpc != 64) throw_bad_field(spec, "heads_per_cta", hpc, "64 for kernel wgmma with FP8 KV");
    if (fp8(spec) && pw != 8) throw_bad_field(spec, "producer_warps", pw, "8 for kernel wgmma with FP8 KV");
  } else {
    throw_bad_field(spec, "kernel", int(t.kernel), "mma_sync or wgmma");
  }
  if (t.schedule == MlaSchedule::seesaw) {
    // The seesaw schedule (docs/notes/sparse_mla.md "The seesaw schedule"): two math warpgroups on
    // alternate KV tiles of 64 heads, bf16 P exchanged through smem. Its combinations first, so a
    // spec names the field that is out of its range.
    if (t.kernel != MlaKernel::wgmma) throw_bad_field(spec, "schedule", to_string(t.schedule), "single for kernel " + to_string(t.kernel) + " (seesaw: kernel wgmma only)");
    if (fp8(spec)) throw_bad_field(spec, "kv_dtype", to_string(spec.kv_dtype), "bf16 for schedule seesaw");
    if (spec.precise) throw_bad_field(spec, "precise", 1, "0 for schedule seesaw (P is one bf16 rounding)");
    if (hpc != 64) throw_bad_field(spec, "heads_per_cta", hpc, "64 for schedule seesaw");
    if (spec.topk % sparse_mla::kSeesawTopkMultiple != 0)
      throw_bad_field(spec, "topk", spec.topk,
                      "a multiple of " + std::to_string(sparse_mla::kSeesawTopkMultiple) + " for schedule seesaw (KV tiles go in pairs)");
  }
  if (t.combine == MlaCombine::cluster && t.schedule != MlaSchedule::seesaw)
    throw_bad_field(spec, "combine", to_string(t.combine), "kernel for schedule " + to_string(t.schedule) + " (cluster: the seesaw only)");
  if (t.threads != sparse_mla::threads_of(pw))
    throw_bad_field(spec, "threads", t.threads,
                    std::to_string(sparse_mla::threads_of(pw)) + " (256 + 32 * producer_warps " + std::to_string(pw) + ")");
  if (smem_bytes(spec) > kMaxSmem)
    throw_bad_field(spec, "block_tokens", t.block_tokens, "a tile within 227 KiB of shared memory");
}

std::vector<KernelConstant> constants(const KernelSpec& spec) {
  return {
      {"H_Q", spec.h_q},
      {"TOPK", spec.topk},
      {"THREADS", spec.tile.threads},
      {"BLOCK_TOKENS", spec.tile.block_tokens},
      {"HEADS_PER_CTA", spec.tile.heads_per_cta},
      {"KV_FP8", fp8(spec) ? 1 : 0},
      {"PRECISE", spec.precise ? 1 : 0},
      {"CLUSTER_COMBINE", spec.tile.combine == MlaCombine::cluster ? 1 : 0},
      {"DYNAMIC_SMEM", smem_bytes(spec)},
  };
}

// "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2", ".seesaw", ".cluster_combine" and ".precise"
// appended when set
// (readable_name appends the arch).
std::string readable_stem(const KernelSpec& spec) {
  return "sparse_mla.h" + std::to_string(spec.h_q) + ".topk" + std::to_string(spec.topk) + ".kv_" +
         to_string(spec.kv_dtype) + "." + to_string(spec.tile.kernel) + ".hpc" +
         std::to_string(spec.tile.heads_per_cta) + ".pw" + std::to_string(spec.tile.producer_warps) +
         (spec.tile.schedule == MlaSchedule::seesaw ? ".seesaw" : "") +
         (spec.tile.combine == MlaCombine::cluster ? ".cluster_combine" : "") + (spec.precise ? ".precise" : "");
}

unsigned max_dynamic_smem(const KernelSpec& spec) { return smem_bytes(spec); }

std::string_view template_file(const KernelSpec& spec) {
  if (fp8_direct(spec)) return "sparse_mla_fp8_direct.cuh";
  if (!wgmma(spec)) return "sparse_mla_mma_sync.cuh";
  return seesaw(spec) ? "sparse_mla_seesaw.cuh" : "sparse_mla_wgmma.cuh";
}

}  // namespace

extern const FamilyTraits sparse_mla_traits;
const FamilyTraits sparse_mla_traits = {
    .family = Family::sparse_mla,
    // not next_n: rows are flattened
    .used_fields = uses_h_q | uses_kv_dtype | uses_block_tokens | uses_heads_per_cta | uses_kernel_variant | uses_precise |
                   uses_mla_schedule | uses_mla_combine,
    .name = "sparse_mla",
    .kernel_entry = "nsajit_sparse_mla",
    .template_file = &template_file,
    .fill_default_tile = &sparse_mla::fill_default_tile,
    .validate = &validate_spec,
    .constants = &constants,
    .readable_stem = &readable_stem,
    .max_dynamic_smem = &max_dynamic_smem,
};

}  // namespace nsajit
