// family.hpp — what the generator and runtime need to know about one kernel family.
//
// Each family supplies one FamilyTraits in families/<family>/traits.cpp: its template, the
// compile-time constants a spec turns into, its defaults and checks, and its dynamic shared memory.
// Adding a family: the checklist in docs/ARCHITECTURE.md.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nsajit/spec.hpp"

namespace nsajit {

// A named compile-time constant of a generated source ("#define NSAJIT_<name> <value>").
using KernelConstant = std::pair<std::string, long long>;

// Spec fields beyond family/topk/threads/arch that a family reads. validate() requires every
// field a family does not use to keep its default, so equal kernels always have equal specs.
enum SpecField : unsigned {
  uses_h_q = 1u << 0,
  uses_page_size = 1u << 1,
  uses_mode = 1u << 2,
  uses_kv_dtype = 1u << 3,
  uses_next_n = 1u << 4,
  uses_block_tokens = 1u << 5,
  uses_heads_per_cta = 1u << 6,
  uses_fused_transform = 1u << 7,
  uses_sorted = 1u << 8,
  uses_kernel_variant = 1u << 9,  // tile.kernel and tile.producer_warps
  uses_precise = 1u << 10,
  uses_score_dtype = 1u << 11,
  uses_topk_algorithm = 1u << 12,  // tile.algorithm
  uses_mla_schedule = 1u << 13,    // tile.schedule
  uses_mla_combine = 1u << 14,     // tile.combine
};

struct FamilyTraits {
  Family family;
  unsigned used_fields;         // SpecField bits
  const char* name;             // "topk": spec text, readable names, template file stem
  const char* kernel_entry;     // extern "C" __global__ function of the template
  // The template file of the spec's kernel (e.g. "topk.cuh"); it #includes what it uses.
  std::string_view (*template_file)(const KernelSpec& spec);
  // Fills tile fields left at 0 with the family's defaults.
  void (*fill_default_tile)(KernelSpec& spec);
  // Throws InvalidArgument for a value of a used field (or topk/threads) the family does not
  // allow. Called after the generic checks, with the default tile filled.
  void (*validate)(const KernelSpec& spec);
  // The constants the template reads, in a fixed order.
  std::vector<KernelConstant> (*constants)(const KernelSpec& spec);
  // Readable name without the arch, e.g. "topk.topk2048".
  std::string (*readable_stem)(const KernelSpec& spec);
  // Largest dynamic shared memory any launch of this spec uses (set once per function).
  unsigned (*max_dynamic_smem)(const KernelSpec& spec);
};

const FamilyTraits& traits(Family family);

// Helper for validate(): throws InvalidArgument("<spec name>: field <field> = <value>: <expected>").
[[noreturn]] void throw_bad_field(const KernelSpec& spec, std::string_view field, long long value,
                                  std::string_view expected);
// The same for a field whose value has a name (an enum: "kernel = mma_sync"; "IndexMode(7)" past its names).
[[noreturn]] void throw_bad_field(const KernelSpec& spec, std::string_view field, std::string_view value,
                                  std::string_view expected);

// validate() helpers shared by families: topk a multiple of 64 in [64, max_topk]; topk at its
// default (a family that does not read it); threads one of 128, 256, 512, 1024.
void require_topk_multiple_of_64(const KernelSpec& spec, int max_topk);
void require_topk_unused(const KernelSpec& spec);
void require_threads_power_of_two(const KernelSpec& spec);

// fill_default_tile of a family whose only tile field is threads.
template <int Threads>
void default_threads(KernelSpec& spec) {
  if (spec.tile.threads == 0) spec.tile.threads = Threads;
}

// max_dynamic_smem of a family that uses none.
inline unsigned no_dynamic_smem(const KernelSpec&) { return 0; }

}  // namespace nsajit
