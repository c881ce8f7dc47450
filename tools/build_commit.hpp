// build_commit.hpp — the commit the nsajit tool was built from.
#pragma once

// `git describe --always --dirty` of the source tree at build time, or "unknown" when it is not
// the top of a git checkout. Defined in the generated build_commit.cpp (cmake/build_commit.cmake).
extern const char* const kNsajitBuildCommit;
