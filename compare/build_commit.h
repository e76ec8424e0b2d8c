// build_commit.h — the commit the binary was built from, recorded at build time
// (cmake/build_commit.cmake): `git describe --always --abbrev=12 --dirty` of the source tree then,
// e.g. "6e156a7c0b1d-dirty", or "unknown (not a git checkout)". The comparison's provenance
// (compare/results.h) reports it.
#pragma once

namespace posgrad::train {

const char* build_commit();

}  // namespace posgrad::train
