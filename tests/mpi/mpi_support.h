// mpi_support.h — what the tests of tests/mpi/ share. They are started by CTest with
// `mpirun -np 2` (CMakeLists.txt, tests "mpi.*"): each process runs every test, so a test calls the
// same collectives on every rank in the same order and checks with EXPECT (an ASSERT that returned
// on one rank only would leave the other waiting in a collective). main() starts MPI through
// dist::init_world, as the posgrad tool does.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "dist/communicator.h"
#include "support/test_util.h"

namespace posgrad::test {

// A scratch directory all ranks share: made by rank 0, its path broadcast, removed by rank 0 once
// every rank is done with it.
class SharedDir {
 public:
  SharedDir() {
    if (dist::world().is_root()) own_ = std::make_unique<TempDir>();
    path_ = dist::world().broadcast(own_ ? own_->str("") : std::string(), 0);
  }
  ~SharedDir() { dist::world().barrier(); }
  std::string str(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::unique_ptr<TempDir> own_;
  std::string path_;
};

// A small corpus for the tiny models (written by rank 0; every rank reads it after the barrier).
inline std::string write_corpus(const SharedDir& d) {
  const std::string path = d.str("corpus.txt");
  if (dist::world().is_root()) {
    std::ostringstream os;
    for (int i = 0; i < 300; ++i)
      os << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
    std::ofstream(path) << os.str();
  }
  dist::world().barrier();
  return path;
}

}  // namespace posgrad::test

// Starts MPI for the tests and ends it after them; one process alone is refused (the tests need 2).
#define POSGRAD_MPI_TEST_MAIN()                                                            \
  int main(int argc, char** argv) {                                                        \
    ::posgrad::dist::init_world(&argc, &argv);                                             \
    ::testing::InitGoogleTest(&argc, argv);                                                \
    if (::posgrad::dist::world().size() != 2) {                                            \
      std::fprintf(stderr, "run these tests with mpirun -np 2 (this is %d process(es))\n", \
                   ::posgrad::dist::world().size());                                       \
      return 1;                                                                            \
    }                                                                                      \
    const int status = RUN_ALL_TESTS();                                                    \
    ::posgrad::dist::finalize_world();                                                     \
    return status;                                                                         \
  }
