// bench_common.hpp — what every `nsajit bench <family>` shares: timing, floors, baselines, results.
//
// Timing: CUDA events around each launch, warm-up first, the L2 flushed (a 256 MB memset) before
// every timed launch, median of >= 50. Baselines: PyTorch runs in a python3 subprocess of the same
// invocation on the same inputs, which the bench writes to a folder (see bench/torch_baseline.py);
// without python3/torch the baseline fields are null and the reason is recorded.
// Results: bench/results/<family>-<YYYYMMDD>-<short commit>.json in the format of
// docs/bench-results-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/anchors.hpp"

namespace nsajit::tools::bench {

inline constexpr double kCopyTBps = 4.17;      // the H200's device-to-device copy ceiling
inline constexpr double kBf16TFLOPs = 752.0;   // the H200's bf16 GEMM ceiling

// xorshift64: inputs of hundreds of MB fast (mt19937 + normal_distribution is too slow); the
// benches' inputs are a function of the seed.
struct FastRandom {
  std::uint64_t state;
  std::uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  double uniform53() { return double(next() >> 11) * 0x1.0p-53; }        // [0, 1), 53 bits
  // Three uniforms, centred and scaled: close enough to a normal for timing.
  float roughly_normal() { return (uniform() + uniform() + uniform() - 1.5f) * 2.0f; }
  // The four 16-bit uniforms of one draw, centred and scaled to unit variance.
  float sum4_normal() {
    const std::uint64_t x = next();
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += float((x >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (sum - 2.0f) * 1.7320508f;
  }
};

// xorshift64* -> approximately N(0, 1) (sum of 4 uniforms, rescaled); fast enough for 150M values.
struct NormalRng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float normal() {
    const std::uint64_t v = next();
    float sum = 0;
    for (int i = 0; i < 4; ++i) sum += float((v >> (16 * i)) & 0xffff) * (1.f / 65536.f);
    return (sum - 2.f) * 1.7320508f;
  }
};

// Rows checked against the CPU reference of a large batch: every row up to 16, else a spread of
// them (first, last, middle, and six more), sorted.
std::vector<int> sample_rows(int rows);

// max(bytes / 4.17 TB/s, flops / 752 TFLOP/s) in microseconds.
double floor_us(double bytes, double flops);

struct TimingOptions {
  int warmup = 5;
  int iters = 50;
  // Untimed launches for at least this long before the warm-up, so that the timed ones find the
  // card in its steady state (a compute-bound kernel at the power cap), whatever ran before.
  int soak_ms = 0;
  bool flush_l2 = true;
  // Diagnostics only: enqueued after the flush and before the start event of each timed launch
  // (e.g. a decoy launch that brings the kernel's code back into L2).
  std::function<void()> after_flush;
  // Read the SM clock after each timed launch (Timing::sm_clock_mhz): for the figures a results
  // file records; NVML starts before the warm-up, so its start-up is not a gap between launches.
  bool sample_clock = false;
};

// Microseconds of `launch` (which enqueues work on the default stream) over the timed launches.
struct Timing {
  double min_us = 0, median_us = 0, max_us = 0;
  // The SM clock after each timed launch (median, MHz) and the fraction of launches after which
  // a power or thermal limit held it down (gpu_clock.hpp); nullopt without NVML.
  std::optional<double> sm_clock_mhz, clock_limited;
};
Timing time_us(const std::function<void()>& launch, const TimingOptions& options = {});
inline double median_us(const std::function<void()>& launch, const TimingOptions& options = {}) {
  return time_us(launch, options).median_us;
}

// Adds the timing's clock state to a case's params as <prefix>sm_clock_mhz and <prefix>clock_limited.
void add_clock_params(nlohmann::json& params, const Timing& timing, const std::string& prefix = "");

struct Case {
  std::string name;            // e.g. "1x131072", "decode h128 b64 n1 bf16"
  nlohmann::json params;       // e.g. {"rows":1,"len":131072,"topk":2048}
  double nsajit_us = 0;         // median
  std::optional<double> nsajit_min_us, nsajit_max_us;
  std::string baseline;        // e.g. "torch.topk"
  std::optional<double> baseline_us;
  double floor_us = 0;
  std::optional<double> tflops;
  double gbps = 0;
  std::string check = "not run";  // "pass" / "FAIL: ..."
  std::string baseline_input;  // folder handed to the baseline script for this case ("" = none)
  std::string anchor_case;     // the anchors file's case this one is compared with ("" = name)
};

// Runs `python3 <script> <family> <cases.json>` where cases.json lists each case's name, params
// and baseline_input folder; reads back {"<case name>": baseline_us, ...}, where a value may also
// be {"us": baseline_us, "params": {...}} (extra figures, added to the case's params). Fills
// baseline_us of every case it timed. Returns "" or why no baseline was measured.
std::string run_python_baseline(const std::string& script, const std::string& family, std::vector<Case>& cases,
                                const std::string& work_dir);

// Writes raw bytes to <dir>/<name> (creating dir). For baseline inputs.
void write_blob(const std::string& dir, const std::string& name, const void* data, std::size_t bytes);

struct RunInfo {
  std::string family;   // topk | sparse_mla | jit
  std::string command;  // the exact command line
  std::string anchors;  // recorded anchor figures merged by case name ("" = none)
};

// Writes the results JSON (GPU name, SM count, driver, NVRTC, commit: $NSAJIT_COMMIT, else the
// one the tool was built from, date) to `path`, or to bench/results/<family>-<date>-<commit>.json when path is
// "", with each case's fastest recorded anchor (anchor, anchor_us, vs_anchor = anchor_us /
// nsajit_us) merged from info.anchors. Prints a table of the cases. Returns the path written.
std::string write_results(const RunInfo& info, const std::vector<Case>& cases, const std::string& path);

// A folder only this process uses (mkdtemp under $TMPDIR or /tmp, mode 0700), removed with
// everything in it when the object goes. Throws nsajit::Error naming the parent when it cannot be made.
class PrivateWorkDir {
 public:
  PrivateWorkDir();
  ~PrivateWorkDir();
  PrivateWorkDir(const PrivateWorkDir&) = delete;
  PrivateWorkDir& operator=(const PrivateWorkDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Options of `nsajit bench <family>`.
struct BenchOptions {
  std::string command;        // the exact command line (recorded in the results)
  std::string out;            // results path ("" = bench/results/<family>-<date>-<commit>.json)
  std::string baseline_script = "bench/torch_baseline.py";  // "" = no baseline
  std::string work_dir;  // baseline inputs are written here (a PrivateWorkDir's path)
  int iters = 50;
  int soak_ms = 0;            // TimingOptions::soak_ms of every recorded timing
  std::string only;           // run only cases whose name contains this ("" = all)
  std::string anchors = default_anchors_path();  // "" = no anchors merged
  // sparse-mla only: tile fields in canonical text ("kernel=wgmma schedule=seesaw ..."), "" = the
  // default variant. Each case launches detail::sparse_mla_decode(args, tile) with the tile of
  // "family=sparse_mla h_q=<case> topk=<case> <tile>" (validated: a case the variant does not
  // support is skipped with validation's message on stderr).
  std::string tile;
};

// The families' benchmarks (tools/bench/bench_<family>.cpp). Return the exit code (non-zero when
// a case's check fails).
int bench_topk(const BenchOptions& options);
int bench_sparse_mla(const BenchOptions& options);
// "" when `tile` (BenchOptions::tile) makes a valid kernel for at least one sparse-mla case, else
// validation's message for the first case: checked before the GPU is, so a bad tile is a usage error.
std::string sparse_mla_tile_error(const std::string& tile);
// `nsajit bench jit` (tools/bench/bench_jit.cpp): also without a GPU (then the GPU cases are skipped).
int bench_jit(const BenchOptions& options);

}  // namespace nsajit::tools::bench
