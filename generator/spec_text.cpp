// spec_text.cpp — canonical text and readable names back to specs.
#include "nsajit/spec.hpp"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <vector>

#include "generator/family.hpp"
#include "nsajit/errors.hpp"

namespace nsajit {
namespace {

[[noreturn]] void bad(const std::string& text, std::string_view part, std::string_view expected) {
  throw InvalidArgument(fmt::format("spec \"{}\": \"{}\": expected {}", text, part, expected));
}

// Every registered family (the registry throws past the last one).
std::vector<Family> all_families() {
  std::vector<Family> out;
  for (int f = 0; f < 256; ++f) {
    try {
      traits(Family(f));
    } catch (const InvalidArgument&) {
      break;
    }
    out.push_back(Family(f));
  }
  return out;
}

std::string family_names() {
  std::string names;
  for (Family f : all_families()) names += (names.empty() ? "" : ", ") + to_string(f);
  return names;
}

Family parse_family(const std::string& text, std::string_view name) {
  for (Family f : all_families())
    if (to_string(f) == name) return f;
  bad(text, name, "a family: " + family_names());
}

int parse_int(const std::string& text, std::string_view part, std::string_view digits) {
  int v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty()) bad(text, part, "an integer");
  return v;
}

bool parse_flag(const std::string& text, std::string_view part, std::string_view digits) {
  const int v = parse_int(text, part, digits);
  if (v != 0 && v != 1) bad(text, part, "0 or 1");
  return v == 1;
}

// The value of `values` whose name (to_string) is v.
template <class Enum>
Enum parse_enum(const std::string& text, std::string_view v, std::initializer_list<Enum> values,
                std::string_view expected) {
  for (Enum e : values)
    if (to_string(e) == v) return e;
  bad(text, v, expected);
}

IndexMode parse_mode(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {IndexMode::decode, IndexMode::prefill, IndexMode::ragged}, "decode, prefill or ragged");
}
KvDtype parse_kv(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {KvDtype::bf16, KvDtype::fp8_e4m3}, "bf16 or fp8");
}
ScoreDtype parse_score_dtype(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {ScoreDtype::fp32, ScoreDtype::bf16}, "fp32 or bf16");
}
MlaKernel parse_kernel(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {MlaKernel::automatic, MlaKernel::mma_sync, MlaKernel::wgmma}, "automatic, mma_sync or wgmma");
}
MlaSchedule parse_schedule(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {MlaSchedule::single, MlaSchedule::seesaw}, "single or seesaw");
}

MlaCombine parse_combine(const std::string& text, std::string_view v) {
  return parse_enum(text, v, {MlaCombine::kernel, MlaCombine::cluster}, "kernel or cluster");
}

TopkAlgorithm parse_algorithm(const std::string& text, std::string_view v) {
  try {
    return parse_topk_algorithm(v);
  } catch (const InvalidArgument&) {
    bad(text, v, "exact_sweeps, cluster_sweeps, speculative_sweep, dense_registers or cluster_lists");
  }
}

bool is_algorithm_name(std::string_view v) {
  for (TopkAlgorithm a : {TopkAlgorithm::exact_sweeps, TopkAlgorithm::cluster_sweeps, TopkAlgorithm::speculative_sweep,
                          TopkAlgorithm::dense_registers, TopkAlgorithm::cluster_lists})
    if (to_string(a) == v) return true;
  return false;
}

Arch parse_arch_part(const std::string& text, std::string_view v) {
  try {
    return parse_arch(std::string(v));
  } catch (const InvalidArgument&) {
    bad(text, v, "an arch such as sm_90a");
  }
}

KernelSpec parse_canonical(const std::string& text, bool& names_arch) {
  KernelSpec s;
  bool has_family = false;
  std::set<std::string> seen;  // a field given twice is refused, not overwritten by its last value
  std::istringstream in(text);
  for (std::string field; in >> field;) {
    const std::size_t eq = field.find('=');
    if (eq == std::string::npos) bad(text, field, "key=value");
    const std::string key = field.substr(0, eq);
    const std::string_view v = std::string_view(field).substr(eq + 1);
    if (!seen.insert(key).second) bad(text, field, "each field once (" + key + " is given twice)");
    if (key == "family") s.family = parse_family(text, v), has_family = true;
    else if (key == "h_q") s.h_q = parse_int(text, field, v);
    else if (key == "topk") s.topk = parse_int(text, field, v);
    else if (key == "page_size") s.page_size = parse_int(text, field, v);
    else if (key == "mode") s.mode = parse_mode(text, v);
    else if (key == "kv_dtype") s.kv_dtype = parse_kv(text, v);
    else if (key == "next_n") s.next_n = parse_int(text, field, v);
    else if (key == "fused_transform") s.fused_transform = parse_flag(text, field, v);
    else if (key == "sorted") s.sorted = parse_flag(text, field, v);
    else if (key == "precise") s.precise = parse_flag(text, field, v);
    else if (key == "score_dtype") s.score_dtype = parse_score_dtype(text, v);
    else if (key == "threads") s.tile.threads = parse_int(text, field, v);
    else if (key == "block_tokens") s.tile.block_tokens = parse_int(text, field, v);
    else if (key == "heads_per_cta") s.tile.heads_per_cta = parse_int(text, field, v);
    else if (key == "kernel") s.tile.kernel = parse_kernel(text, v);
    else if (key == "producer_warps") s.tile.producer_warps = parse_int(text, field, v);
    else if (key == "algorithm") s.tile.algorithm = parse_algorithm(text, v);
    else if (key == "schedule") s.tile.schedule = parse_schedule(text, v);
    else if (key == "combine") s.tile.combine = parse_combine(text, v);
    else if (key == "arch") s.arch = parse_arch_part(text, v), names_arch = true;
    else
      bad(text, key,
          "a field of the canonical text: family, h_q, topk, page_size, mode, kv_dtype, next_n, fused_transform, "
          "sorted, precise, score_dtype, threads, block_tokens, heads_per_cta, kernel, producer_warps, algorithm, "
          "schedule, combine, arch");
  }
  if (!has_family) bad(text, text, "a family=<name> field");
  return s;
}

KernelSpec parse_readable(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t dot = text.find('.', pos);
    parts.push_back(text.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  if (parts.size() < 2) bad(text, text, "a readable name <family>.<fields>.<arch> or canonical text");
  KernelSpec s;
  s.family = parse_family(text, parts.front());
  s.arch = parse_arch_part(text, parts.back());
  for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
    const std::string_view p = parts[i];
    auto number_after = [&](std::string_view prefix) { return parse_int(text, p, p.substr(prefix.size())); };
    if (p == "fused") s.fused_transform = true;
    else if (p == "sorted") s.sorted = true;
    else if (p == "precise") s.precise = true;
    else if (p == "decode" || p == "prefill" || p == "ragged") s.mode = parse_mode(text, p);
    else if (is_algorithm_name(p)) s.tile.algorithm = parse_algorithm(text, p);
    else if (p.starts_with("kv_")) s.kv_dtype = parse_kv(text, p.substr(3));
    else if (p.starts_with("scores_")) s.score_dtype = parse_score_dtype(text, p.substr(7));
    else if (p.starts_with("topk")) s.topk = number_after("topk");
    else if (p.starts_with("ps")) s.page_size = number_after("ps");
    else if (p == "mma_sync" || p == "wgmma") s.tile.kernel = parse_kernel(text, p);
    else if (p == "seesaw") s.tile.schedule = MlaSchedule::seesaw;
    else if (p == "cluster_combine") s.tile.combine = MlaCombine::cluster;
    else if (p.starts_with("hpc")) s.tile.heads_per_cta = number_after("hpc");
    else if (p.starts_with("pw")) s.tile.producer_warps = number_after("pw");
    else if (p.starts_with("h")) s.h_q = number_after("h");
    else if (p.starts_with("n")) s.next_n = number_after("n");
    else if (p.starts_with("t")) {  // t<threads> or t<threads>x<block_tokens>x<heads_per_cta>
      const std::string_view tile = p.substr(1);
      const std::size_t x1 = tile.find('x');
      s.tile.threads = parse_int(text, p, tile.substr(0, x1));
      if (x1 != std::string_view::npos) {
        const std::size_t x2 = tile.find('x', x1 + 1);
        if (x2 == std::string_view::npos) bad(text, p, "t<threads> or t<threads>x<block_tokens>x<heads_per_cta>");
        s.tile.block_tokens = parse_int(text, p, tile.substr(x1 + 1, x2 - x1 - 1));
        s.tile.heads_per_cta = parse_int(text, p, tile.substr(x2 + 1));
      }
    } else {
      bad(text, p, "a part of a readable name (h<N>, topk<N>, kv_<bf16|fp8>, ps<N>, decode|prefill|ragged, fused, "
                   "n<N>, sorted, scores_<fp32|bf16>, mma_sync|wgmma, hpc<N>, pw<N>, precise, t<threads>[x<block_tokens>x<heads_per_cta>], "
                   "a top-k algorithm such as cluster_lists)");
    }
  }
  return s;
}

// The spec with its default tile, validated; a readable name must be the spec's own name.
KernelSpec finish(const std::string& text, bool canonical, KernelSpec spec) {
  spec = with_default_tile(spec);
  validate(spec);
  if (!canonical && readable_name(spec) != text)
    bad(text, text, fmt::format("a readable name as nsajit writes it (this spec's is {})", readable_name(spec)));
  return spec;
}

struct ParsedText {
  KernelSpec spec;
  bool canonical;   // canonical text (key=value fields), else a readable name
  bool names_arch;  // the text gave the arch (a readable name always ends in it)
};

ParsedText parse_fields(const std::string& text) {
  const bool canonical = text.find('=') != std::string::npos;
  bool names_arch = !canonical;
  KernelSpec spec = canonical ? parse_canonical(text, names_arch) : parse_readable(text);
  return {spec, canonical, names_arch};
}

}  // namespace

KernelSpec parse_spec_text(const std::string& text, const std::function<Arch()>& default_arch) {
  auto [spec, canonical, names_arch] = parse_fields(text);
  if (names_arch) return finish(text, canonical, spec);
  // Checked for sm_90a too, so that a bad field is named where default_arch cannot answer (no GPU);
  // that check's verdict is not the arch's own (e.g. kernel defaults differ), so it is kept aside.
  std::optional<std::string> sm90a_error;
  try {
    finish(text, canonical, spec);
  } catch (const InvalidArgument& e) {
    sm90a_error = e.what();
  }
  try {
    spec.arch = default_arch();
  } catch (const std::exception& e) {
    if (!sm90a_error) throw;
    throw InvalidArgument(fmt::format("{} (checked for sm_90a, as the text names no arch and none could be had: {})",
                                      *sm90a_error, e.what()));
  }
  return finish(text, canonical, spec);
}

KernelSpec parse_spec_text(const std::string& text, Arch default_arch) {
  auto [spec, canonical, names_arch] = parse_fields(text);
  if (!names_arch) spec.arch = default_arch;
  return finish(text, canonical, spec);
}

}  // namespace nsajit
