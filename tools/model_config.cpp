// model_config.cpp — JSON config loading and the specs a config needs.
#include "tools/model_config.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "nsajit/errors.hpp"

namespace nsajit::tools {
namespace {

// Reads j[key] into field if present, strictly: integers must be JSON integers in the field's
// range (no 2.5 -> 2, no true -> 1, no wrap-around), numbers must be numbers, names strings.
template <class T>
void read_field(const nlohmann::json& j, const char* key, T& field, const std::string& path) {
  if (!j.contains(key)) return;
  const nlohmann::json& v = j.at(key);
  auto wrong = [&](const char* expected) {
    throw InvalidArgument(fmt::format("config {}: key \"{}\" = {}: expected {}", path, key, v.dump(), expected));
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
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > std::uint64_t(std::numeric_limits<T>::max())) wrong("an integer in the field's range");
      field = T(u);
    } else {
      const auto i = v.get<std::int64_t>();
      if (i < std::int64_t(std::numeric_limits<T>::min()) ||
          (i > 0 && std::uint64_t(i) > std::uint64_t(std::numeric_limits<T>::max())))
        wrong("an integer in the field's range");
      field = T(i);
    }
  }
}

}  // namespace

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("--config {}: cannot open the file", path));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("--config {}: not valid JSON ({})", path, e.what()));
  }
  if (!j.is_object()) throw InvalidArgument(fmt::format("--config {}: expected a JSON object", path));
  static const char* const known[] = {"name", "num_attention_heads", "kv_lora_rank", "qk_rope_head_dim",
                                      "index_topk", "page_size", "sm_scale", "tp", "batch", "min_context",
                                      "max_context", "seed", "check_rows", "timed_iters"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) throw InvalidArgument(fmt::format("config {}: unknown key \"{}\"", path, key));
  }
  ModelConfig c;
  c.name = path;  // a config without "name" is labelled by its file, not as the built-in default
  read_field(j, "name", c.name, path);
  read_field(j, "num_attention_heads", c.num_attention_heads, path);
  read_field(j, "kv_lora_rank", c.kv_lora_rank, path);
  read_field(j, "qk_rope_head_dim", c.qk_rope_head_dim, path);
  read_field(j, "index_topk", c.index_topk, path);
  read_field(j, "page_size", c.page_size, path);
  read_field(j, "sm_scale", c.sm_scale, path);
  read_field(j, "tp", c.tp, path);
  read_field(j, "batch", c.batch, path);
  read_field(j, "min_context", c.min_context, path);
  read_field(j, "max_context", c.max_context, path);
  read_field(j, "seed", c.seed, path);
  read_field(j, "check_rows", c.check_rows, path);
  read_field(j, "timed_iters", c.timed_iters, path);
  return c;
}

void validate_model_config(const ModelConfig& c) {
  auto bad = [](const char* field, auto value, std::string_view expected) {
    throw InvalidArgument(fmt::format("config: {} = {}: expected {}", field, value, expected));
  };
  if (c.kv_lora_rank != 512) bad("kv_lora_rank", c.kv_lora_rank, "512 (d_qk = 576 kernels)");
  if (c.qk_rope_head_dim != 64) bad("qk_rope_head_dim", c.qk_rope_head_dim, "64 (d_qk = 576 kernels)");
  if (c.num_attention_heads < 1) bad("num_attention_heads", c.num_attention_heads, ">= 1");
  if (c.tp < 1 || c.num_attention_heads % c.tp != 0)
    bad("tp", c.tp, fmt::format("a divisor of num_attention_heads ({})", c.num_attention_heads));
  if (c.h_q() != 8 && c.h_q() != 16 && c.h_q() != 32 && c.h_q() != 64 && c.h_q() != 128)
    bad("num_attention_heads / tp", c.h_q(), "one of 8, 16, 32, 64, 128");
  if (c.index_topk < 64 || c.index_topk > 4096 || c.index_topk % 64 != 0)
    bad("index_topk", c.index_topk, "a multiple of 64 in [64, 4096]");
  if (c.page_size < 1 || c.page_size > 4096) bad("page_size", c.page_size, "in [1, 4096]");
  if (!(c.sm_scale > 0)) bad("sm_scale", c.sm_scale, "> 0");
  if (c.batch < 1 || c.batch > 4096) bad("batch", c.batch, "in [1, 4096]");
  if (c.min_context < 1) bad("min_context", c.min_context, ">= 1");
  if (c.max_context < c.min_context || c.max_context > (1 << 20))
    bad("max_context", c.max_context, fmt::format("in [min_context ({}), 2^20]", c.min_context));
  if (c.check_rows < 1) bad("check_rows", c.check_rows, ">= 1");
  if (c.timed_iters < 1) bad("timed_iters", c.timed_iters, ">= 1");
}

std::vector<KernelSpec> decode_step_specs(const ModelConfig& c, Arch arch) {
  // What `nsajit run` launches: top-k, the paged transform, the FP8 cache writer, and sparse MLA
  // over bf16 and FP8 KV (decode and prefill rows share one kernel per layout). Top-k's thread
  // count follows its launch plan (rows and width, families/topk/heuristics.cpp), so every count it can pick
  // is compiled.
  std::vector<KernelSpec> specs = {
      {.family = Family::topk, .topk = c.index_topk, .tile = {.threads = 256}},
      {.family = Family::topk, .topk = c.index_topk},
      {.family = Family::topk, .topk = c.index_topk, .tile = {.threads = 1024}},
      {.family = Family::index_transform, .topk = c.index_topk, .page_size = c.page_size, .mode = IndexMode::decode},
      {.family = Family::fp8_kv_quantize, .page_size = c.page_size},
      {.family = Family::sparse_mla_decode, .h_q = c.h_q(), .topk = c.index_topk},
      {.family = Family::sparse_mla_decode, .h_q = c.h_q(), .topk = c.index_topk, .kv_dtype = KvDtype::fp8_e4m3},
  };
  for (KernelSpec& s : specs) {
    s.arch = arch;
    s = with_default_tile(s);
  }
  return specs;
}

}  // namespace nsajit::tools
