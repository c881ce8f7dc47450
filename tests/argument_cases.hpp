// argument_cases.hpp — tests of a public function's argument checks as a table: each case changes
// one thing in a valid argument struct and expects an InvalidArgument whose message names the
// argument and its value (thrown before any driver call, so no GPU is needed).
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "nsajit/errors.hpp"

namespace nsajit::test {

// The message of the InvalidArgument that call(args) throws, or "(no InvalidArgument)".
template <class Args, class Call>
std::string invalid_argument_message(const Call& call, const Args& args) {
  try {
    call(args);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

template <class Args>
struct BadArgument {
  std::function<void(Args&)> change;  // applied to a copy of the valid arguments
  std::string expected;               // part of the message, e.g. "argument rows = -1"
  bool whole = false;                 // expected is the whole message
};

// Every case's arguments must give an InvalidArgument whose message contains (or is) its `expected`.
template <class Args, class Call>
void check_bad_arguments(const Call& call, const Args& valid, const std::vector<BadArgument<Args>>& cases) {
  for (const BadArgument<Args>& c : cases) {
    Args a = valid;
    c.change(a);
    const std::string message = invalid_argument_message(call, a);
    INFO("expected a message with: " << c.expected);
    if (c.whole)
      CHECK(message == c.expected);
    else
      CHECK_MESSAGE(message.find(c.expected) != std::string::npos, message);
  }
}

}  // namespace nsajit::test
