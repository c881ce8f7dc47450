// bench_common.cpp — timing, floors, the python baseline subprocess and the results file.
#include "tools/bench/bench_common.hpp"
#include "tools/bench/gpu_clock.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>

#include <signal.h>    // kill
#include <stdlib.h>    // mkdtemp
#include <sys/stat.h>  // lstat
#include <unistd.h>    // getpid, getuid

#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/device_buffer.hpp"
#include "runtime/driver.hpp"
#include "runtime/json_text.hpp"

extern const char* const kNsajitBuildCommit;  // build_commit.cpp, written at build time

namespace nsajit::tools::bench {
namespace {

// Output of a shell command (stdout), and its exit status.
// One word for /bin/sh whatever the text holds (blanks, quotes, $): '...' with each ' as '\''.
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::pair<std::string, int> capture(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return {"", -1};
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  return {out, status};
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string today(const char* format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, format, &tm);
  return buf;
}

}  // namespace

std::vector<int> sample_rows(int rows) {
  if (rows <= 16) {
    std::vector<int> all(rows);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  std::vector<int> s = {0, 1, rows / 3, rows / 2, rows - 2, rows - 1};
  for (int i = 1; i <= 6; ++i) s.push_back(int((long long)rows * i / 7 + 3) % rows);
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

double floor_us(double bytes, double flops) {
  return std::max(bytes / (kCopyTBps * 1e12), flops / (kBf16TFLOPs * 1e12)) * 1e6;
}

Timing time_us(const std::function<void()>& launch, const TimingOptions& options) {
  // The flush buffer is written before every timed launch: 256 MB is over four times the 60 MB L2.
  // Never freed: it lives as long as the process (and its context).
  static DeviceBuffer<std::uint8_t>& flush = *new DeviceBuffer<std::uint8_t>(std::size_t(256) << 20);
  CUevent start = nullptr, stop = nullptr;
  NSAJIT_CU(cuEventCreate, &start, CU_EVENT_DEFAULT);
  NSAJIT_CU(cuEventCreate, &stop, CU_EVENT_DEFAULT);
  if (options.sample_clock) sample_gpu_clock();
  const auto soak_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.soak_ms);
  while (options.soak_ms > 0 && std::chrono::steady_clock::now() < soak_end) {
    for (int i = 0; i < 8; ++i) launch();  // a few launches queued at a time: the GPU never idles
    NSAJIT_CU(cuCtxSynchronize);
  }
  for (int i = 0; i < options.warmup; ++i) launch();
  std::vector<double> times, clocks;
  times.reserve(std::size_t(options.iters));
  int limited = 0;
  for (int i = 0; i < options.iters; ++i) {
    if (options.flush_l2) flush.poison(std::uint8_t(i));
    if (options.after_flush) options.after_flush();
    NSAJIT_CU(cuEventRecord, start, nullptr);
    launch();
    NSAJIT_CU(cuEventRecord, stop, nullptr);
    NSAJIT_CU(cuEventSynchronize, stop);
    float ms = 0;
    NSAJIT_CU(cuEventElapsedTime, &ms, start, stop);
    times.push_back(double(ms) * 1e3);
    if (const std::optional<ClockSample> c = options.sample_clock ? sample_gpu_clock() : std::nullopt) {
      clocks.push_back(c->sm_mhz);
      limited += c->limited;
    }
  }
  driver::api().cuEventDestroy(start);
  driver::api().cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  Timing t{.min_us = times.front(), .median_us = times[times.size() / 2], .max_us = times.back()};
  if (!clocks.empty()) {
    std::sort(clocks.begin(), clocks.end());
    t.sm_clock_mhz = clocks[clocks.size() / 2];
    t.clock_limited = double(limited) / double(clocks.size());
  }
  return t;
}

void add_clock_params(nlohmann::json& params, const Timing& timing, const std::string& prefix) {
  if (!timing.sm_clock_mhz) return;
  params[prefix + "sm_clock_mhz"] = *timing.sm_clock_mhz;
  params[prefix + "clock_limited"] = *timing.clock_limited;
}

namespace {

// Folders nsajit-bench-<pid>-XXXXXX of this user whose process is gone: a run stopped by a signal
// leaves its baseline inputs (hundreds of MB for sparse-mla) behind, so the next run removes them.
void remove_abandoned_work_dirs(const std::filesystem::path& parent) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    const std::string prefix = "nsajit-bench-";
    if (name.rfind(prefix, 0) != 0) continue;
    const std::size_t dash = name.find('-', prefix.size());
    if (dash == std::string::npos || dash == prefix.size() || dash - prefix.size() > 9) continue;
    const std::string digits = name.substr(prefix.size(), dash - prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st{};
    if (::lstat(e.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    const pid_t pid = pid_t(std::stol(digits));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::filesystem::remove_all(e.path(), ec);
  }
}

}  // namespace

PrivateWorkDir::PrivateWorkDir() {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::temp_directory_path(ec);  // $TMPDIR if it is a folder
  if (ec) parent = "/tmp";
  remove_abandoned_work_dirs(parent);
  std::string templ = (parent / fmt::format("nsajit-bench-{}-XXXXXX", ::getpid())).string();
  if (!::mkdtemp(templ.data()))
    throw Error(fmt::format("nsajit bench: cannot make a private folder for the baseline inputs in {}: {}",
                            parent.string(), std::strerror(errno)));
  path_ = templ;
}

PrivateWorkDir::~PrivateWorkDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_blob(const std::string& dir, const std::string& name, const void* data, std::size_t bytes) {
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!out) throw Error(fmt::format("cannot write baseline input {}", path));
}

std::string run_python_baseline(const std::string& script, const std::string& family, std::vector<Case>& cases,
                                const std::string& work_dir) {
  if (script.empty()) return "no baseline script given";
  if (!std::filesystem::exists(script)) return fmt::format("baseline script {} not found", script);
  nlohmann::json list = nlohmann::json::array();
  for (const Case& c : cases)
    if (!c.baseline_input.empty()) list.push_back({{"name", c.name}, {"params", c.params}, {"input", c.baseline_input}});
  if (list.empty()) return "no case has baseline inputs";
  std::filesystem::create_directories(work_dir);
  const std::string cases_path = work_dir + "/" + family + "-cases.json";
  std::ofstream(cases_path) << dump_json(list, 1);
  const auto [out, status] =
      capture(fmt::format("python3 {} {} {}", shell_quoted(script), shell_quoted(family), shell_quoted(cases_path)));
  if (status != 0) return fmt::format("python3 {} exited with status {}", script, status);
  nlohmann::json times;
  try {
    // The script may print progress lines; the last line is the JSON object.
    const std::string text = trim(out);
    times = nlohmann::json::parse(text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1));
  } catch (const std::exception& e) {
    return fmt::format("cannot parse the baseline's output ({})", e.what());
  }
  for (Case& c : cases) {
    if (!times.contains(c.name)) continue;
    const nlohmann::json& t = times[c.name];
    if (t.is_number()) c.baseline_us = t.get<double>();
    if (!t.is_object()) continue;
    // {"us": ..., "params": {...}}: the baseline's time and extra figures recorded with the case
    if (t.contains("us") && t["us"].is_number()) c.baseline_us = t["us"].get<double>();
    if (t.contains("params") && t["params"].is_object())
      for (const auto& [key, value] : t["params"].items()) c.params[key] = value;
  }
  return "";
}

std::string write_results(const RunInfo& info, const std::vector<Case>& cases, const std::string& path_in) {
  // The tree the tool was built from ("-dirty": uncommitted changes), unless $NSAJIT_COMMIT names it.
  std::string commit = std::getenv("NSAJIT_COMMIT") ? std::getenv("NSAJIT_COMMIT") : "";
  if (commit.empty()) commit = kNsajitBuildCommit;

  // `bench jit` also runs without a GPU (its compile and disk cases): no device fields then.
  char name[256] = "none";
  int sm_count = 0;
  std::string driver = "none";
  if (driver::available()) {
    CUdevice dev = 0;
    driver::current_context();
    NSAJIT_CU(cuCtxGetDevice, &dev);
    NSAJIT_CU(cuDeviceGetName, name, int(sizeof name), dev);
    int driver_version = 0;
    NSAJIT_CU(cuDeviceGetAttribute, &sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    NSAJIT_CU(cuDriverGetVersion, &driver_version);
    driver = trim(capture("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1").first);
    if (driver.empty()) driver = fmt::format("CUDA {}.{}", driver_version / 1000, driver_version % 1000 / 10);
  }

  nlohmann::json j;
  j["family"] = info.family;
  j["gpu"] = name;
  j["sm_count"] = sm_count;
  j["driver"] = driver;
  j["nvrtc"] = nvrtc_version();
  // The dispatcher's choices depend on it: results with and without a database do not compare.
  j["tuning_db"] = tuning_db_in_use();
  j["commit"] = commit;
  j["command"] = info.command;
  j["date"] = today("%Y-%m-%d");
  j["ceilings"] = {{"copy_TBps", kCopyTBps}, {"bf16_TFLOPs", kBf16TFLOPs}};
  std::map<std::string, Anchor> anchors;
  if (!info.anchors.empty()) {
    anchors = load_anchors(info.anchors);
    j["anchors_file"] = info.anchors;
  }
  j["cases"] = nlohmann::json::array();
  for (const Case& c : cases) {
    nlohmann::json e;
    e["case"] = c.name;
    e["params"] = c.params;
    e["nsajit_us"] = c.nsajit_us;
    if (c.nsajit_min_us) e["nsajit_min_us"] = *c.nsajit_min_us;
    if (c.nsajit_max_us) e["nsajit_max_us"] = *c.nsajit_max_us;
    e["baseline"] = c.baseline;
    e["baseline_us"] = c.baseline_us ? nlohmann::json(*c.baseline_us) : nlohmann::json(nullptr);
    e["speedup"] = c.baseline_us ? nlohmann::json(*c.baseline_us / c.nsajit_us) : nlohmann::json(nullptr);
    e["floor_us"] = c.floor_us;
    e["tflops"] = c.tflops ? nlohmann::json(*c.tflops) : nlohmann::json(nullptr);
    e["gbps"] = c.gbps;
    e["check"] = c.check;
    if (const Anchor* a = find_anchor(anchors, c.name, c.anchor_case)) {
      if (!c.anchor_case.empty()) e["anchor_case"] = c.anchor_case;
      e["anchor"] = a->name;
      e["anchor_us"] = a->us;
      e["vs_anchor"] = a->us / c.nsajit_us;
    }
    j["cases"].push_back(e);
  }
  std::string path = path_in;
  if (path.empty()) path = fmt::format("bench/results/{}-{}-{}.json", info.family, today("%Y%m%d"), commit.substr(0, 7));
  if (auto parent = std::filesystem::path(path).parent_path(); !parent.empty())
    std::filesystem::create_directories(parent);
  std::ofstream(path) << dump_json(j, 1) << "\n";

  fmt::print("\n{:<42} {:>10} {:>11} {:>8} {:>10} {:>9} {:>9} {:>8} {:>9} {:>10}  {}\n", "case", "nsajit us",
             "baseline us", "speedup", "anchor us", "vs anchor", "floor us", "TFLOP/s", "GB/s", "MHz (cap)", "check");
  for (const Case& c : cases) {
    const Anchor* anchor = find_anchor(anchors, c.name, c.anchor_case);
    const bool clocked = c.params.contains("sm_clock_mhz");  // the SM clock and how often a limit held it
    const std::string clock = clocked ? fmt::format("{:.0f} ({:.0f}%)", c.params["sm_clock_mhz"].get<double>(),
                                                    100 * c.params["clock_limited"].get<double>())
                                      : "-";
    fmt::print("{:<42} {:>10.1f} {:>11} {:>8} {:>10} {:>9} {:>9.1f} {:>8} {:>9.0f} {:>10}  {}\n", c.name, c.nsajit_us,
               c.baseline_us ? fmt::format("{:.1f}", *c.baseline_us) : "-",
               c.baseline_us ? fmt::format("{:.2f}x", *c.baseline_us / c.nsajit_us) : "-",
               anchor ? fmt::format("{:.1f}", anchor->us) : "-",
               anchor ? fmt::format("{:.3f}", anchor->us / c.nsajit_us) : "-", c.floor_us,
               c.tflops ? fmt::format("{:.1f}", *c.tflops) : "-", c.gbps, clock, c.check);
  }
  fmt::print("results: {}\n", path);
  return path;
}

}  // namespace nsajit::tools::bench
