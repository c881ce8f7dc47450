// process_helpers.hpp — capturing this process's stderr, and a watchdog that turns a hang into a
// failure.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace nsajit::test {

// Runs f() with file descriptor 2 sent to a temporary file; returns what was written there.
template <class F>
std::string capture_stderr(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/nsajit-test-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("mkstemp failed");
  ::unlink(path);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  auto restore = [&] {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
  };
  try {
    f();
  } catch (...) {
    restore();
    ::close(fd);
    throw;
  }
  restore();
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  ::lseek(fd, 0, SEEK_SET);
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, std::size_t(n));
  ::close(fd);
  return text;
}

// Occurrences of `needle` in `text`.
inline int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Ends the process with a message (so the test fails instead of hanging) unless destroyed within
// `seconds`.
class Watchdog {
 public:
  Watchdog(const char* what, int seconds)
      : thread_([this, what, seconds] {
          std::unique_lock lock(mutex_);
          if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
            std::printf("\nFAILED: %s did not finish within %d s (hang)\n", what, seconds);
            std::fflush(stdout);
            std::_Exit(124);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace nsajit::test
