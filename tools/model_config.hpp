// model_config.hpp — the model/serving config `nsajit run` and `nsajit precompile` work from.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"
#include "runtime/tuning_db.hpp"

namespace nsajit::tools {

// Defaults are DeepSeek-V3.2 (nsa-semantics.md, "Model constants"); a JSON file overrides any key.
struct ModelConfig {
  std::string name = "DeepSeek-V3.2";
  int num_attention_heads = 128;
  int kv_lora_rank = 512;
  int qk_rope_head_dim = 64;
  int index_topk = 2048;
  int page_size = 64;
  double sm_scale = 0.13524;
  int tp = 1;  // attention tensor parallelism: h_q = num_attention_heads / tp
  // The synthetic decode batch of `nsajit run`.
  int batch = 64;
  int min_context = 1;
  int max_context = 65536;
  std::uint64_t seed = 1;
  int check_rows = 8;    // rows checked against the CPU reference
  int timed_iters = 50;  // timed launches per kernel (median reported)

  // Where each field's value came from when not the built-in default ("tp" -> "the flag --tp" or
  // "file config.json, key \"tp\""), so that errors name it.
  std::map<std::string, std::string> origins;

  int h_q() const { return num_attention_heads / tp; }
  // "the flag --tp", "file config.json, key \"tp\"" or "the built-in DeepSeek-V3.2 default".
  std::string origin(const std::string& field) const;
};

// Reads a JSON object whose keys are ModelConfig's field names, strictly: nothing but whitespace
// after the object, no key twice. Throws InvalidArgument naming the file and, where it applies, the
// line and key: a syntax error, trailing text, a duplicate or unknown key, a value of the wrong type.
ModelConfig load_model_config(const std::string& path);

// Throws InvalidArgument naming the bad field, its value, where the value came from and what
// nsajit supports.
void validate_model_config(const ModelConfig& config);

// The context lengths of `nsajit run`'s decode batch, before shuffling: `batch` values spread
// log-uniformly over [min_context, max_context], both ends included.
std::vector<int> decode_context_lengths(const ModelConfig& config);

// Host memory (bytes, an upper estimate) that `nsajit run`'s decode step allocates for the config:
// scores, page table, q, the bf16 KV pool and its FP8 copy, prefill inputs and downloads.
std::uint64_t run_host_bytes(const ModelConfig& config);

// Throws InvalidArgument naming the bytes run_host_bytes() needs when they exceed `available`.
void check_run_host_memory(const ModelConfig& config, std::uint64_t available);

// Every kernel a decode step of this config may launch on a device of `arch`: top-k in the tile its
// launch plan picks for the step's shape at any SM count (MIG slices too), and the choices of the
// tuning databases `dbs` (those the dispatcher may read) at the config's h_q and topk.
std::vector<KernelSpec> decode_step_specs(const ModelConfig& config, Arch arch,
                                          const std::vector<const tuning::TuningDb*>& dbs = {});

}  // namespace nsajit::tools
