// sparse_mla_decode.cpp — nsajit::sparse_mla_decode: argument checks, spec, launch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#include "generator/family.hpp"
#include "generator/families/sparse_mla_kernels.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/driver.hpp"
#include "runtime/env.hpp"
#include "runtime/runtime.hpp"
#include "runtime/sparse_mla_launch.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

constexpr const char* kFn = "nsajit::sparse_mla_decode";

[[noreturn]] void bad(std::string_view name, std::string_view value, std::string_view expected) {
  detail::throw_bad_argument(kFn, name, value, expected);
}

void check_pointer(const char* name, const void* p, unsigned alignment) {
  detail::require_pointer(kFn, name, p, alignment);
}

constexpr int kMaxSplits = 64;

int heads_per_cta(int h_q) { return h_q < 64 ? h_q : 64; }

int g_threads_override = 0;  // detail::set_sparse_mla_threads_override

// NSAJIT_PDL=0 launches the split-KV combine as an ordinary kernel (no programmatic dependent
// launch), e.g. for a driver or a graph-capture setup that rejects PDL. Read once.
bool combine_pdl_allowed() {
  static const bool allowed = env::read(env::kPdl) != 0;
  return allowed;
}

// NSAJIT_MLA_WGMMA=1 selects the wgmma kernel (spec threads 384; FP8 at 64 heads per CTA: 512) for
// h_q >= 16 on sm_90a, =64 for h_q >= 64 only, =0 the mma.sync kernel (threads 256, so also without
// the producer warps) everywhere; unset (or invalid: warned once): the spec's default tile. Only the spec
// changes, so the source still depends on the spec alone.
// Returns -1 (default), 0 (mma.sync) or the smallest h_q given the wgmma kernel. Read once.
int kernel_choice() {
  static const int choice = [] {
    const std::int64_t v = env::read(env::kMlaWgmma);
    return v == 1 ? 16 : int(v);
  }();
  return choice;
}

// One CTA per SM (the tiles take ~150-227 KiB of shared memory). Split only when the CTAs of the
// batch leave most SMs idle; keep >= 2 tiles per split.
int auto_splits(long long rows, int h_q, int topk, int sms) {
  const long long ctas = rows * (h_q / heads_per_cta(h_q));
  if (ctas <= 0 || ctas * 4 > sms * 3) return 1;  // >= 3/4 of the SMs busy already
  const int max_by_tiles = std::max(1, topk / 64 / 2);
  return int(std::clamp<long long>(sms / ctas, 1, std::min(kMaxSplits, max_by_tiles)));
}

int resolve_splits(int rows, int h_q, int topk, int num_splits) {
  if (num_splits > 0) return std::min(num_splits, topk / 64);
  return auto_splits(rows, h_q, topk, driver::current_context_info().sm_count);
}

std::size_t workspace_for(int rows, int h_q, int splits) {
  if (splits <= 1) return 0;
  return std::size_t(splits) * std::size_t(rows) * std::size_t(h_q) * (512 + 2) * 4;
}

// Everything is checked here, before any driver call, so a bad call never compiles or launches.
void check_args(const SparseMlaDecodeArgs& a) {
  if (a.rows < 0) bad("rows", std::to_string(a.rows), ">= 0");
  // The wgmma kernel's grid x is rows * (h_q / 64) (CUDA allows 2^31 - 1).
  if (a.h_q == 128 && a.rows > 1073741823) bad("rows", std::to_string(a.rows), "<= 2^30 - 1 for h_q 128");
  if (a.h_q != 8 && a.h_q != 16 && a.h_q != 32 && a.h_q != 64 && a.h_q != 128)
    bad("h_q", std::to_string(a.h_q), "one of 8, 16, 32, 64, 128");
  detail::require_topk(kFn, a.topk, 16384);
  if (!std::isfinite(a.sm_scale) || !(a.sm_scale > 0.f)) {
    std::ostringstream v;
    v << a.sm_scale;
    bad("sm_scale", v.str(), "finite and > 0");
  }
  if (a.next_n < 1 || a.next_n > 8) bad("next_n", std::to_string(a.next_n), "1..8");
  if (a.rows % a.next_n != 0)
    bad("rows", std::to_string(a.rows), "a multiple of next_n (" + std::to_string(a.next_n) + ")");
  if (a.num_slots < 0) bad("num_slots", std::to_string(a.num_slots), ">= 0");
  if (a.kv_dtype == KvDtype::bf16) {
    // Rows are copied in 16-byte chunks: the stride keeps every row 16-byte aligned.
    if (a.kv_row_stride < 576 || a.kv_row_stride % 8 != 0)
      bad("kv_row_stride", std::to_string(a.kv_row_stride), "a multiple of 8 elements, >= 576");
  } else if (a.kv_dtype == KvDtype::fp8_e4m3) {
    if (a.page_size < 1) bad("page_size", std::to_string(a.page_size), ">= 1");
    if (a.kv_page_stride != 0 &&
        (a.kv_page_stride % 16 != 0 || a.kv_page_stride < std::int64_t(a.page_size) * 656))
      bad("kv_page_stride", std::to_string(a.kv_page_stride),
          "0 or a multiple of 16 bytes >= page_size * 656 (" + std::to_string(std::int64_t(a.page_size) * 656) + ")");
    if (a.num_slots % a.page_size != 0)
      bad("num_slots", std::to_string(a.num_slots),
          "num_pages * page_size (a multiple of page_size " + std::to_string(a.page_size) + ")");
  } else {
    bad("kv_dtype", to_string(a.kv_dtype), "bf16 or fp8");
  }
  if (a.num_splits < 0 || a.num_splits > kMaxSplits)
    bad("num_splits", std::to_string(a.num_splits), "0 (automatic) .. 64");
  if (a.workspace == nullptr && a.num_splits > 1)
    bad("num_splits", std::to_string(a.num_splits), "0 or 1 without a workspace");
  // A forced count resolves without the device (capped at the row's 64-token tiles).
  if (const int forced = std::min(a.num_splits, a.topk / 64);
      a.workspace != nullptr && forced > 1 && a.workspace_bytes < workspace_for(a.rows, a.h_q, forced))
    bad("workspace_bytes", std::to_string(a.workspace_bytes),
        ">= sparse_mla_workspace_bytes(...) = " + std::to_string(workspace_for(a.rows, a.h_q, forced)) + " for " +
            std::to_string(forced) + " splits");
  if (a.rows == 0) return;  // nothing is read or written
  check_pointer("q", a.q, 16);
  // With no slots every index is invalid and the pool is never read, so it may be null.
  if (a.num_slots > 0 || a.kv != nullptr) check_pointer("kv", a.kv, 16);
  check_pointer("indices", a.indices, 4);
  if (a.topk_length != nullptr && reinterpret_cast<std::uintptr_t>(a.topk_length) % 4 != 0)
    bad("topk_length", detail::pointer_text(a.topk_length), "a 4-byte aligned device pointer or null");
  check_pointer("out", a.out, 16);
  check_pointer("lse", a.lse, 4);
  if (a.max_logits != nullptr && reinterpret_cast<std::uintptr_t>(a.max_logits) % 4 != 0)
    bad("max_logits", detail::pointer_text(a.max_logits), "a 4-byte aligned device pointer or null");
  if (a.workspace != nullptr && reinterpret_cast<std::uintptr_t>(a.workspace) % 16 != 0)
    bad("workspace", detail::pointer_text(a.workspace), "a 16-byte aligned device pointer or null");
}

}  // namespace

namespace detail {
void set_sparse_mla_threads_override(int threads) { g_threads_override = threads; }
}  // namespace detail

int sparse_mla_num_splits(int rows, int h_q, int topk, int num_splits) {
  if (rows <= 0 || h_q <= 0 || topk < 64) return 1;
  return resolve_splits(rows, h_q, topk, num_splits);
}

std::size_t sparse_mla_workspace_bytes(int rows, int h_q, int topk, int num_splits) {
  if (rows <= 0 || h_q <= 0 || topk < 64) return 0;
  return workspace_for(rows, h_q, resolve_splits(rows, h_q, topk, num_splits));
}

void sparse_mla_decode(const SparseMlaDecodeArgs& a, CUstream stream) {
  check_args(a);
  if (a.rows == 0) return;

  // Forced split counts were checked against workspace_bytes above; an automatic one is lowered
  // to what the workspace holds (down to no split), never an error after a driver call.
  int splits = a.workspace == nullptr ? 1 : resolve_splits(a.rows, a.h_q, a.topk, a.num_splits);
  while (splits > 1 && a.workspace_bytes < workspace_for(a.rows, a.h_q, splits)) --splits;

  KernelSpec spec;
  spec.family = Family::sparse_mla_decode;
  spec.h_q = a.h_q;
  spec.topk = a.topk;
  spec.kv_dtype = a.kv_dtype;
  if (const int choice = kernel_choice(); choice == 0) {
    spec.tile.threads = 256;
  } else if (choice > 0 && a.h_q >= choice) {
    const driver::ContextInfo& device = driver::current_context_info();
    if (device.major == 9 && device.minor == 0)
      spec.tile.threads = sparse_mla_wgmma_threads(a.kv_dtype, heads_per_cta(a.h_q));
  }
  if (g_threads_override > 0) spec.tile.threads = g_threads_override;
  // next_n stays 1: rows are already flattened (b * next_n), and the kernel does not depend on
  // next_n, so every MTP depth shares one compiled kernel.
  spec = spec_for_current_device(spec);
  const LoadedKernel& k = kernel(spec);

  SparseMlaDecodeParams p{};
  p.q = static_cast<const unsigned short*>(a.q);
  if (a.kv_dtype == KvDtype::fp8_e4m3) {
    p.kv_fp8 = static_cast<const unsigned char*>(a.kv);
    p.page_size = a.page_size;
    p.kv_page_stride = a.kv_page_stride != 0 ? a.kv_page_stride : std::int64_t(a.page_size) * 656;
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
  p.sm_scale = a.sm_scale;
  p.rows = a.rows;
  const std::size_t heads = std::size_t(a.rows) * std::size_t(a.h_q);
  if (splits > 1) {
    char* ws = static_cast<char*>(a.workspace);
    p.o_part = reinterpret_cast<float*>(ws);
    p.lse_part = reinterpret_cast<float*>(ws + std::size_t(splits) * heads * 512 * 4);
    p.max_part = p.lse_part + std::size_t(splits) * heads;
  }

  LaunchGeometry g;
  const unsigned groups = unsigned(a.h_q / spec.tile.heads_per_cta);
  if (sparse_mla_uses_wgmma(spec)) {  // x = row * groups + group (a row's CTAs adjacent)
    g.grid_x = unsigned(a.rows) * groups;
    g.grid_y = 1;
  } else {
    g.grid_x = unsigned(a.rows);
    g.grid_y = groups;
  }
  g.grid_z = unsigned(splits);
  g.block = unsigned(spec.tile.threads);
  g.dynamic_smem = traits(spec.family).max_dynamic_smem(spec);
  launch(k, g, &p, stream);

  if (splits > 1) {
    KernelSpec cspec;
    cspec.family = Family::sparse_mla_combine;
    cspec = spec_for_current_device(cspec);
    const LoadedKernel& ck = kernel(cspec);
    SparseMlaCombineParams c{};
    c.o_part = p.o_part;
    c.lse_part = p.lse_part;
    c.max_part = p.max_part;
    c.out = p.out;
    c.lse = p.lse;
    c.max_logits = p.max_logits;
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
    cg.programmatic = cspec.arch.sm >= 90 && combine_pdl_allowed();
    launch(ck, cg, &c, stream);
  }
}

}  // namespace nsajit
