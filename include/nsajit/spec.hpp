// nsajit/spec.hpp — typed kernel specifications.
//
// A KernelSpec names one generated kernel: its family plus every parameter that is baked into the
// generated source as a compile-time constant. Two equal specs always produce byte-identical source,
// the same cache key and the same cubin. Specs are plain values (no strings) so that the runtime's
// warm dispatch can hash and compare them without allocating.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace nsajit {

enum class Family : std::uint8_t {
  index_transform,    // §1: top-k positions -> KV-cache slots through the page table
  topk,               // §2: per-row top-k of the indexer scores (fp32 or bf16: score_dtype)
  sparse_mla,         // §3: sparse MLA attention over the top-k KV tokens of each query row (decode and prefill)
  sparse_mla_decode = sparse_mla,  // the family's former name, kept for source compatibility
  sparse_mla_combine, // §3: merges the partial results of split-KV sparse MLA
  fp8_kv_quantize,    // §4: quantize bf16 [n, 576] rows and store them into slots of the FP8 paged cache
  fp8_kv_gather,      // §4: gather slots of the FP8 paged cache and dequantize them to bf16 [n, 576]
};

// Every family once, for the registry (generator/family.cpp: family F's traits are F_traits in
// families/<family>/); a new family adds its value above and its name here.
#define NSAJIT_FAMILIES(X) \
  X(index_transform) X(topk) X(sparse_mla) X(sparse_mla_combine) X(fp8_kv_quantize) X(fp8_kv_gather)

// How an index-transform / fused top-k row finds its page-table row and offset (§1).
enum class IndexMode : std::uint8_t {
  decode,   // index_transform: row r uses page-table row r (MTP: the caller repeats each request's
            // row next_n times); fused top-k: row r uses page-table row r / next_n
  prefill,  // row r belongs to request b through cu_seqlens_q; uses page-table row b
  ragged,   // out = idx + offset[r]; no page table
};

enum class KvDtype : std::uint8_t {
  bf16,      // [num_slots, 576] bf16 rows
  fp8_e4m3,  // [num_pages, page_size, 656] bytes (§4), dequantized inside the kernel
};

// Dtype of the top-k family's scores (§2): the indexer's logits as DeepGEMM's MQA-logits kernels
// write them.
enum class ScoreDtype : std::uint8_t {
  fp32,
  bf16,  // read as bf16 and widened exactly: the selection is that of the bf16 values
};

// Target architecture: compute capability and suffix ('a' for arch-specific sm_90a, 0 for none).
struct Arch {
  int sm = 90;
  char suffix = 'a';
  friend bool operator==(const Arch&, const Arch&) = default;
};

// Sparse MLA kernel variant: which MMA instructions its consumer warps issue.
enum class MlaKernel : std::uint8_t {
  automatic,  // the family's default for the spec (filled by with_default_tile)
  mma_sync,   // templates/sparse_mla_mma_sync.cuh: 8 MMA warps (any sm_90+)
  wgmma,      // templates/sparse_mla_wgmma.cuh: 2 MMA warpgroups (sm_90a only, 16..64 heads per CTA)
};

// Sparse MLA wgmma schedule of the two math warpgroups (bf16 KV, 64 heads per CTA).
enum class MlaSchedule : std::uint8_t {
  single,  // a spec's default: WG0 QK + softmax + PV left half, WG1 PV right half (sparse_mla_wgmma.cuh)
  seesaw,  // two KV tiles in flight: WG0 S = Q K^T of even tiles, WG1 of odd tiles, P exchanged
           // through smem, output split by V columns (sparse_mla_seesaw.cuh; bf16 KV, not precise,
           // topk a multiple of 128; split-KV by whole pairs; the dispatcher's choice wherever it
           // takes the spec: sparse_mla::default_schedule, docs/design/sparse_mla.md)
};

// How a split-KV launch of sparse MLA merges its splits' partial results.
enum class MlaCombine : std::uint8_t {
  kernel,   // a spec's default: fp32 partials in the workspace, merged by the combine kernel
            // (templates/sparse_mla_combine.cuh, a programmatic dependent launch)
  cluster,  // a row and head group's two splits run as one 2-CTA cluster and merge through
            // distributed shared memory in the epilogue: no second kernel, no partials in global
            // memory (the seesaw schedule only; docs/design/sparse_mla.md)
};

// Top-k selection path compiled into a kernel (families/topk/heuristics.cpp picks one per launch;
// docs/design/topk.md). Every path but the two exact ones falls back, per row, to the exact sweeps
// of its CTA layout when its speculation does not hold the row's selection.
enum class TopkAlgorithm : std::uint8_t {
  exact_sweeps,       // one CTA per row: radix select over the row (templates/topk.cuh)
  cluster_sweeps,     // a row over a thread-block cluster of 2-16 CTAs: the same radix select
  speculative_sweep,  // one CTA per row: a sampled bound, one listing sweep (topk_speculative.cuh)
  dense_registers,    // one 256-thread CTA per row of <= 9212 positions, keys in registers (topk_dense.cuh)
  cluster_lists,      // a row over a cluster: one exchange of per-CTA lists (topk_cluster_lists.cuh)
};

// Tile configuration of a generated kernel. Which fields matter depends on the family; the rest
// must stay at their defaults (validate() enforces it so that equal kernels have equal specs).
struct TileConfig {
  int threads = 0;       // threads per CTA (0 = family default; sparse MLA: 256 + 32 * producer_warps)
  int block_tokens = 0;  // sparse MLA: KV tokens staged per iteration (0 = family default)
  int heads_per_cta = 0; // sparse MLA: query heads handled by one CTA (0 = family default)
  MlaKernel kernel = MlaKernel::automatic;  // sparse MLA: the kernel variant
  int producer_warps = -1;  // sparse MLA: warps that only copy (and dequantize) KV tiles (-1 = default);
                            // mma_sync: 0, 2 (bf16 <= 32 heads per CTA; FP8 <= 16, not precise:
                            // the MMA warps dequantize) or 8 (FP8, <= 16);
                            // wgmma: 4 (one warpgroup) or 8 (two: FP8 at 64 heads per CTA)
  TopkAlgorithm algorithm = TopkAlgorithm::exact_sweeps;  // top-k: the selection path compiled
  MlaSchedule schedule = MlaSchedule::single;  // sparse MLA wgmma: the math warpgroups' schedule
  MlaCombine combine = MlaCombine::kernel;     // sparse MLA seesaw: how split-KV partials merge
  friend bool operator==(const TileConfig&, const TileConfig&) = default;
};

struct KernelSpec {
  Family family = Family::topk;
  int h_q = 0;            // sparse_mla_decode: query heads per GPU (16, 32, 64, 128; 8 allowed)
  int topk = 2048;        // indices per row, a multiple of 64: <= 4096 for topk, <= 16384 for
                          // index_transform and sparse_mla; unused (must stay 2048) by the others
  int page_size = 1;      // index_transform, fused topk: page size P in [1, 4096] (1 = page_table_1);
                          // fp8_kv_*: tokens per cache page, [1, 4096]
  IndexMode mode = IndexMode::decode;  // index_transform
  KvDtype kv_dtype = KvDtype::bf16;    // sparse_mla_decode
  int next_n = 1;         // fused topk decode: query tokens per request (MTP), 1..8; 1 for every
                          // other family (sparse MLA rows are flattened: next_n is a launch argument)
  bool fused_transform = false;  // topk: output transformed indices (§2 fused forms) instead of positions
  bool sorted = false;           // topk: output ordered by score descending
  bool precise = false;          // sparse_mla: P as bf16 hi + lo before P.V (tighter tolerance, slower);
                                 // false: P rounded to bf16 once, the field's precision (FlashMLA's)
  ScoreDtype score_dtype = ScoreDtype::fp32;  // topk: dtype of the scores
  TileConfig tile{};
  Arch arch{};
  friend bool operator==(const KernelSpec&, const KernelSpec&) = default;
};

// Fills the family's default tile config where fields are 0 (kernel automatic, producer_warps -1).
// Sparse MLA: a tile given only as threads (the former spelling) is read as 256 = mma_sync without
// producers, 320 = mma_sync + 2, 384 = wgmma + 4, 512 = wgmma + 8 at 64 heads per CTA, else
// mma_sync + 8. Returns a copy.
KernelSpec with_default_tile(KernelSpec spec);

// Throws nsajit::InvalidArgument naming the first bad field, its value and what is allowed.
void validate(const KernelSpec& spec);

// Canonical text form: every field, fixed order, e.g.
// "family=sparse_mla h_q=16 topk=2048 page_size=1 mode=decode kv_dtype=bf16 next_n=1
//  fused_transform=0 sorted=0 precise=0 score_dtype=fp32 threads=320 block_tokens=64 heads_per_cta=16
//  kernel=mma_sync producer_warps=2 algorithm=exact_sweeps arch=sm_90a".
std::string canonical_text(const KernelSpec& spec);

// A spec from either form nsajit prints: canonical text ("family=topk topk=2048 ... arch=sm_90a";
// any subset of its fields in any order, the rest at their defaults, arch default_arch when absent)
// or a readable name ("sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a", which must name
// the spec exactly). Returns it with its default tile filled, validated. Throws InvalidArgument
// naming the text, the part that is wrong and what was expected.
KernelSpec parse_spec_text(const std::string& text, Arch default_arch = Arch{});
// The same, with default_arch called only when the text names no arch (e.g. to ask the current
// device). The fields are read and checked first; if default_arch throws, a field that is bad for
// sm_90a is named (saying so, with default_arch's error) instead of that error alone, so that a
// misspelling is reported even without a GPU.
KernelSpec parse_spec_text(const std::string& text, const std::function<Arch()>& default_arch);

// Stable readable name with only the fields the family uses, e.g.
// "sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a" (".precise" before the arch when set),
// "index_transform.decode.ps64.topk2048.sm_90a", "topk.topk2048.scores_bf16.sm_90a",
// "topk.topk2048.t256.dense_registers.sm_90a" (a top-k algorithm other than exact_sweeps after the tile).
std::string readable_name(const KernelSpec& spec);

std::string to_string(Family f);
std::string to_string(IndexMode m);
std::string to_string(KvDtype d);
std::string to_string(ScoreDtype d);  // "fp32", "bf16"
std::string to_string(MlaKernel k);  // "automatic", "mma_sync", "wgmma"
std::string to_string(MlaSchedule s);  // "single", "seesaw"
std::string to_string(MlaCombine c);   // "kernel", "cluster"
std::string to_string(TopkAlgorithm a);  // "exact_sweeps", "cluster_sweeps", ...
// The algorithm of that name; InvalidArgument naming the text and the names allowed.
TopkAlgorithm parse_topk_algorithm(std::string_view text);
std::string to_string(Arch a);  // "sm_90a"
Arch parse_arch(const std::string& text);  // "sm_90a", "sm_90", "90a"; throws InvalidArgument

// Hash over the spec's fields (no strings): used by the runtime's in-process function map.
struct KernelSpecHash {
  std::size_t operator()(const KernelSpec& s) const noexcept;
};

}  // namespace nsajit
