// cache_command.cpp — `nsajit cache list | stats | verify [--fix] | prune | clear`.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cache/cache_admin.hpp"
#include "cache/cubin_cache.hpp"
#include "nsajit/errors.hpp"
#include "nsajit/jit.hpp"
#include "runtime/json_text.hpp"
#include "tools/subcommands.hpp"

namespace nsajit::tools {
namespace {

struct CacheOptions {
  std::string dir;
  bool json = false;
  bool fix = false;
  std::string max_size;
  double older_than_days = -1;
  bool stale = false;
};

std::string human_bytes(std::uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(b) / double(1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", double(b) / double(1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", double(b) / double(1ull << 10));
  return fmt::format("{} B", b);
}

std::string date_of(std::int64_t t) {
  const std::time_t tt = std::time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// "1 entry", "2 entries".
std::string plural(std::uint64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string family_of(const std::string& name) { return name.substr(0, name.find('.')); }

// Reading a directory the cache would not trust is safe (entries are read without following links
// or blocking), but what it holds is not what processes use: say so. Commands that remove files
// refuse such a directory (prune_cache, verify_cache).
void warn_if_untrusted(const CacheOptions& o, const char* what) {
  if (const std::string why = cache_dir_distrust_reason(o.dir); !why.empty()) {
    std::fflush(stdout);
    fmt::print(stderr, "nsajit: warning: the cache directory {} is not used by nsajit ({}); {} it anyway\n", o.dir, why,
               what);
  }
}

// A missing directory is an empty cache; say so, or a mistyped --dir or NSAJIT_CACHE_DIR goes unnoticed.
void warn_if_missing(const CacheOptions& o, const char* what) {
  std::error_code ec;
  if (std::filesystem::status(o.dir, ec).type() != std::filesystem::file_type::not_found) return;
  std::fflush(stdout);
  fmt::print(stderr, "nsajit: warning: the cache directory {} does not exist; nothing to {}\n", o.dir, what);
}

int list_command(const CacheOptions& o) {
  warn_if_missing(o, "list");
  warn_if_untrusted(o, "listing");
  const CacheScan scan = scan_cache(o.dir);
  if (o.json) {
    nlohmann::json entries = nlohmann::json::array();
    for (const CacheEntryInfo& e : scan.entries)
      entries.push_back({{"name", e.name}, {"key", e.key_prefix}, {"bytes", e.bytes}, {"last_used", e.last_used},
                         {"path", e.path}});
    fmt::print("{}\n", dump_json(nlohmann::json{{"dir", o.dir}, {"entries", entries}}, 2));
    return 0;
  }
  fmt::print("{:<60} {:<32} {:>10} {:>17}\n", "kernel", "key", "bytes", "last used (UTC)");
  for (const CacheEntryInfo& e : scan.entries)
    fmt::print("{:<60} {:<32} {:>10} {:>17}\n", e.name, e.key_prefix, e.bytes, date_of(e.last_used));
  fmt::print("{}, {} in {}\n", plural(scan.entries.size(), "entry", "entries"), human_bytes(scan.entry_bytes), o.dir);
  return 0;
}

int stats_command(const CacheOptions& o) {
  warn_if_missing(o, "read");
  warn_if_untrusted(o, "reading");
  const CacheScan scan = scan_cache(o.dir);
  std::map<std::string, std::pair<int, std::uint64_t>> families;
  std::int64_t oldest = 0, newest = 0;
  for (const CacheEntryInfo& e : scan.entries) {
    auto& f = families[family_of(e.name)];
    ++f.first;
    f.second += e.bytes;
    oldest = oldest == 0 ? e.last_used : std::min(oldest, e.last_used);
    newest = std::max(newest, e.last_used);
  }
  if (o.json) {
    nlohmann::json by_family = nlohmann::json::object();
    for (const auto& [name, f] : families) by_family[name] = {{"entries", f.first}, {"bytes", f.second}};
    const nlohmann::json j = {{"dir", o.dir},
                              {"exists", scan.exists},
                              {"entries", scan.entries.size()},
                              {"entry_bytes", scan.entry_bytes},
                              {"total_bytes", scan.total_bytes},
                              {"lock_files", scan.lock_files.size()},
                              {"temp_files", scan.temp_files.size()},
                              {"other_files", scan.other_files.size()},
                              {"oldest_last_used", oldest},
                              {"newest_last_used", newest},
                              {"families", by_family}};
    fmt::print("{}\n", dump_json(j, 2));
    return 0;
  }
  fmt::print("cache {}{}\n", o.dir, scan.exists ? "" : " (does not exist yet)");
  fmt::print("entries: {} ({}); lock files: {}; temporary files: {}; other files: {}; total {}\n",
             scan.entries.size(), human_bytes(scan.entry_bytes), scan.lock_files.size(), scan.temp_files.size(),
             scan.other_files.size(), human_bytes(scan.total_bytes));
  if (!scan.entries.empty())
    fmt::print("last used: oldest {}, newest {} (UTC)\n", date_of(oldest), date_of(newest));
  for (const auto& [name, f] : families)
    fmt::print("  {:<22} {:>5} {:<7} {:>12}\n", name, f.first, f.first == 1 ? "entry" : "entries",
               human_bytes(f.second));
  return 0;
}

int verify_command(const CacheOptions& o) {
  warn_if_missing(o, "check");
  if (!o.fix) warn_if_untrusted(o, "checking");
  const VerifyResult r = verify_cache(o.dir, o.fix);
  for (const auto& [path, problem] : r.corrupt) fmt::print("corrupt: {} ({})\n", path, problem);
  for (const std::string& path : r.removed) fmt::print("removed: {}\n", path);
  for (const std::string& path : r.in_use) fmt::print("not removed (a process holds its lock): {}\n", path);
  for (const auto& [path, why] : r.bad_lock) fmt::print("not removed (its lock file: {}): {}\n", why, path);
  fmt::print("verify: {} checked, {} corrupt{}, {} of another nsajit or NVRTC version (never hit; `nsajit "
             "cache prune --stale` removes them)\n",
             plural(r.checked, "entry", "entries"), r.corrupt.size(),
             o.fix ? fmt::format(" ({} removed)", r.removed.size()) : "", r.stale);
  return r.corrupt.empty() ? 0 : 1;
}

void print_prune(const PruneResult& r, const char* what) {
  for (const std::string& path : r.in_use) fmt::print("kept (a process holds its lock): {}\n", path);
  for (const auto& [path, why] : r.bad_lock) fmt::print("kept (its lock file: {}): {}\n", why, path);
  fmt::print("{}: removed {} ({}), {}, {}; {} of entries left\n", what,
             plural(r.removed_entries.size(), "entry", "entries"), human_bytes(r.removed_bytes),
             plural(r.removed_locks, "lock file", "lock files"),
             plural(r.removed_temps, "temporary file", "temporary files"), human_bytes(r.entry_bytes_after));
}

int prune_command(const CacheOptions& o) {
  warn_if_missing(o, "prune");
  PruneOptions p;
  if (!o.max_size.empty()) p.max_bytes = parse_byte_count(o.max_size, "--max-size");
  p.older_than_days = o.older_than_days;
  p.stale = o.stale;
  print_prune(prune_cache(o.dir, p), "prune");
  return 0;
}

int clear_command(const CacheOptions& o) {
  warn_if_missing(o, "clear");
  const PruneResult r = prune_cache(o.dir, {.everything = true});
  print_prune(r, "clear");
  return r.in_use.empty() && r.bad_lock.empty() ? 0 : 1;
}

// --older-than: a finite number >= 0 (CLI::NonNegativeNumber lets "nan" through, which evicts nothing).
CLI::Validator finite_days() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double days = std::strtod(text.c_str(), &end);
        const bool hex = text.find_first_of("xX") != std::string::npos;  // strtod reads "0x10" as 16
        if (text.empty() || *end != '\0' || hex || !std::isfinite(days) || days < 0)
          return fmt::format("\"{}\": expected a finite number of days >= 0, e.g. 30 or 0.5", text);
        return "";
      },
      "DAYS");
}

// --max-size: checked while parsing, so that its error reads like --older-than's.
CLI::Validator byte_count() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          parse_byte_count(text, "--max-size");
          return "";
        } catch (const InvalidArgument& e) {  // parse_byte_count's message from the quoted text on
          const std::string message = e.what();
          return message.substr(std::min(message.find('"'), message.size()));
        }
      },
      "SIZE");
}

const char* const kCacheSubcommands = "list, stats, verify, prune or clear";

}  // namespace

Subcommand add_cache_command(CLI::App& app) {
  auto o = std::make_shared<CacheOptions>();
  CLI::App* cmd = app.add_subcommand("cache", "inspect and maintain the kernel cache (safe while other processes use it)");
  cmd->require_subcommand(1);
  cmd->add_option("--dir", o->dir,
                  "cache directory, before or after the subcommand (default: NSAJIT_CACHE_DIR, else the user's cache)");
  CLI::App* list = cmd->add_subcommand("list", "list the entries: kernel, key, size, last use");
  list->add_flag("--json", o->json, "print JSON");
  CLI::App* stats = cmd->add_subcommand("stats", "entry count and size, per family; lock and temporary files");
  stats->add_flag("--json", o->json, "print JSON");
  CLI::App* verify = cmd->add_subcommand("verify", "check every entry (format, checksum, key); exit 1 naming corrupt ones");
  verify->add_flag("--fix", o->fix, "also remove the corrupt entries");
  CLI::App* prune = cmd->add_subcommand(
      "prune", "remove orphan lock and temporary files, and evict the entries --max-size, --older-than or --stale "
               "select (least recently used first; without them no entry is evicted; entries being built are kept)");
  prune->add_option("--max-size", o->max_size, "evict until the entries take at most this, e.g. 2G")
      ->check(byte_count());
  prune->add_option("--older-than", o->older_than_days, "evict entries not used for this many days")
      ->check(finite_days());
  prune->add_flag("--stale", o->stale, "evict entries of another nsajit or NVRTC version");
  CLI::App* clear = cmd->add_subcommand("clear", "remove every entry and orphan file (entries being built are kept)");
  // cache's own options (--dir, --version) are accepted after the subcommand too.
  for (CLI::App* sub : {list, stats, verify, prune, clear}) sub->fallthrough();
  return {cmd, [o, list, stats, verify, prune, clear] {
            if (o->dir.empty()) o->dir = cache_dir();
            if (list->parsed()) return list_command(*o);
            if (stats->parsed()) return stats_command(*o);
            if (verify->parsed()) return verify_command(*o);
            if (prune->parsed()) return prune_command(*o);
            if (clear->parsed()) return clear_command(*o);
            return 2;
          },
          // CLI11 would only say "A subcommand is required", for a misspelt one too.
          [cmd](const CLI::ParseError& e) -> std::string {
            if (!cmd->parsed() || !cmd->get_subcommands().empty() || !dynamic_cast<const CLI::RequiredError*>(&e))
              return "";
            if (const std::vector<std::string> words = cmd->remaining(); !words.empty() && !words[0].starts_with('-'))
              return fmt::format("unknown cache subcommand \"{}\" (expected {}; see nsajit cache --help)", words[0],
                                 kCacheSubcommands);
            return fmt::format("a cache subcommand is required: {} (see nsajit cache --help)", kCacheSubcommands);
          }};
}

}  // namespace nsajit::tools
