// mpi_communicator.cpp — see mpi_communicator.h. Compiled only where MPI was found.
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>

namespace posgrad::dist {

namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

// MPI_COMM_WORLD returns errors (MPI_ERRORS_RETURN) and this turns them into exceptions.
void check(int code, const char* call) {
  if (code != MPI_SUCCESS) throw IoError(std::string(call) + " failed: " + mpi_error(code));
}

int count_of(size_t nbytes, const char* what) {
  POSGRAD_CHECK(nbytes <= static_cast<size_t>(INT_MAX), ValueError, what, ": ", nbytes,
                " bytes is more than one MPI message of INT_MAX bytes holds");
  return static_cast<int>(nbytes);
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_size(node, &local_size_), "MPI_Comm_size (node)");
    check(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank (node)");
    MPI_Comm_free(&node);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  int local_rank() const override { return local_rank_; }
  std::string name() const override { return "mpi"; }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 protected:
  void all_gather_bytes(const void* send, void* recv, size_t nbytes, Device) override {
    const int n = count_of(nbytes * static_cast<size_t>(size_), "all_reduce_sum") / size_;
    check(MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD), "MPI_Allgather");
  }
  void broadcast_bytes(void* buf, size_t nbytes, int root, Device) override {
    check(MPI_Bcast(buf, count_of(nbytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  std::vector<std::string> gather_strings(const std::string& s, int root) override {
    const int len = count_of(s.size(), "gather");
    std::vector<int> lens(rank_ == root ? static_cast<size_t>(size_) : 0);
    check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD), "MPI_Gather");
    std::vector<int> displs(lens.size());
    size_t total = 0;
    for (size_t r = 0; r < lens.size(); ++r) {
      displs[r] = count_of(total, "gather");
      total += static_cast<size_t>(lens[r]);
    }
    (void)count_of(total, "gather");
    std::string all(total, '\0');
    check(MPI_Gatherv(s.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(), MPI_BYTE, root, MPI_COMM_WORLD),
          "MPI_Gatherv");
    std::vector<std::string> out;
    for (size_t r = 0; r < lens.size(); ++r)
      out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r])));
    return out;
  }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    int provided = 0;
    const int code = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (code != MPI_SUCCESS) throw IoError("MPI_Init_thread failed (is this process started by mpirun or srun?)");
  }
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return std::make_unique<MpiCommunicator>();
}

void finalize_mpi() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Finalize();
}

void abort_mpi(int status) {
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);
}

}  // namespace posgrad::dist
