// transform_fields.hpp — the §1 transform fields of a spec and its device code
// (templates/kv_slot_transform.cuh), shared by the index_transform family
// and the fused top-k (both generate the same transform code from them).
#pragma once

#include <string>
#include <string_view>

#include "generator/family.hpp"

namespace nsajit {

// mode decode, prefill or ragged; page_size in [1, 4096], and 1 for ragged (no page table, so
// one kernel per topk whatever page size the caller uses).
inline void validate_transform_fields(const KernelSpec& spec) {
  if (spec.mode != IndexMode::decode && spec.mode != IndexMode::prefill && spec.mode != IndexMode::ragged)
    throw_bad_field(spec, "mode", static_cast<long long>(spec.mode), "decode, prefill or ragged");
  if (spec.page_size < 1 || spec.page_size > 4096)
    throw_bad_field(spec, "page_size", spec.page_size, "an integer in [1, 4096]");
  if (spec.mode == IndexMode::ragged && spec.page_size != 1)
    throw_bad_field(spec, "page_size", spec.page_size, "1 for mode ragged (no page table)");
}

// NSAJIT_MODE of the transform code: 0 decode, 1 prefill, 2 ragged.
inline long long transform_mode_constant(IndexMode mode) {
  switch (mode) {
    case IndexMode::decode: return 0;
    case IndexMode::prefill: return 1;
    case IndexMode::ragged: return 2;
  }
  return 0;
}

}  // namespace nsajit
