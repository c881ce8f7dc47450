// sparse_mla.hpp — fp64 CPU reference of sparse MLA attention (nsa-semantics.md §3) and the
// spec's tolerance check.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace nsajit::reference {

inline constexpr int kMlaDimQK = 576;  // 512 latent + 64 rope
inline constexpr int kMlaDimV = 512;

struct SparseMlaInput {
  std::span<const std::uint16_t> q;      // bf16 bits [rows, h_q, 576]
  std::span<const std::uint16_t> kv;     // bf16 bits [num_slots, kv_row_stride]
  std::int64_t num_slots = 0;
  std::int64_t kv_row_stride = kMlaDimQK;
  std::span<const std::int32_t> indices;      // [rows, topk]; invalid: < 0 or >= num_slots
  std::span<const std::int32_t> topk_length;  // [rows] or empty (= topk for every row)
  int rows = 0;
  int h_q = 0;
  int topk = 0;
  double sm_scale = 0;  // pass the same value the kernel gets (e.g. double(float scale))
  std::span<const float> attn_sink;  // [h_q] natural log, or empty (no sink)
};

struct SparseMlaOutput {
  std::vector<double> out;  // [rows, h_q, 512]; 0 for a row with no valid index
  std::vector<double> lse;  // [rows, h_q], natural log; +inf for a row with no valid index
  std::vector<double> max_logits;  // [rows, h_q], max S; -inf for a row with no valid index
  // [rows, h_q, 512]: sum_j p_j |v_j| (p = softmax(S), v_j the dimension's value of token j), times
  // the sink factor like out: the scale of bf16 P's rounding error (the default tolerance).
  std::vector<double> out_abs;
};

// S_j = sm_scale * q . kv[idx_j] over 576 dims (fp64), over the valid j among the first
// clamp(topk_length[r], 0, topk) entries; out = softmax(S) . kv[idx_j][0:512]; lse = ln sum exp S.
// attn_sink (FlashMLA's): out (and out_abs) of head h times 1 / (1 + exp(attn_sink[h] - lse));
// lse and max_logits unchanged; a row with no valid index keeps out 0.
SparseMlaOutput sparse_mla(const SparseMlaInput& in);

// Which per-element bound out is held to (nsa-semantics.md, Tolerances):
enum class MlaTolerance {
  standard,    // default precision (P rounded to bf16 before P.V, as FlashMLA):
               // max(3e-3, 2/128 |ref|, 2^-8 sum_j p_j |v_j|); the last term scales with V
  unit_scale,  // the spec's bound as stated for unit-scale V, max(3e-3, 2/128 |ref|): the bench's
               // N(0, 1) inputs, where FlashMLA meets it too
  precise,     // the precise option (P as bf16 hi + lo): max(1e-3, 2/128 |ref|)
};
inline MlaTolerance mla_tolerance(bool precise) { return precise ? MlaTolerance::precise : MlaTolerance::standard; }
// The allowed |got - ref| for one element: reference value ref, its out_abs (sum_j p_j |v_j|).
double mla_allowed_error(MlaTolerance tolerance, double ref, double ref_abs);

// The spec's tolerance for attention output:
// - out: per element |got - ref| <= mla_allowed_error(tolerance, ref, out_abs); over the whole tensor the
//   cosine difference 1 - 2 x.y / (x.x + y.y) (FlashMLA's cal_diff) < 1e-5; a (row, head) whose reference
//   lse is +inf (no valid index) must be exactly 0; NaN/inf anywhere fails.
// - lse: |got - ref| <= 1e-5 or <= 1e-5 * |ref|; +inf must match exactly.
struct MlaComparison {
  bool ok = true;
  std::size_t out_failures = 0;
  std::size_t lse_failures = 0;
  double worst_out_abs = 0;   // largest |got - ref| over out
  double worst_out_ratio = 0; // largest error / allowed error over out (> 1 fails)
  double cos_diff = 0;        // whole-tensor cosine difference of out
  double worst_lse_abs = 0;   // largest |got - ref| over finite lse
  std::string message;        // summary; names the first failing element of each kind
};

MlaComparison compare_sparse_mla(std::span<const std::uint16_t> out_bf16, std::span<const float> lse,
                                 const SparseMlaOutput& ref, int rows, int h_q,
                                 MlaTolerance tolerance = MlaTolerance::standard);

// max_logits against ref.max_logits with the lse tolerance (-inf must match exactly). Returns the
// number of failures; `message` names the first.
std::size_t compare_max_logits(std::span<const float> got, const SparseMlaOutput& ref, std::string& message);

}  // namespace nsajit::reference
