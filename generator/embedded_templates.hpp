// embedded_templates.hpp — the files of templates/ (the NSAJIT_TEMPLATES list of CMakeLists.txt),
// embedded at build time by cmake/embed_templates.cmake.
#pragma once

#include <span>
#include <string_view>

namespace nsajit::embedded {

struct File {
  std::string_view name;  // e.g. "topk_radix.cuh"
  std::string_view text;
};

// Every embedded file, in the order of the CMake list.
std::span<const File> files();

// The shipped tuning databases (tune/db/*.json), embedded the same way (runtime/tuning_db.cpp).
std::span<const File> tuning_databases();

// The text of the embedded file `name`; throws std::logic_error when there is none (a template
// includes a file missing from the CMake list).
std::string_view file(std::string_view name);

}  // namespace nsajit::embedded
