// info_command.cpp — `nsajit gen SPEC` and `nsajit info`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "runtime/json_text.hpp"
#include "runtime/tuning_db.hpp"
#include "tools/subcommands.hpp"

namespace nsajit::tools {
namespace {

nlohmann::json device_info() {
  if (!driver::available()) return nullptr;
  CUdevice dev = 0;
  NSAJIT_CU(cuDeviceGet, &dev, 0);
  char name[256] = {};
  NSAJIT_CU(cuDeviceGetName, name, int(sizeof name), dev);
  int major = 0, minor = 0, sms = 0, count = 0, driver_version = 0;
  NSAJIT_CU(cuDeviceGetAttribute, &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  NSAJIT_CU(cuDeviceGetAttribute, &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  NSAJIT_CU(cuDeviceGetAttribute, &sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  NSAJIT_CU(cuDeviceGetCount, &count);
  NSAJIT_CU(cuDriverGetVersion, &driver_version);
  return {{"name", name},
          {"arch", fmt::format("sm_{}{}a", major, minor)},
          {"sm_count", sms},
          {"devices", count},
          {"driver_cuda_version", fmt::format("{}.{}", driver_version / 1000, driver_version % 1000 / 10)}};
}

// The database the dispatcher would use here (a driver call for the device) and the shipped ones.
nlohmann::json tuning_database_info() {
  nlohmann::json shipped = nlohmann::json::array();
  for (const tuning::TuningDb& db : tuning::shipped_tuning_dbs())
    shipped.push_back(fmt::format("{} for {} ({} SMs, {}, NVRTC {}, nsajit {}): {} top-k and {} sparse MLA buckets",
                                  db.origin, db.key.gpu, db.key.sm_count, db.key.arch, db.key.nvrtc, db.key.nsajit,
                                  db.topk.size(), db.sparse_mla.size()));
  return {{"in_use", tuning_db_in_use()}, {"shipped", shipped}};
}

int info(bool json) {
  const std::string dir = cache_dir();
  const CacheScan scan = scan_cache(dir);
  const char* no_jit = std::getenv("NSAJIT_NO_JIT");
  const std::uint64_t max_bytes = cache_max_bytes_from_env();
  const nlohmann::json device = device_info();
  const nlohmann::json j = {
      {"nsajit_version", version()},
      {"nvrtc_version", nvrtc_version()},
      {"device", device},
      {"cache", {{"dir", dir}, {"entries", scan.entries.size()}, {"entry_bytes", scan.entry_bytes},
                 {"max_bytes", max_bytes}, {"not_used_because", cache_dir_distrust_reason(dir)}}},
      {"strict_mode", strict_mode()},
      {"tuning_database", tuning_database_info()}};
  if (json) {
    fmt::print("{}\n", dump_json(j, 2));
    return 0;
  }
  fmt::print("nsajit {} (NVRTC {})\n", version(), nvrtc_version());
  if (device.is_null())
    fmt::print("device: none (libcuda.so.1 or a CUDA device is missing)\n");
  else
    fmt::print("device: {} ({}, {} SMs; {} device(s); driver CUDA {})\n", device["name"].get<std::string>(),
               device["arch"].get<std::string>(), device["sm_count"].get<int>(), device["devices"].get<int>(),
               device["driver_cuda_version"].get<std::string>());
  if (const std::string why = cache_dir_distrust_reason(dir); !why.empty())
    fmt::print("cache: {} (not used: {}; kernels are compiled in memory only)\n", dir, why);
  else
    fmt::print("cache: {} ({} {}, {:.1f} MiB; size bound {})\n", dir, scan.entries.size(),
               scan.entries.size() == 1 ? "entry" : "entries", double(scan.entry_bytes) / double(1 << 20),
               max_bytes ? fmt::format("{} bytes (NSAJIT_CACHE_MAX_BYTES)", max_bytes) : "none");
  fmt::print("strict mode: {}{}\n", strict_mode() ? "on" : "off",
             no_jit ? fmt::format(" (NSAJIT_NO_JIT={})", no_jit) : "");
  const nlohmann::json db = j["tuning_database"];
  fmt::print("tuning database: {}{}\n", db["in_use"].get<std::string>(),
             db["shipped"].empty() ? "" : fmt::format(" (built in: {})", fmt::join(db["shipped"], ", ")));
  return 0;
}

}  // namespace

Subcommand add_gen_command(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto arch = std::make_shared<std::string>("sm_90a");
  CLI::App* cmd = app.add_subcommand("gen", "print the generated CUDA source of a kernel");
  cmd->add_option("spec", *spec,
                  "the kernel: readable name (e.g. sparse_mla.h16.topk2048.kv_bf16.mma_sync.hpc16.pw2.sm_90a) or canonical "
                  "text (e.g. \"family=topk topk=2048 arch=sm_90a\")")
      ->required();
  cmd->add_option("--arch", *arch, "arch of canonical text without arch= (default sm_90a)");
  return {cmd, [spec, arch] {
            fmt::print("{}", generate_source(parse_spec_text(*spec, parse_arch(*arch))));
            return 0;
          }};
}

Subcommand add_info_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "versions, device, cache directory (size, entries), strict mode, "
                                             "tuning database in use");
  cmd->add_flag("--json", *json, "print JSON");
  return {cmd, [json] { return info(*json); }};
}

}  // namespace nsajit::tools
