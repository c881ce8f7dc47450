// launch.cpp — nsajit::sparse_mla_decode: argument checks, launch plan, launch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#include "families/sparse_mla/heuristics.hpp"
#include "families/sparse_mla/launch.hpp"
#include "families/sparse_mla/tuning.hpp"
#include "generator/family.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/driver.hpp"
#include "runtime/env.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

// `fn` below: the entry point the caller called (sparse_mla_decode or sparse_mla_prefill), which
// every error message names.
[[noreturn]] void bad(const char* fn, std::string_view name, std::string_view value, std::string_view expected) {
  detail::throw_bad_argument(fn, name, value, expected);
}

using sparse_mla::kMaxSplits;
using sparse_mla::workspace_bytes;

// An automatic count covers what the tuning database may choose for the shape (workspace sizing).
int resolve_splits(int rows, int h_q, int topk, int num_splits) {
  if (num_splits > 0) return std::min(num_splits, topk / sparse_mla::kBlockTokens);
  const int sm_count = driver::current_context_info().sm_count;
  const int tuned = std::min(tuning::tuned_max_splits(rows, h_q, topk, sm_count), topk / sparse_mla::kBlockTokens);
  return std::max(tuned, sparse_mla::auto_splits(rows, h_q, topk, sm_count));
}

// The one place NSAJIT_PDL is read: 0 turns the combine's programmatic launch off for every call.
bool pdl_allowed_by_environment() {
  static const bool allowed = env::read(env::kPdl) != 0;
  return allowed;
}

// rows and h_q as every entry point takes them. The wgmma kernels' grid x is rows * (h_q /
// heads_per_cta), CUDA allows 2^31 - 1, and a tile (a tuned one too) may hold as few as 16 heads.
void check_rows_and_heads(const char* fn, int rows, int h_q) {
  if (rows < 0) detail::throw_bad_argument(fn, "rows", std::to_string(rows), ">= 0");
  if (h_q != 8 && h_q != 16 && h_q != 32 && h_q != 64 && h_q != 128)
    detail::throw_bad_argument(fn, "h_q", std::to_string(h_q), "one of 8, 16, 32, 64, 128");
  const std::int64_t ctas_per_row = std::max(1, h_q / 16);
  if (std::int64_t(rows) * ctas_per_row > 2147483647)
    detail::throw_bad_argument(fn, "rows", std::to_string(rows),
                               "<= " + std::to_string(2147483647 / ctas_per_row) + " for h_q " + std::to_string(h_q) +
                                   " (the grid holds 2^31 - 1 CTAs of 16 heads)");
}

// Everything is checked here, before any driver call, so a bad call never compiles or launches.
void check_args(const char* fn, const SparseMlaDecodeArgs& a) {
  check_rows_and_heads(fn, a.rows, a.h_q);
  detail::require_topk(fn, a.topk, 16384);
  if (!std::isfinite(a.sm_scale) || !(a.sm_scale > 0.f)) {
    std::ostringstream v;
    v << a.sm_scale;
    bad(fn, "sm_scale", v.str(), "finite and > 0");
  }
  if (a.next_n < 1 || a.next_n > 8) bad(fn, "next_n", std::to_string(a.next_n), "1..8");
  if (a.rows % a.next_n != 0)
    bad(fn, "rows", std::to_string(a.rows), "a multiple of next_n (" + std::to_string(a.next_n) + ")");
  if (a.num_slots < 0) bad(fn, "num_slots", std::to_string(a.num_slots), ">= 0");
  if (a.kv_dtype == KvDtype::bf16) {
    // Rows are copied in 16-byte chunks: the stride keeps every row 16-byte aligned.
    if (a.kv_row_stride < kMlaDimQK || a.kv_row_stride % 8 != 0)
      bad(fn, "kv_row_stride", std::to_string(a.kv_row_stride), "a multiple of 8 elements, >= 576");
  } else if (a.kv_dtype == KvDtype::fp8_e4m3) {
    if (a.page_size < 1) bad(fn, "page_size", std::to_string(a.page_size), ">= 1");
    if (a.kv_page_stride != 0 &&
        (a.kv_page_stride % 16 != 0 || a.kv_page_stride < std::int64_t(a.page_size) * kFp8KvTokenBytes))
      bad(fn, "kv_page_stride", std::to_string(a.kv_page_stride),
          "0 or a multiple of 16 bytes >= page_size * 656 (" + std::to_string(std::int64_t(a.page_size) * kFp8KvTokenBytes) + ")");
    if (a.num_slots % a.page_size != 0)
      bad(fn, "num_slots", std::to_string(a.num_slots),
          "num_pages * page_size (a multiple of page_size " + std::to_string(a.page_size) + ")");
  } else {
    bad(fn, "kv_dtype", to_string(a.kv_dtype), "bf16 or fp8");
  }
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    bad(fn, "num_splits", std::to_string(a.num_splits), "0 (automatic) .. 64");
  // A forced count resolves without the device (capped at the row's 64-token tiles, as the
  // workspace sizing caps it: a count that resolves to one split needs no workspace).
  const int forced = std::min(a.num_splits, a.topk / 64);
  if (a.workspace == nullptr && forced > 1 && a.rows > 0)
    bad(fn, "num_splits", std::to_string(a.num_splits), "0 or 1 without a workspace");
  if (a.workspace != nullptr && forced > 1 && a.workspace_bytes < workspace_bytes(a.rows, a.h_q, forced))
    bad(fn, "workspace_bytes", std::to_string(a.workspace_bytes),
        ">= sparse_mla_workspace_bytes(...) = " + std::to_string(workspace_bytes(a.rows, a.h_q, forced)) + " for " +
            std::to_string(forced) + " splits");
  if (a.rows == 0) return;  // nothing is read or written
  detail::require_pointer(fn, "q", a.q, 16);
  // With no slots every index is invalid and the pool is never read, so it may be null.
  if (a.num_slots > 0 || a.kv != nullptr) detail::require_pointer(fn, "kv", a.kv, 16);
  detail::require_pointer(fn, "indices", a.indices, 4);
  if (a.topk_length != nullptr && reinterpret_cast<std::uintptr_t>(a.topk_length) % 4 != 0)
    bad(fn, "topk_length", detail::pointer_text(a.topk_length), "a 4-byte aligned device pointer or null");
  detail::require_pointer(fn, "out", a.out, 16);
  detail::require_pointer(fn, "lse", a.lse, 4);
  if (a.max_logits != nullptr && reinterpret_cast<std::uintptr_t>(a.max_logits) % 4 != 0)
    bad(fn, "max_logits", detail::pointer_text(a.max_logits), "a 4-byte aligned device pointer or null");
  if (a.attn_sink != nullptr && reinterpret_cast<std::uintptr_t>(a.attn_sink) % 4 != 0)
    bad(fn, "attn_sink", detail::pointer_text(a.attn_sink), "a 4-byte aligned device pointer or null");
  if (a.workspace != nullptr && reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0)
    bad(fn, "workspace", detail::pointer_text(a.workspace), "a 16-byte aligned device pointer or null");
}

}  // namespace

namespace {
// The sizing queries take what a launch takes (check_args' rules for these four values).
void check_sizing(const char* fn, int rows, int h_q, int topk, int num_splits) {
  check_rows_and_heads(fn, rows, h_q);
  detail::require_topk(fn, topk, 16384);
  if (num_splits < 0 || num_splits > kMaxSplits)
    detail::throw_bad_argument(fn, "num_splits", std::to_string(num_splits), "0 (automatic) .. 64");
}
}  // namespace

int sparse_mla_num_splits(int rows, int h_q, int topk, int num_splits) {
  check_sizing("nsajit::sparse_mla_num_splits", rows, h_q, topk, num_splits);
  if (rows == 0) return 1;
  return resolve_splits(rows, h_q, topk, num_splits);
}

std::size_t sparse_mla_workspace_bytes(int rows, int h_q, int topk, int num_splits) {
  check_sizing("nsajit::sparse_mla_workspace_bytes", rows, h_q, topk, num_splits);
  if (rows == 0) return 0;
  return workspace_bytes(rows, h_q, resolve_splits(rows, h_q, topk, num_splits));
}

namespace detail {

SparseMlaLaunchPlan plan_sparse_mla(const SparseMlaDecodeArgs& a, const TileConfig& tile, const char* entry) {
  check_args(entry, a);
  SparseMlaLaunchPlan plan;
  plan.num_splits = 0;
  if (a.rows == 0) return plan;
  // Forced split counts were checked against workspace_bytes above; an automatic one is lowered
  // to what the workspace holds (down to no split), never an error after a driver call.
  // The dispatcher's call (automatic variant): the tuning database's choice for the shape, if any,
  // except in batch-invariant calls: its choices differ between rows buckets, and a row's bits
  // must not change with its batchmates (the heuristics' tile and schedule do not depend on rows).
  const bool batch_invariant = a.workspace == nullptr || a.num_splits == 1;
  const tuning::SparseMlaTuningEntry* tuned =
      tile.kernel == MlaKernel::automatic && !batch_invariant
          ? tuning::tuned_sparse_mla(a.rows, a.h_q, a.next_n, a.topk, a.kv_dtype, a.precise,
                                     driver::current_context_info().sm_count)
          : nullptr;
  int splits = 1;
  if (a.workspace != nullptr && a.num_splits > 0)
    splits = resolve_splits(a.rows, a.h_q, a.topk, a.num_splits);
  else if (a.workspace != nullptr && tuned && tuned->choice.num_splits > 0)
    splits = std::min(tuned->choice.num_splits, a.topk / sparse_mla::kBlockTokens);
  else if (a.workspace != nullptr)
    splits = sparse_mla::auto_splits(a.rows, a.h_q, a.topk, driver::current_context_info().sm_count);
  while (splits > 1 && a.workspace_bytes < workspace_bytes(a.rows, a.h_q, splits)) --splits;
  plan.num_splits = splits;
  plan.spec.family = Family::sparse_mla;
  plan.spec.h_q = a.h_q;
  plan.spec.topk = a.topk;
  plan.spec.kv_dtype = a.kv_dtype;
  plan.spec.precise = a.precise;
  if (tile.kernel != MlaKernel::automatic) plan.spec.tile = tile;
  else if (tuned) plan.spec.tile = tuned->choice.tile;
  if (plan.spec.tile.combine == MlaCombine::cluster) {
    // A row and head group's two splits merge in a 2-CTA cluster: exactly kClusterSplits splits;
    // without a split (no workspace, num_splits 1, a workspace too small) the plain seesaw. A forced
    // other count is an error with the caller's own tile; under a database's choice it takes the
    // combine kernel (the caller cannot see the database).
    const bool other_count = a.num_splits > 1 && a.num_splits != sparse_mla::kClusterSplits;
    if (other_count && tile.kernel != MlaKernel::automatic)
      bad(entry, "num_splits", std::to_string(a.num_splits),
          "0, 1 or " + std::to_string(sparse_mla::kClusterSplits) + " with tile.combine cluster (a 2-CTA cluster a row and head group)");
    if (plan.num_splits > 1 && !other_count) plan.num_splits = sparse_mla::kClusterSplits;
    else plan.spec.tile.combine = MlaCombine::kernel;
  }
  // next_n stays 1: rows are already flattened (b * next_n), so every MTP depth shares one kernel.
  plan.spec = spec_for_current_device(plan.spec);
  // The dispatcher's schedule, unless the database's choice named one: known once the tile is filled
  // (the seesaw only where its validation holds: default_schedule's conditions are that validation).
  if (tile.kernel == MlaKernel::automatic && !(tuned && tuning::schedule_chosen(tuned->choice))) {
    plan.spec.tile.schedule = sparse_mla::default_schedule(plan.spec);
  }
  plan.programmatic_combine = a.programmatic_launch && pdl_allowed_by_environment();
  return plan;
}

void launch_sparse_mla(const SparseMlaDecodeArgs& a, const SparseMlaLaunchPlan& plan, CUstream stream) {
  if (a.rows == 0 || plan.num_splits < 1) return;
  const KernelSpec& spec = plan.spec;
  const int splits = plan.num_splits;
  const LoadedKernel& k = kernel(spec);
  // Both kernels are obtained before either launches: a combine that cannot be (strict mode, a
  // graph capture, a compile error) must not leave a split kernel queued with nothing to merge it.
  KernelSpec cspec;
  const LoadedKernel* ck = nullptr;
  if (splits > 1 && spec.tile.combine == MlaCombine::kernel) {
    cspec.family = Family::sparse_mla_combine;
    cspec = spec_for_current_device(cspec);
    ck = &kernel(cspec);
  }

  SparseMlaDecodeParams p{};
  p.q = static_cast<const unsigned short*>(a.q);
  if (a.kv_dtype == KvDtype::fp8_e4m3) {
    p.kv_fp8 = static_cast<const unsigned char*>(a.kv);
    p.page_size = a.page_size;
    p.kv_page_stride = a.kv_page_stride != 0 ? a.kv_page_stride : std::int64_t(a.page_size) * kFp8KvTokenBytes;
  } else {
    p.kv = static_cast<const unsigned short*>(a.kv);
    p.kv_row_stride = a.kv_row_stride;
    p.page_size = 1;
  }
  p.num_slots = a.num_slots;
  p.indices = a.indices;
  p.topk_length = a.topk_length;
  p.out = static_cast<unsigned short*>(a.out);
  p.lse = a.lse;
  p.max_logits = a.max_logits;
  p.attn_sink = a.attn_sink;
  p.sm_scale = a.sm_scale;
  p.rows = a.rows;
  const std::size_t heads = std::size_t(a.rows) * std::size_t(a.h_q);
  if (splits > 1 && spec.tile.combine == MlaCombine::kernel) {
    char* ws = static_cast<char*>(a.workspace);
    p.o_part = reinterpret_cast<float*>(ws);
    p.lse_part = reinterpret_cast<float*>(ws + std::size_t(splits) * heads * kMlaDimV * 4);
    p.max_part = p.lse_part + std::size_t(splits) * heads;
  }

  LaunchGeometry g;
  const unsigned groups = unsigned(a.h_q / spec.tile.heads_per_cta);
  const bool cluster_combine = spec.tile.combine == MlaCombine::cluster && splits > 1;
  if (spec.tile.kernel == MlaKernel::wgmma) {  // x = row * groups + group (a row's CTAs adjacent)
    g.grid_x = unsigned(a.rows) * groups;
    g.grid_y = 1;
  } else {
    g.grid_x = unsigned(a.rows);
    g.grid_y = groups;
  }
  g.grid_z = unsigned(splits);
  if (cluster_combine) {  // x = (row * groups + group) * splits + split: a row and head group's splits are one cluster
    g.grid_x *= unsigned(splits);
    g.grid_z = 1;
    g.cluster_x = unsigned(splits);
  }
  g.block = unsigned(spec.tile.threads);
  g.dynamic_smem = traits(spec.family).max_dynamic_smem(spec);
  // A cluster the device cannot hold (a MIG slice): the combine kernel instead.
  if (cluster_combine && resident_ctas(k, g) == 0) {
    SparseMlaLaunchPlan fallback = plan;
    fallback.spec.tile.combine = MlaCombine::kernel;
    launch_sparse_mla(a, fallback, stream);
    return;
  }
  launch(k, g, &p, stream);

  if (splits > 1 && !cluster_combine) {
    SparseMlaCombineParams c{};
    c.o_part = p.o_part;
    c.lse_part = p.lse_part;
    c.max_part = p.max_part;
    c.out = p.out;
    c.lse = p.lse;
    c.max_logits = p.max_logits;
    c.attn_sink = a.attn_sink;
    c.rows = a.rows;
    c.h_q = a.h_q;
    c.num_splits = splits;
    LaunchGeometry cg;
    cg.grid_x = unsigned(a.rows);
    cg.grid_y = unsigned(a.h_q);
    cg.block = unsigned(cspec.tile.threads);
    // The combine waits (griddepcontrol.wait) for the split kernel before reading its partials;
    // launched programmatically, it may launch once every split CTA has started (they trigger it
    // first thing, griddepcontrol.launch_dependents), so its launch overlaps the split kernel.
    // (templates/sparse_mla_combine.cuh waits under the same condition: __CUDA_ARCH__ >= 900.)
    cg.programmatic = cspec.arch.sm >= 90 && plan.programmatic_combine;
    launch(*ck, cg, &c, stream);
  }
}

}  // namespace detail

void sparse_mla_decode(const SparseMlaDecodeArgs& a, CUstream stream) {
  detail::launch_sparse_mla(a, detail::plan_sparse_mla(a), stream);
}

void sparse_mla_prefill(const SparseMlaDecodeArgs& a, CUstream stream) {
  constexpr const char* kPrefill = "nsajit::sparse_mla_prefill";
  if (a.next_n != 1)
    detail::throw_bad_argument(kPrefill, "next_n", std::to_string(a.next_n), "1 (prefill rows are single query tokens)");
  detail::launch_sparse_mla(a, detail::plan_sparse_mla(a, {}, kPrefill), stream);
}

}  // namespace nsajit
