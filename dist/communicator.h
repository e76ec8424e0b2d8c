// communicator.h — the processes of a distributed job and the collectives between them: rank, size,
// all-reduce (sum), broadcast, gather, barrier. One interface, three implementations:
//   single  one process, no dependency (every collective is the identity);
//   mpi     MPI's C API (Open MPI from Debian), for CPU processes (dist/mpi_communicator.h);
//   nccl    NCCL for CUDA tensors, bootstrapped over another communicator (dist/nccl_communicator.h).
// It is not a transport: the bytes move through MPI or NCCL, never through code of ours.
//
// Determinism. all_reduce_sum does not use MPI_Allreduce / ncclAllReduce: neither standard promises
// the same association of the sum from one run to the next (the algorithm may change with message
// size, topology or version). Instead every rank all-gathers the N buffers (a pure data movement)
// and sums them itself in rank order, (((x_0 + x_1) + x_2) + ...), with the tensor layer's
// elementwise kernel. Every rank gets the same bits, and two runs with the same N get the same
// bits. It costs N buffers of memory and N - 1 additions per element, which is nothing at the model
// sizes of this project; a ring all-reduce would scale better and reproduce worse.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace posgrad::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  // This process's index, 0 .. size() - 1; rank 0 is the root that writes files.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How many processes of the job share this node (for the default thread count per process).
  virtual int local_size() const = 0;
  // This process's index among them, 0 .. local_size() - 1 (the GPU it takes under NCCL).
  virtual int local_rank() const = 0;
  // The device whose tensors the collectives move without staging: the CPU, or for the NCCL
  // communicator the GPU this process was given (cuda:local_rank()).
  virtual Device device() const { return Device::cpu(); }
  // "single", "mpi" or "nccl".
  virtual std::string name() const = 0;
  bool is_root() const { return rank() == 0; }

  // In place: t becomes the sum over ranks, added in rank order (see the top of this file), the same
  // bits on every rank. t: any shape, contiguous, float32 or float64, the same shape, dtype and device
  // on every rank (ValueError on this rank otherwise: non-contiguous, another dtype; a mismatch between
  // ranks is the caller's bug and is not detected). A CUDA tensor on a communicator without device
  // support (single, mpi) is staged through host memory.
  void all_reduce_sum(Tensor& t);
  // The sum over ranks of one double per rank, in rank order; the same bits on every rank.
  double all_reduce_sum(double x);
  // In place: t takes root's values on every rank. Same conditions as all_reduce_sum (any dtype).
  void broadcast(Tensor& t, int root = 0);
  // Root's string on every rank.
  std::string broadcast(const std::string& s, int root = 0);
  // On root: every rank's string, in rank order (size() entries). Elsewhere: empty.
  std::vector<std::string> gather(const std::string& s, int root = 0);
  // Returns when every rank has called it.
  virtual void barrier() = 0;

 protected:
  // recv holds size() * nbytes bytes: rank r's nbytes at r * nbytes. send and recv on `dev`, which is
  // the CPU unless supports_device(dev).
  virtual void all_gather_bytes(const void* send, void* recv, size_t nbytes, Device dev) = 0;
  virtual void broadcast_bytes(void* buf, size_t nbytes, int root, Device dev) = 0;
  virtual std::vector<std::string> gather_strings(const std::string& s, int root) = 0;
  virtual bool supports_device(Device dev) const { return dev.is_cpu(); }

  void check_root(int root, const char* what) const;
};

// The single-process communicator: rank 0 of 1.
std::unique_ptr<Communicator> make_single_communicator();

// ---- the process's job ---------------------------------------------------------------------------

// How this process was started, from the environment (no MPI call):
//   POSGRAD_DIST=mpi            MPI, whatever else is set (a launcher this list does not know);
//   POSGRAD_DIST=single         one process, even under a launcher;
//   otherwise MPI when a launcher's per-process variable is set: OMPI_COMM_WORLD_SIZE (Open MPI's
//   mpirun), PMI_RANK (MPICH's Hydra, Slurm's srun --mpi=pmi2), PMIX_RANK (srun --mpi=pmix, PRRTE).
//   SLURM_* alone is not enough: a batch script's own shell has them too.
// UsageError for another POSGRAD_DIST value.
enum class Launch { Single, Mpi };
Launch launch_from_environment();
// "OMPI_COMM_WORLD_SIZE=2" style description of what made launch_from_environment() choose MPI.
std::string launch_reason();

// Whether this build has the MPI communicator (CMake POSGRAD_MPI) and the NCCL one (CUDA + NCCL).
bool mpi_built();
bool nccl_built();

// The process's communicator: single until init_world() installs another. Never null.
Communicator& world();

// Sets up the job for launch_from_environment(): MPI_Init_thread (MPI_THREAD_FUNNELED: OpenMP
// threads never call MPI) and the MPI communicator, or nothing for a single process. UsageError when
// MPI is asked for (or a launcher is detected) in a build without MPI: N independent processes
// would each train alone into the same directory. Then, with size() > 1, the OpenMP threads per
// process default to default_threads(): the caller's --threads still wins.
void init_world(int* argc, char*** argv);
// MPI_Finalize after a normal end (every rank is past its last collective).
void finalize_world();
// After an error on this rank while others may be inside a collective: MPI_Abort (ends every rank
// with `status`); a single process just returns.
void abort_world(int status);

// OpenMP threads for one of world().local_size() processes on this node: the node's hardware
// threads divided among them, at most the CPUs this process may run on (a launcher that binds each
// process to one core gives 1), and at least 1.
int default_threads();

}  // namespace posgrad::dist
