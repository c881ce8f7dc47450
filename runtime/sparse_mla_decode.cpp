// sparse_mla_decode.cpp — nsajit::sparse_mla_decode: argument checks, spec, launch.
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "generator/family.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/kernels.hpp"
#include "runtime/argument_checks.hpp"
#include "runtime/runtime.hpp"
#include "templates/kernel_params.h"

namespace nsajit {
namespace {

constexpr const char* kFn = "nsajit::sparse_mla_decode";

[[noreturn]] void bad(std::string_view name, std::string_view value, std::string_view expected) {
  detail::throw_bad_argument(kFn, name, value, expected);
}

std::string pointer_text(const void* p) {
  if (p == nullptr) return "null";
  std::ostringstream s;
  s << p;
  return s.str();
}

// Non-null and aligned for the kernel's accesses (16 bytes where it uses vector loads/stores).
void check_pointer(const char* name, const void* p, unsigned alignment) {
  detail::require_pointer(kFn, name, p);
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0)
    bad(name, pointer_text(p), "a " + std::to_string(alignment) + "-byte aligned device pointer");
}

// Everything is checked here, before any driver call, so a bad call never compiles or launches.
void check_args(const SparseMlaDecodeArgs& a) {
  if (a.rows < 0) bad("rows", std::to_string(a.rows), ">= 0");
  if (a.h_q != 8 && a.h_q != 16 && a.h_q != 32 && a.h_q != 64 && a.h_q != 128)
    bad("h_q", std::to_string(a.h_q), "one of 8, 16, 32, 64, 128");
  detail::require_topk(kFn, a.topk, 16384);
  if (!std::isfinite(a.sm_scale) || !(a.sm_scale > 0.f)) {
    std::ostringstream v;
    v << a.sm_scale;
    bad("sm_scale", v.str(), "finite and > 0");
  }
  if (a.kv_dtype != KvDtype::bf16)
    bad("kv_dtype", to_string(a.kv_dtype), "bf16 (" + to_string(a.kv_dtype) + " KV is not yet supported)");
  if (a.num_slots < 0) bad("num_slots", std::to_string(a.num_slots), ">= 0");
  // Rows are copied in 16-byte chunks: the stride keeps every row 16-byte aligned.
  if (a.kv_row_stride < 576 || a.kv_row_stride % 8 != 0)
    bad("kv_row_stride", std::to_string(a.kv_row_stride), "a multiple of 8 elements, >= 576");
  if (a.rows == 0) return;  // nothing is read or written
  check_pointer("q", a.q, 16);
  // With no slots every index is invalid and the pool is never read, so it may be null.
  if (a.num_slots > 0 || a.kv != nullptr) check_pointer("kv", a.kv, 16);
  check_pointer("indices", a.indices, 4);
  if (a.topk_length != nullptr && reinterpret_cast<std::uintptr_t>(a.topk_length) % 4 != 0)
    bad("topk_length", pointer_text(a.topk_length), "a 4-byte aligned device pointer or null");
  check_pointer("out", a.out, 16);
  check_pointer("lse", a.lse, 4);
}

}  // namespace

void sparse_mla_decode(const SparseMlaDecodeArgs& a, CUstream stream) {
  check_args(a);
  if (a.rows == 0) return;

  KernelSpec spec;
  spec.family = Family::sparse_mla_decode;
  spec.h_q = a.h_q;
  spec.topk = a.topk;
  spec.kv_dtype = a.kv_dtype;
  // next_n stays 1: rows are already flattened (b * next_n), and the kernel does not depend on
  // next_n, so every MTP depth shares one compiled kernel.
  spec = spec_for_current_device(spec);
  const LoadedKernel& k = kernel(spec);

  SparseMlaDecodeParams p{};
  p.q = static_cast<const unsigned short*>(a.q);
  p.kv = static_cast<const unsigned short*>(a.kv);
  p.num_slots = a.num_slots;
  p.kv_row_stride = a.kv_row_stride;
  p.indices = a.indices;
  p.topk_length = a.topk_length;
  p.out = static_cast<unsigned short*>(a.out);
  p.lse = a.lse;
  p.sm_scale = a.sm_scale;
  p.rows = a.rows;

  LaunchGeometry g;
  g.grid_x = unsigned(a.rows);
  g.grid_y = unsigned(a.h_q / spec.tile.heads_per_cta);
  g.block = unsigned(spec.tile.threads);
  g.dynamic_smem = traits(spec.family).max_dynamic_smem(spec);
  launch(k, g, &p, stream);
}

}  // namespace nsajit
