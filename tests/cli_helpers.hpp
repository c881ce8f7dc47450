// cli_helpers.hpp — what the tool and tuning tests share: an exception's message, substring
// checks, and running the nsajit tool as a process.
#pragma once

#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <exception>
#include <string>

namespace nsajit::test {

// The message f() throws, or "" when it does not throw.
std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#ifdef NSAJIT_CLI_PATH
struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

// Runs the nsajit tool with `args` (shell words) and environment assignments `env`.
inline CliResult run_cli(const std::string& env, const std::string& args) {
  const std::string command = env + " '" NSAJIT_CLI_PATH "' " + args + " 2>&1";
  CliResult r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
#endif

}  // namespace nsajit::test
