// test_dirs.hpp — fresh temporary directories for tests, removed when the test is done.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace nsajit::test {

// Every directory make_temp_dir() created in this process (tests/main.cpp checks that none is
// left behind).
inline std::vector<std::string>& created_temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}
inline std::mutex& created_temp_dirs_mutex() {
  static std::mutex m;
  return m;
}

// A new empty directory under $TMPDIR (or /tmp), e.g. /tmp/nsajit-test-cache-AbC123. Prefer
// TempDir, which removes it.
inline std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/nsajit-test-" + tag + "-XXXXXX";
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
  std::lock_guard lock(created_temp_dirs_mutex());
  created_temp_dirs().push_back(pattern);
  return pattern;
}

// A temporary directory that is removed (with its contents) when the object goes.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) : path_(make_temp_dir(tag)) {}
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  operator const std::string&() const { return path_; }

 private:
  std::string path_;
};

}  // namespace nsajit::test
