#include "reference/sparse_mla.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "reference/bf16.hpp"

namespace nsajit::reference {

SparseMlaOutput sparse_mla(const SparseMlaInput& in) {
  const std::size_t rows = std::size_t(std::max(in.rows, 0));
  const std::size_t h_q = std::size_t(in.h_q);
  if (in.q.size() < rows * h_q * kMlaDimQK || in.indices.size() < rows * std::size_t(in.topk) ||
      (!in.topk_length.empty() && in.topk_length.size() < rows) ||
      (!in.attn_sink.empty() && in.attn_sink.size() < h_q) ||
      in.kv.size() < std::size_t(std::max<std::int64_t>(in.num_slots - 1, 0)) * in.kv_row_stride +
                         (in.num_slots > 0 ? kMlaDimQK : 0))
    throw std::invalid_argument("reference::sparse_mla: input spans smaller than the shapes");

  SparseMlaOutput res;
  res.out.assign(rows * h_q * kMlaDimV, 0.0);
  res.out_abs.assign(rows * h_q * kMlaDimV, 0.0);
  res.lse.assign(rows * h_q, std::numeric_limits<double>::infinity());
  res.max_logits.assign(rows * h_q, -std::numeric_limits<double>::infinity());

  std::vector<double> q(kMlaDimQK), s, kv_sel;  // kv_sel: the row's valid KV rows as doubles
  for (std::size_t r = 0; r < rows; ++r) {
    int n = in.topk;
    if (!in.topk_length.empty()) n = std::clamp(in.topk_length[r], 0, in.topk);
    kv_sel.clear();
    for (int j = 0; j < n; ++j) {
      const std::int64_t idx = in.indices[r * in.topk + j];
      if (idx < 0 || idx >= in.num_slots) continue;  // invalid: never read
      const std::uint16_t* row = in.kv.data() + idx * in.kv_row_stride;
      for (int d = 0; d < kMlaDimQK; ++d) kv_sel.push_back(bf16_to_float(row[d]));
    }
    const std::size_t count = kv_sel.size() / kMlaDimQK;
    if (count == 0) continue;  // out 0, lse +inf
    for (std::size_t h = 0; h < h_q; ++h) {
      const std::uint16_t* qh = in.q.data() + (r * h_q + h) * kMlaDimQK;
      for (int d = 0; d < kMlaDimQK; ++d) q[d] = bf16_to_float(qh[d]);
      s.assign(count, 0.0);
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < count; ++j) {
        const double* k = kv_sel.data() + j * kMlaDimQK;
        double part[8] = {};  // independent partial sums: fp64 either way, 8x less latency-bound
        for (int d = 0; d < kMlaDimQK; d += 8)
          for (int i = 0; i < 8; ++i) part[i] += q[d + i] * k[d + i];
        double dot = 0;
        for (double v : part) dot += v;
        s[j] = in.sm_scale * dot;
        m = std::max(m, s[j]);
      }
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - m));
      double* o = res.out.data() + (r * h_q + h) * kMlaDimV;
      double* oa = res.out_abs.data() + (r * h_q + h) * kMlaDimV;
      for (std::size_t j = 0; j < count; ++j) {
        const double pj = s[j] / sum;
        const double* v = kv_sel.data() + j * kMlaDimQK;
        for (int d = 0; d < kMlaDimV; ++d) {
          o[d] += pj * v[d];
          oa[d] += pj * std::abs(v[d]);
        }
      }
      const double lse = m + std::log(sum);
      if (!in.attn_sink.empty()) {  // exp(+inf) = inf gives 0, exp(-inf) = 0 gives 1
        const double factor = 1.0 / (1.0 + std::exp(double(in.attn_sink[h]) - lse));
        for (int d = 0; d < kMlaDimV; ++d) {
          o[d] *= factor;
          oa[d] *= factor;
        }
      }
      res.lse[r * h_q + h] = lse;
      res.max_logits[r * h_q + h] = m;
    }
  }
  return res;
}

double mla_allowed_error(MlaTolerance tolerance, double ref, double ref_abs) {
  const double relative = 2.0 / 128.0 * std::abs(ref);
  switch (tolerance) {
    case MlaTolerance::precise: return std::max(1e-3, relative);
    case MlaTolerance::unit_scale: return std::max(3e-3, relative);
    case MlaTolerance::standard: break;
  }
  // bf16 P: each weight is off by <= 2^-8 of itself (8-bit significand), so P.V by <= 2^-8 sum_j
  // p_j |v_j|, reached only if every rounding lines up with its v's sign (they are independent).
  return std::max({3e-3, relative, std::ldexp(ref_abs, -8)});
}

const char* tolerance_name(MlaTolerance tolerance) {
  switch (tolerance) {
    case MlaTolerance::precise: return "precise: max(1e-3, 2/128 |ref|)";
    case MlaTolerance::unit_scale: return "unit-scale V: max(3e-3, 2/128 |ref|)";
    case MlaTolerance::standard: break;
  }
  return "default: max(3e-3, 2/128 |ref|, 2^-8 sum p|v|)";
}

MlaComparison compare_sparse_mla(std::span<const std::uint16_t> out_bf16, std::span<const float> lse,
                                 const SparseMlaOutput& ref, int rows, int h_q, MlaTolerance tolerance) {
  MlaComparison c;
  const std::size_t heads = std::size_t(rows) * std::size_t(h_q);
  std::ostringstream msg;
  if (out_bf16.size() != heads * kMlaDimV || lse.size() != heads || ref.out.size() != heads * kMlaDimV ||
      ref.lse.size() != heads || ref.out_abs.size() != heads * kMlaDimV) {
    c.ok = false;
    c.message = "compare_sparse_mla: sizes do not match rows * h_q";
    return c;
  }
  auto where = [&](std::size_t head) {
    std::ostringstream w;
    w << "row " << head / h_q << ", head " << head % h_q;
    return w.str();
  };

  double xy = 0, xx_yy = 0;
  for (std::size_t hd = 0; hd < heads; ++hd) {
    const bool empty_row = std::isinf(ref.lse[hd]) && ref.lse[hd] > 0;
    for (int d = 0; d < kMlaDimV; ++d) {
      const std::size_t i = hd * kMlaDimV + d;
      const double got = bf16_to_float(out_bf16[i]);
      const double want = ref.out[i];
      const double err = std::abs(got - want);
      const double allowed = mla_allowed_error(tolerance, want, ref.out_abs[i]);
      bool bad = !std::isfinite(got) || err > allowed || (empty_row && got != 0.0);
      if (std::isfinite(got)) {
        c.worst_out_abs = std::max(c.worst_out_abs, err);
        c.worst_out_ratio = std::max(c.worst_out_ratio, err / allowed);
        xy += got * want;
        xx_yy += got * got + want * want;
      }
      if (bad && c.out_failures++ == 0)
        msg << "out[" << where(hd) << ", dim " << d << "] = " << got << ", reference " << want
            << (empty_row ? " (no valid index: must be exactly 0)" : "") << "; ";
    }
  }
  // Both tensors exactly zero (every row without a valid index) agree: the per-element check
  // already requires exact zeros there.
  c.cos_diff = xx_yy == 0 ? 0.0 : 1.0 - 2.0 * xy / xx_yy;
  const bool cos_bad = !(c.cos_diff < 1e-5);

  for (std::size_t hd = 0; hd < heads; ++hd) {
    const double got = lse[hd];
    const double want = ref.lse[hd];
    bool bad;
    if (std::isinf(want)) {
      bad = got != want;
    } else {
      const double err = std::abs(got - want);
      bad = !std::isfinite(got) || err > std::max(1e-5, 1e-5 * std::abs(want));
      if (std::isfinite(got)) c.worst_lse_abs = std::max(c.worst_lse_abs, err);
    }
    if (bad && c.lse_failures++ == 0)
      msg << "lse[" << where(hd) << "] = " << got << ", reference " << want << "; ";
  }

  c.ok = c.out_failures == 0 && c.lse_failures == 0 && !cos_bad;
  std::ostringstream head;
  head << (c.ok ? "ok" : "MISMATCH") << " (" << tolerance_name(tolerance) << "): out failures " << c.out_failures << "/" << heads * kMlaDimV
       << " (worst abs " << c.worst_out_abs << ", worst err/allowed " << c.worst_out_ratio << "), cos_diff "
       << c.cos_diff << (cos_bad ? " (limit 1e-5)" : "") << ", lse failures " << c.lse_failures << "/" << heads
       << " (worst abs " << c.worst_lse_abs << ")";
  const std::string details = msg.str();
  c.message = details.empty() ? head.str() : head.str() + "; first: " + details;
  return c;
}

std::size_t compare_max_logits(std::span<const float> got, const SparseMlaOutput& ref, std::string& message) {
  std::size_t failures = 0;
  if (got.size() != ref.max_logits.size()) {
    message = "compare_max_logits: sizes differ";
    return got.size() + 1;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = ref.max_logits[i];
    const double g = got[i];
    const bool bad = std::isinf(want) ? g != want
                                      : (!std::isfinite(g) || std::abs(g - want) > std::max(1e-5, 1e-5 * std::abs(want)));
    if (bad && failures++ == 0) {
      std::ostringstream m;
      m << "max_logits[" << i << "] = " << g << ", reference " << want;
      message = m.str();
    }
  }
  return failures;
}

}  // namespace nsajit::reference
