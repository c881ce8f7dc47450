// model_config.cpp — JSON config loading and the specs a config needs.
#include "tools/model_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "families/sparse_mla/heuristics.hpp"
#include "families/topk/heuristics.hpp"
#include "nsajit/errors.hpp"
#include "runtime/json_text.hpp"
#include "runtime/small_file.hpp"
#include "tools/tuning_config.hpp"

namespace nsajit::tools {
namespace {

// Reads j[key] into field if present, strictly: integers must be JSON integers in the field's
// range (no 2.5 -> 2, no true -> 1, no wrap-around), numbers must be numbers, names strings.
template <class T>
void read_field(const nlohmann::json& j, const char* key, T& field, ModelConfig& c, const std::string& path) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  auto wrong = [&](const std::string& expected) {
    throw InvalidArgument(fmt::format("--config {}: key \"{}\" = {}: expected {}", path, key, dump_json(v), expected));
  };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) wrong("a string");
    field = v.get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) wrong("a number");
    field = v.get<T>();
  } else {
    static_assert(std::is_integral_v<T>);
    if (!v.is_number_integer()) wrong("an integer");
    const auto out_of_type = [] {
      return fmt::format("an integer its type holds ([{}, {}]; the field's own bounds are checked after)",
                         std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    };
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > std::uint64_t(std::numeric_limits<T>::max())) wrong(out_of_type());
      field = T(u);
    } else {
      const auto i = v.get<std::int64_t>();
      if (i < std::int64_t(std::numeric_limits<T>::min()) ||
          (i > 0 && std::uint64_t(i) > std::uint64_t(std::numeric_limits<T>::max())))
        wrong(out_of_type());
      field = T(i);
    }
  }
  c.origins[key] = fmt::format("file {}, key \"{}\"", path, key);
}

}  // namespace

std::string ModelConfig::origin(const std::string& field) const {
  const auto it = origins.find(field);
  return it != origins.end() ? it->second : "the built-in DeepSeek-V3.2 default";
}

ModelConfig load_model_config(const std::string& path) {
  const std::string text = read_small_file(path, "--config " + path);
  const nlohmann::json j = parse_json_strict(text, "--config " + path);
  if (!j.is_object()) throw InvalidArgument(fmt::format("--config {}: expected a JSON object", path));
  static const char* const known[] = {"name", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim",
                                      "index_topk", "page_size", "sm_scale", "tp", "batch", "min_context",
                                      "max_context", "seed", "check_rows", "timed_iters"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) {
      // The config is one flat object: the key is written where `"key"` is followed by a colon.
      const std::string quoted = dump_json(key);
      std::size_t at = text.find(quoted);
      while (at != std::string::npos) {
        const std::size_t next = text.find_first_not_of(" \t\r\n", at + quoted.size());
        if (next != std::string::npos && text[next] == ':') break;
        at = text.find(quoted, at + 1);
      }
      const std::string line =
          at == std::string::npos ? "" : fmt::format("line {}: ", 1 + std::count(text.begin(), text.begin() + at, '\n'));
      throw InvalidArgument(fmt::format("--config {}: {}unknown key \"{}\" (expected one of {})", path, line, key,
                                        fmt::join(known, ", ")));
    }
  }
  ModelConfig c;
  c.name = path;  // a config without "name" is labelled by its file, not as the built-in default
  read_field(j, "name", c.name, c, path);
  read_field(j, "num_attention_heads", c.num_attention_heads, c, path);
  read_field(j, "kv_lora_rank", c.kv_lora_rank, c, path);
  read_field(j, "qk_rope_head_dim", c.qk_rope_head_dim, c, path);
  read_field(j, "index_topk", c.index_topk, c, path);
  read_field(j, "page_size", c.page_size, c, path);
  read_field(j, "sm_scale", c.sm_scale, c, path);
  read_field(j, "tp", c.tp, c, path);
  read_field(j, "batch", c.batch, c, path);
  read_field(j, "min_context", c.min_context, c, path);
  read_field(j, "max_context", c.max_context, c, path);
  read_field(j, "seed", c.seed, c, path);
  read_field(j, "check_rows", c.check_rows, c, path);
  read_field(j, "timed_iters", c.timed_iters, c, path);
  return c;
}

void validate_model_config(const ModelConfig& c) {
  auto bad = [&](const char* field, auto value, std::string_view expected) {
    throw InvalidArgument(fmt::format("{} = {} (from {}): expected {}", field, value, c.origin(field), expected));
  };
  if (c.kv_lora_rank != 512) bad("kv_lora_rank", c.kv_lora_rank, "512 (d_qk = 576 kernels)");
  if (c.qk_rope_head_dim != 64) bad("qk_rope_head_dim", c.qk_rope_head_dim, "64 (d_qk = 576 kernels)");
  if (c.num_attention_heads < 1) bad("num_attention_heads", c.num_attention_heads, ">= 1");
  if (c.tp < 1 || c.num_attention_heads % c.tp != 0)
    bad("tp", c.tp,
        fmt::format("a divisor of num_attention_heads ({}, from {})", c.num_attention_heads,
                    c.origin("num_attention_heads")));
  if (c.h_q() != 8 && c.h_q() != 16 && c.h_q() != 32 && c.h_q() != 64 && c.h_q() != 128)
    throw InvalidArgument(fmt::format("h_q = num_attention_heads / tp = {} / {} = {} (num_attention_heads from {}, "
                                      "tp from {}): expected one of 8, 16, 32, 64, 128",
                                      c.num_attention_heads, c.tp, c.h_q(), c.origin("num_attention_heads"),
                                      c.origin("tp")));
  if (c.index_topk < 64 || c.index_topk > 4096 || c.index_topk % 64 != 0)
    bad("index_topk", c.index_topk, "a multiple of 64 in [64, 4096]");
  if (c.page_size < 1 || c.page_size > 4096) bad("page_size", c.page_size, "in [1, 4096]");
  if (!(c.sm_scale > 0)) bad("sm_scale", c.sm_scale, "> 0");
  if (c.batch < 1 || c.batch > 4096) bad("batch", c.batch, "in [1, 4096]");
  if (c.min_context < 1) bad("min_context", c.min_context, ">= 1");
  if (c.max_context < c.min_context || c.max_context > (1 << 20))
    bad("max_context", c.max_context,
        fmt::format("in [min_context ({}, from {}), 2^20]", c.min_context, c.origin("min_context")));
  if (c.check_rows < 1) bad("check_rows", c.check_rows, ">= 1");
  if (c.timed_iters < 1) bad("timed_iters", c.timed_iters, ">= 1");
}

std::vector<int> decode_context_lengths(const ModelConfig& c) {
  std::vector<int> lengths(std::size_t(c.batch));
  for (int i = 0; i < c.batch; ++i) {
    const double f = c.batch == 1 ? 1.0 : double(i) / (c.batch - 1);
    lengths[std::size_t(i)] = int(std::lround(c.min_context * std::pow(double(c.max_context) / c.min_context, f)));
  }
  return lengths;
}

std::uint64_t run_host_bytes(const ModelConfig& c) {
  constexpr std::uint64_t kTokenBf16 = 576 * 2, kTokenFp8 = 656, kOutRow = 512 * 2;
  const std::uint64_t b = std::uint64_t(c.batch), h_q = std::uint64_t(c.h_q()), topk = std::uint64_t(c.index_topk);
  const std::uint64_t page = std::uint64_t(c.page_size);
  std::uint64_t pages = 0, longest = 0;
  for (int len : decode_context_lengths(c)) {
    pages += (std::uint64_t(len) + page - 1) / page;
    longest = std::max<std::uint64_t>(longest, std::uint64_t(len));
  }
  const std::uint64_t slots = pages * page;
  const std::uint64_t max_pages = (std::uint64_t(c.max_context) + page - 1) / page;
  const std::uint64_t prefill_rows = std::min<std::uint64_t>(4096, longest);
  const std::uint64_t rows = std::max(b, prefill_rows);
  return b * std::uint64_t(c.max_context) * 4                 // scores
         + b * max_pages * 4 + pages * 4                      // page table, page pool
         + b * h_q * kTokenBf16 + prefill_rows * h_q * kTokenBf16  // q (decode, prefill)
         + slots * (2 * kTokenBf16 + 2 * kTokenFp8 + 4)       // bf16 KV, its dequantized copy, FP8 cache x2, slot ids
         + (2 * b + prefill_rows) * topk * 4 + longest * 4    // indices, slots, prefill indices and permutation
         + rows * h_q * (kOutRow + 4);                        // downloaded outputs and lse
}

void check_run_host_memory(const ModelConfig& c, std::uint64_t available) {
  const std::uint64_t needed = run_host_bytes(c);
  if (needed <= available) return;
  throw InvalidArgument(fmt::format(
      "config {}: nsajit run needs about {} bytes ({:.1f} GiB) of host memory for its decode batch (batch {} from "
      "{}, contexts up to max_context {} from {}), more than this machine's {} bytes ({:.1f} GiB); lower batch or "
      "max_context",
      c.name, needed, double(needed) / double(1ull << 30), c.batch, c.origin("batch"), c.max_context,
      c.origin("max_context"), available, double(available) / double(1ull << 30)));
}

std::vector<KernelSpec> decode_step_specs(const ModelConfig& c, Arch arch,
                                          const std::vector<const tuning::TuningDb*>& dbs) {
  // What `nsajit run` launches: top-k, the paged transform, the FP8 cache writer, and sparse MLA
  // over bf16 and FP8 KV (decode and prefill rows share one kernel per layout). Top-k's kernel
  // follows its launch plan for the run's batch (batch rows of max_context scores,
  // tools/decode_step.cpp) on whatever part runs it: every SM count up to 256, since a MIG slice
  // has fewer than the arch's listed parts.
  std::vector<KernelSpec> specs = {
      {.family = Family::index_transform, .topk = c.index_topk, .page_size = c.page_size, .mode = IndexMode::decode},
      {.family = Family::fp8_kv_quantize, .page_size = c.page_size},
      {.family = Family::sparse_mla, .h_q = c.h_q(), .topk = c.index_topk},
      {.family = Family::sparse_mla, .h_q = c.h_q(), .topk = c.index_topk, .kv_dtype = KvDtype::fp8_e4m3},
  };
  std::vector<int> any_sm_count(256);
  std::iota(any_sm_count.begin(), any_sm_count.end(), 1);
  for (const detail::TopkTileChoice& t :
       detail::topk_tile_choices(c.index_topk, {ScoreDtype::fp32}, any_sm_count, {}, c.batch, c.batch,
                                 c.max_context, c.max_context))
    specs.push_back({.family = Family::topk, .topk = c.index_topk, .tile = t.tile});
  for (KernelSpec& s : specs) {
    s.arch = arch;
    s = with_default_tile(s);
  }
  // The run's sparse MLA calls are batch-invariant (no workspace): the heuristics' variant (no
  // tuning database) with the dispatcher's schedule.
  specs[2].tile.schedule = sparse_mla::default_schedule(specs[2]);
  // The tuning databases' choices this run can dispatch: top-k's tile for its shape on the
  // database's GPU.
  auto add = [&](const KernelSpec& s) {
    if (std::find(specs.begin(), specs.end(), s) == specs.end()) specs.push_back(s);
  };
  for (const tuning::TuningDb* db : dbs) {
    const detail::TopkTuningEntry* e =
        detail::find_topk_entry(db->topk, c.batch, c.max_context, c.index_topk, ScoreDtype::fp32);
    if (db->key.arch != to_string(arch) || e == nullptr) continue;
    for (const detail::TopkTileChoice& t :
         detail::topk_tile_choices(c.index_topk, {ScoreDtype::fp32}, {db->key.sm_count}, e->choice, c.batch, c.batch,
                                   c.max_context, c.max_context))
      add(with_default_tile({.family = Family::topk, .topk = c.index_topk, .tile = t.tile, .arch = arch}));
  }
  return specs;
}

}  // namespace nsajit::tools
