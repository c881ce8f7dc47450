// spec.cpp — validation, canonical text and names of KernelSpec.
#include "nsajit/spec.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <iterator>

#include "generator/family.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {

std::string to_string(Family f) { return traits(f).name; }

namespace {
// The name of an enum value numbered 0, 1, ... in the order of `names`; "Type(value)" past them.
template <class Enum, std::size_t N>
std::string enum_name(Enum e, const char* type, const char* const (&names)[N]) {
  const auto i = static_cast<std::size_t>(e);
  return i < N ? std::string(names[i]) : fmt::format("{}({})", type, i);
}
}  // namespace

std::string to_string(IndexMode m) { return enum_name(m, "IndexMode", {"decode", "prefill", "ragged"}); }
std::string to_string(KvDtype d) { return enum_name(d, "KvDtype", {"bf16", "fp8"}); }
std::string to_string(ScoreDtype d) { return enum_name(d, "ScoreDtype", {"fp32", "bf16"}); }
std::string to_string(MlaKernel k) { return enum_name(k, "MlaKernel", {"automatic", "mma_sync", "wgmma"}); }
std::string to_string(MlaSchedule s) { return enum_name(s, "MlaSchedule", {"single", "seesaw"}); }
std::string to_string(MlaCombine c) { return enum_name(c, "MlaCombine", {"kernel", "cluster"}); }

namespace {
constexpr const char* kTopkAlgorithmNames[] = {"exact_sweeps", "cluster_sweeps", "speculative_sweep",
                                               "dense_registers", "cluster_lists"};
}  // namespace

std::string to_string(TopkAlgorithm a) { return enum_name(a, "TopkAlgorithm", kTopkAlgorithmNames); }

TopkAlgorithm parse_topk_algorithm(std::string_view text) {
  for (std::size_t i = 0; i < std::size(kTopkAlgorithmNames); ++i)
    if (text == kTopkAlgorithmNames[i]) return TopkAlgorithm(i);
  throw InvalidArgument(fmt::format("top-k algorithm \"{}\": expected {}", text,
                                    fmt::join(kTopkAlgorithmNames, ", ")));
}

std::string to_string(Arch a) {
  return a.suffix ? fmt::format("sm_{}{}", a.sm, a.suffix) : fmt::format("sm_{}", a.sm);
}

Arch parse_arch(const std::string& text) {
  std::string t = text.rfind("sm_", 0) == 0 ? text.substr(3) : text;
  Arch a{0, 0};
  std::size_t i = 0;
  // Saturate instead of wrapping: "sm_4294967386" must not read as sm_90.
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') a.sm = std::min(a.sm * 10 + (t[i++] - '0'), 100000);
  if (i < t.size() && (t[i] == 'a' || t[i] == 'f')) a.suffix = t[i++];
  if (i == 0 || i != t.size() || a.sm < 90 || a.sm > 199)
    throw InvalidArgument(fmt::format("arch = \"{}\": expected sm_<90..199> (Hopper or newer: the kernels use "
                                      "thread-block clusters and bulk copies) with an optional 'a' or 'f' "
                                      "suffix, e.g. sm_90a",
                                      text));
  return a;
}

KernelSpec with_default_tile(KernelSpec spec) {
  traits(spec.family).fill_default_tile(spec);
  return spec;
}

void throw_bad_field(const KernelSpec& spec, std::string_view field, std::string_view value,
                     std::string_view expected) {
  throw InvalidArgument(fmt::format("kernel spec {}: field {} = {}: expected {}", to_string(spec.family),
                                    field, value, expected));
}

void throw_bad_field(const KernelSpec& spec, std::string_view field, long long value,
                     std::string_view expected) {
  throw_bad_field(spec, field, std::string_view(std::to_string(value)), expected);
}

void require_topk_multiple_of_64(const KernelSpec& spec, int max_topk) {
  if (spec.topk < 64 || spec.topk > max_topk || spec.topk % 64 != 0)
    throw_bad_field(spec, "topk", spec.topk, fmt::format("a multiple of 64 in [64, {}]", max_topk));
}

void require_topk_unused(const KernelSpec& spec) {
  if (spec.topk != KernelSpec{}.topk)
    throw_bad_field(spec, "topk", spec.topk,
                    fmt::format("{} (the {} family does not use it)", KernelSpec{}.topk, to_string(spec.family)));
}

void require_threads_power_of_two(const KernelSpec& spec) {
  const int t = spec.tile.threads;
  if (t != 128 && t != 256 && t != 512 && t != 1024) throw_bad_field(spec, "threads", t, "one of 128, 256, 512, 1024");
}

void validate(const KernelSpec& spec) {
  const FamilyTraits& t = traits(spec.family);  // throws for an unknown family
  const KernelSpec defaults{};
  // Fields the family does not read must keep their defaults: one kernel, one spec, one cache entry.
  auto unused = [&](unsigned bit, std::string_view field, long long value, long long default_value) {
    if (!(t.used_fields & bit) && value != default_value)
      throw_bad_field(spec, field, value, fmt::format("{} (the {} family does not use it)", default_value, t.name));
  };
  unused(uses_h_q, "h_q", spec.h_q, defaults.h_q);
  unused(uses_page_size, "page_size", spec.page_size, defaults.page_size);
  unused(uses_mode, "mode", int(spec.mode), int(defaults.mode));
  unused(uses_kv_dtype, "kv_dtype", int(spec.kv_dtype), int(defaults.kv_dtype));
  unused(uses_next_n, "next_n", spec.next_n, defaults.next_n);
  unused(uses_block_tokens, "block_tokens", spec.tile.block_tokens, defaults.tile.block_tokens);
  unused(uses_heads_per_cta, "heads_per_cta", spec.tile.heads_per_cta, defaults.tile.heads_per_cta);
  unused(uses_kernel_variant, "kernel", int(spec.tile.kernel), int(defaults.tile.kernel));
  unused(uses_kernel_variant, "producer_warps", spec.tile.producer_warps, defaults.tile.producer_warps);
  unused(uses_topk_algorithm, "algorithm", int(spec.tile.algorithm), int(defaults.tile.algorithm));
  unused(uses_mla_schedule, "schedule", int(spec.tile.schedule), int(defaults.tile.schedule));
  if (int(spec.tile.schedule) > int(MlaSchedule::seesaw))
    throw_bad_field(spec, "schedule", int(spec.tile.schedule), "single (0) or seesaw (1)");
  unused(uses_mla_combine, "combine", int(spec.tile.combine), int(defaults.tile.combine));
  if (int(spec.tile.combine) > int(MlaCombine::cluster))
    throw_bad_field(spec, "combine", int(spec.tile.combine), "kernel (0) or cluster (1)");
  if (int(spec.tile.algorithm) >= int(std::size(kTopkAlgorithmNames)))
    throw_bad_field(spec, "algorithm", int(spec.tile.algorithm),
                    fmt::format("{} (0..{})", fmt::join(kTopkAlgorithmNames, ", "), std::size(kTopkAlgorithmNames) - 1));
  unused(uses_fused_transform, "fused_transform", spec.fused_transform, defaults.fused_transform);
  unused(uses_sorted, "sorted", spec.sorted, defaults.sorted);
  unused(uses_precise, "precise", spec.precise, defaults.precise);
  unused(uses_score_dtype, "score_dtype", int(spec.score_dtype), int(defaults.score_dtype));
  if (spec.score_dtype != ScoreDtype::fp32 && spec.score_dtype != ScoreDtype::bf16)
    throw_bad_field(spec, "score_dtype", int(spec.score_dtype), "fp32 (0) or bf16 (1)");
  if (spec.tile.producer_warps < -1 || spec.tile.producer_warps > 24)  // before threads, which follows from it
    throw_bad_field(spec, "producer_warps", spec.tile.producer_warps, "-1 (default) or a count in [0, 24]");
  if (spec.tile.threads <= 0 || spec.tile.threads > 1024 || spec.tile.threads % 32 != 0)
    throw_bad_field(spec, "threads", spec.tile.threads, "a multiple of 32 in [32, 1024]");
  if (spec.arch.sm < 90 || spec.arch.sm > 199)
    throw_bad_field(spec, "arch.sm", spec.arch.sm,
                    "a compute capability in [90, 199] (Hopper or newer: the kernels use thread-block "
                    "clusters and bulk copies)");
  if (spec.arch.suffix != 0 && spec.arch.suffix != 'a' && spec.arch.suffix != 'f')
    throw_bad_field(spec, "arch.suffix", spec.arch.suffix, "none, 'a' or 'f'");
  t.validate(spec);
}

std::string canonical_text(const KernelSpec& s) {
  return fmt::format(
      "family={} h_q={} topk={} page_size={} mode={} kv_dtype={} next_n={} fused_transform={} sorted={} "
      "precise={} score_dtype={} threads={} block_tokens={} heads_per_cta={} kernel={} producer_warps={} "
      "algorithm={} schedule={} combine={} arch={}",
      to_string(s.family), s.h_q, s.topk, s.page_size, to_string(s.mode), to_string(s.kv_dtype),
      s.next_n, int(s.fused_transform), int(s.sorted), int(s.precise), to_string(s.score_dtype), s.tile.threads,
      s.tile.block_tokens, s.tile.heads_per_cta, to_string(s.tile.kernel), s.tile.producer_warps,
      to_string(s.tile.algorithm), to_string(s.tile.schedule), to_string(s.tile.combine),
      to_string(s.arch));
}

std::string readable_name(const KernelSpec& spec) {
  const KernelSpec s = with_default_tile(spec);
  const FamilyTraits& t = traits(s.family);
  std::string name = t.readable_stem(s);
  // A family with named variants names them in its stem; elsewhere a non-default tile is part of
  // the kernel's identity and defaults stay out of the name.
  if (t.used_fields & uses_kernel_variant) return name + "." + to_string(s.arch);
  KernelSpec base;
  base.family = s.family;
  base.h_q = s.h_q;
  base.kv_dtype = s.kv_dtype;
  base.arch = s.arch;
  const KernelSpec d = with_default_tile(base);
  if (s.tile.threads != d.tile.threads || s.tile.block_tokens != d.tile.block_tokens ||
      s.tile.heads_per_cta != d.tile.heads_per_cta) {
    name += fmt::format(".t{}", s.tile.threads);
    if (s.tile.block_tokens || s.tile.heads_per_cta)
      name += fmt::format("x{}x{}", s.tile.block_tokens, s.tile.heads_per_cta);
  }
  if (s.tile.algorithm != d.tile.algorithm) name += fmt::format(".{}", to_string(s.tile.algorithm));
  return name + "." + to_string(s.arch);
}

std::size_t KernelSpecHash::operator()(const KernelSpec& s) const noexcept {
  // Every field folded in; boost-style combine is plenty for a map of a few hundred specs.
  std::size_t h = 0;
  auto mix = [&h](long long v) { h ^= std::hash<long long>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(int(s.family));
  mix(s.h_q);
  mix(s.topk);
  mix(s.page_size);
  mix(int(s.mode));
  mix(int(s.kv_dtype));
  mix(s.next_n);
  mix(s.fused_transform);
  mix(s.sorted);
  mix(s.precise);
  mix(int(s.score_dtype));
  mix(s.tile.threads);
  mix(s.tile.block_tokens);
  mix(s.tile.heads_per_cta);
  mix(int(s.tile.kernel));
  mix(s.tile.producer_warps);
  mix(int(s.tile.algorithm));
  mix(int(s.tile.schedule));
  mix(int(s.tile.combine));
  mix(s.arch.sm);
  mix(s.arch.suffix);
  return h;
}

}  // namespace nsajit
