// model_config.hpp — the model/serving config `nsajit run` and `nsajit precompile` work from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nsajit/spec.hpp"

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

  int h_q() const { return num_attention_heads / tp; }
};

// Reads a JSON object whose keys are ModelConfig's field names. Throws InvalidArgument naming an
// unknown key, a value of the wrong type, or the file.
ModelConfig load_model_config(const std::string& path);

// Throws InvalidArgument naming the bad field, its value and what nsajit supports.
void validate_model_config(const ModelConfig& config);

// Every kernel a decode step of this config launches, for `arch`.
std::vector<KernelSpec> decode_step_specs(const ModelConfig& config, Arch arch);

}  // namespace nsajit::tools
