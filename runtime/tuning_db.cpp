// tuning_db.cpp — parsing, keys and the dispatcher's lazily resolved tuning database.
#include "runtime/tuning_db.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "generator/embedded_templates.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/driver.hpp"
#include "runtime/json_text.hpp"
#include "runtime/runtime.hpp"
#include "runtime/small_file.hpp"

namespace nsajit::tuning {

void bad_field(const std::string& where, const nlohmann::json& value, const std::string& expected) {
  std::string text = dump_json(value);
  if (text.size() > 80) text = std::string(utf8_prefix(text, 77)) + "...";  // a message may end up in JSON
  throw InvalidArgument(fmt::format("{} = {}: expected {}", where, text, expected));
}

nlohmann::json parse_json_object(std::string_view text, const std::string& origin) {
  const nlohmann::json j = parse_json_strict(text, origin, "not valid JSON");
  if (!j.is_object()) throw InvalidArgument(fmt::format("{}: expected a JSON object", origin));
  return j;
}

void reject_unknown_fields(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    // "file.json: key" at a file's top level (`where` ends in ':'), "file.json: a.b.key" below it
    throw InvalidArgument(fmt::format("{}{}{}: unknown field (expected {})", where, where.ends_with(':') ? " " : ".", key, list));
  }
}

void parse_entry(const nlohmann::json& j, const std::string& where, const std::string& choice_expected,
                 const std::function<void(const nlohmann::json&, const std::string&)>& bucket,
                 const std::function<void(const std::string&, const nlohmann::json&, const std::string&)>& set_field) {
  if (!j.is_object() || !j.contains("bucket") || !j.contains("choice"))
    bad_field(where, j.is_object() ? nlohmann::json("{...}") : j, "an object with \"bucket\" and \"choice\"");
  bucket(j["bucket"], where + ".bucket");
  const nlohmann::json& choice = j["choice"];
  if (!choice.is_object()) bad_field(where + ".choice", choice, choice_expected);
  for (const auto& [field, value] : choice.items()) set_field(field, value, where + ".choice." + field);
}

std::optional<std::int64_t> json_int64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > std::uint64_t(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return std::int64_t(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  return std::nullopt;
}

Range parse_range(const nlohmann::json& v, const std::string& where) {
  const char* expected = "an integer >= 0 or [lo, hi] with 0 <= lo <= hi (hi null: no bound)";
  Range r;
  if (const std::optional<std::int64_t> one = json_int64(v)) {
    r.lo = r.hi = *one;
  } else if (v.is_array() && v.size() == 2 && json_int64(v[0]) && (json_int64(v[1]) || v[1].is_null())) {
    r.lo = *json_int64(v[0]);
    if (!v[1].is_null()) r.hi = *json_int64(v[1]);
  } else {
    bad_field(where, v, expected);
  }
  if (r.lo < 0 || r.hi < r.lo) bad_field(where, v, expected);
  return r;
}

nlohmann::json range_json(const Range& r) {
  if (r.lo == r.hi) return r.lo;
  return nlohmann::json::array({r.lo, r.hi == Range{}.hi ? nlohmann::json(nullptr) : nlohmann::json(r.hi)});
}

TuningDb parse_tuning_db(std::string_view text, const std::string& origin) {
  const nlohmann::json j = parse_json_object(text, origin);
  if (!j.contains("schema") || j["schema"] != kSchemaVersion)
    throw InvalidArgument(fmt::format("{}: schema = {}: expected {} (a database of another nsajit tuning schema)",
                                      origin, j.contains("schema") ? dump_json(j["schema"]) : "missing",
                                      kSchemaVersion));
  TuningDb db;
  db.origin = origin;
  const std::string key_where = origin + ": key";
  if (!j.contains("key") || !j["key"].is_object())
    throw InvalidArgument(fmt::format("{}: key: missing (expected gpu, sm_count, arch, driver, nvrtc, nsajit)", origin));
  const nlohmann::json& k = j["key"];
  auto text_of = [&](const char* field) {
    if (!k.contains(field) || !k[field].is_string() || k[field].get<std::string>().empty())
      throw InvalidArgument(fmt::format("{}.{}: missing or not a non-empty string", key_where, field));
    return k[field].get<std::string>();
  };
  db.key.gpu = text_of("gpu");
  db.key.arch = text_of("arch");
  db.key.driver = text_of("driver");
  db.key.nvrtc = text_of("nvrtc");
  db.key.nsajit = text_of("nsajit");
  if (!k.contains("sm_count"))
    throw InvalidArgument(fmt::format("{}.sm_count: missing (expected a positive integer)", key_where));
  const std::optional<std::int64_t> sm_count = json_int64(k["sm_count"]);
  if (!sm_count || *sm_count < 1 || *sm_count > std::numeric_limits<int>::max())
    bad_field(key_where + ".sm_count", k["sm_count"],
              fmt::format("a positive integer (at most {})", std::numeric_limits<int>::max()));
  db.key.sm_count = int(*sm_count);
  Arch arch;
  try {
    arch = parse_arch(db.key.arch);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("{}.arch: {}", key_where, e.what()));
  }
  if (!j.contains("families") || !j["families"].is_object())
    throw InvalidArgument(fmt::format("{}: families: missing (expected an object of topk and sparse_mla entries)", origin));
  const nlohmann::json& families = j["families"];
  reject_unknown_fields(families, {"topk", "sparse_mla"}, origin + ": families");
  auto entries_of = [&](const char* family) -> const nlohmann::json* {
    if (!families.contains(family)) return nullptr;
    if (!families[family].is_array())
      throw InvalidArgument(fmt::format("{}: families.{}: expected an array of entries", origin, family));
    return &families[family];
  };
  if (const nlohmann::json* e = entries_of("topk"))
    for (std::size_t i = 0; i < e->size(); ++i)
      db.topk.push_back(detail::parse_topk_entry((*e)[i], fmt::format("{}: families.topk[{}]", origin, i)));
  if (const nlohmann::json* e = entries_of("sparse_mla"))
    for (std::size_t i = 0; i < e->size(); ++i)
      db.sparse_mla.push_back(
          parse_sparse_mla_entry((*e)[i], fmt::format("{}: families.sparse_mla[{}]", origin, i), arch));
  return db;
}

std::string key_mismatch(const TuningKey& db, const TuningKey& here) {
  if (db.gpu != here.gpu || db.sm_count != here.sm_count)
    return fmt::format("made for {} ({} SMs), this device is {} ({} SMs)", db.gpu, db.sm_count, here.gpu,
                       here.sm_count);
  if (db.arch != here.arch) return fmt::format("made for arch {}, this device is {}", db.arch, here.arch);
  if (db.nvrtc != here.nvrtc) return fmt::format("made with NVRTC {}, this is NVRTC {}", db.nvrtc, here.nvrtc);
  if (db.nsajit != here.nsajit) return fmt::format("made with nsajit {}, this is nsajit {}", db.nsajit, here.nsajit);
  return "";
}

const std::vector<TuningDb>& shipped_tuning_dbs() {
  static const std::vector<TuningDb> dbs = [] {
    std::vector<TuningDb> out;
    for (const embedded::File& f : embedded::tuning_databases()) {
      if (f.name.empty()) continue;  // none shipped
      try {
        out.push_back(parse_tuning_db(f.text, "shipped " + std::string(f.name)));
      } catch (const InvalidArgument&) {
        // tests/test_tuning.cpp parses every shipped database: a bad one fails there.
      }
    }
    return out;
  }();
  return dbs;
}

TuningKey current_key() {
  const driver::ContextInfo& info = driver::current_context_info();
  CUdevice dev = 0;
  NSAJIT_CU(cuCtxGetDevice, &dev);
  char name[256] = {};
  NSAJIT_CU(cuDeviceGetName, name, int(sizeof name), dev);
  int driver_version = 0;
  NSAJIT_CU(cuDriverGetVersion, &driver_version);
  TuningKey k;
  k.gpu = name;
  k.sm_count = info.sm_count;
  k.arch = to_string(spec_for_current_device(KernelSpec{}).arch);
  k.driver = fmt::format("CUDA {}.{}", driver_version / 1000, driver_version % 1000 / 10);
  k.nvrtc = nvrtc_version();
  k.nsajit = version();
  return k;
}

namespace {

struct State {
  std::mutex mutex;
  std::atomic<bool> resolved{false};
  std::atomic<const TuningDb*> db{nullptr};
  std::optional<std::string> path;  // set_tuning_db
  std::string in_use = "none";
  std::vector<std::unique_ptr<TuningDb>> kept;  // never freed: a concurrent dispatch may still read one
};

State& state() {
  static State& s = *new State;
  return s;
}

void report(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "nsajit: %s\n", message.c_str());
}

// Resolves the database (state's mutex held); sets in_use; reports a database that cannot be used.
const TuningDb* resolve(State& s) {
  std::string path = s.path ? *s.path : "";
  std::string how = s.path ? "set_tuning_db" : kEnvVariable;
  if (!s.path)
    if (const char* env = std::getenv(kEnvVariable)) path = env;
  if (path == "none") {
    s.in_use = fmt::format("none ({} \"none\")", how);
    return nullptr;
  }
  // A file is read and parsed first, so a malformed one is reported even where no device is.
  std::unique_ptr<TuningDb> file_db;
  const std::string origin = fmt::format("{} ({})", path, how);
  auto ignore = [&](std::string why) -> const TuningDb* {
    if (why.starts_with(path + ": ")) why = why.substr(path.size() + 2);  // parse errors name the file already
    s.in_use = fmt::format("none ({}: {})", origin, why);
    report(fmt::format("tuning database {}: {}: ignored, the heuristics decide", origin, why));
    return nullptr;
  };
  if (!path.empty()) {
    try {
      file_db = std::make_unique<TuningDb>(parse_tuning_db(read_small_file(path, path), path));
    } catch (const InvalidArgument& e) {
      return ignore(e.what());
    }
  }
  TuningKey here;
  try {
    here = current_key();
  } catch (const Error& e) {
    s.in_use = fmt::format("none (no device to match a database to: {})", e.what());
    return nullptr;
  }
  if (file_db) {
    if (const std::string why = key_mismatch(file_db->key, here); !why.empty()) return ignore(why);
    s.in_use = path;
    s.kept.push_back(std::move(file_db));
    return s.kept.back().get();
  }
  for (const TuningDb& db : shipped_tuning_dbs()) {
    if (db.key.gpu != here.gpu || db.key.sm_count != here.sm_count) continue;
    if (const std::string why = key_mismatch(db.key, here); !why.empty()) {
      report(fmt::format("tuning database {}: {}: ignored, the heuristics decide", db.origin, why));
      continue;
    }
    s.in_use = db.origin;
    return &db;
  }
  s.in_use = fmt::format("none (no shipped database for {} with {} SMs, NVRTC {}, nsajit {})", here.gpu,
                         here.sm_count, here.nvrtc, here.nsajit);
  return nullptr;
}

}  // namespace

const TuningDb* active_tuning_db() {
  State& s = state();
  if (s.resolved.load(std::memory_order_acquire)) return s.db.load(std::memory_order_relaxed);
  std::lock_guard lock(s.mutex);
  if (!s.resolved.load(std::memory_order_relaxed)) {
    s.db.store(resolve(s), std::memory_order_relaxed);
    s.resolved.store(true, std::memory_order_release);
  }
  return s.db.load(std::memory_order_relaxed);
}

}  // namespace nsajit::tuning

namespace nsajit {

void set_tuning_db(const std::string& path) {
  tuning::State& s = tuning::state();
  std::lock_guard lock(s.mutex);
  if (path.empty()) s.path.reset();
  else s.path = path;
  s.resolved.store(false, std::memory_order_release);
}

std::string tuning_db_in_use() {
  tuning::active_tuning_db();
  tuning::State& s = tuning::state();
  std::lock_guard lock(s.mutex);
  return s.in_use;
}

}  // namespace nsajit
