// fake_nccl.h — NCCL for the emulated device (fake_device.h), included by cuda_device.cpp inside
// namespace emu_device after the fake CUDA runtime, so that dist/nccl_communicator.cpp, compiled
// there too, runs its whole path here: the unique id made by rank 0 and delivered by the host
// communicator, ncclCommInitRank, and the collectives on device memory. The bytes move with MPI
// (device memory is host memory in the emulation), over MPI_COMM_WORLD, whose ranks must be the
// clique's; a clique of one copies. What it checks, as NCCL would: the buffers are device memory
// (a host pointer throws DeviceError), every rank joins with the root's id and its own rank, and a
// duplicate device on a node is refused (ncclInvalidUsage, NCCL's "Duplicate GPU detected").
// Counted: each collective (Counters::collectives).
// Included inside namespace emu_device: no includes of its own (cuda_device.cpp includes <mpi.h>
// and the standard headers first).
#pragma once

enum ncclResult_t { ncclSuccess = 0, ncclSystemError = 2, ncclInvalidArgument = 4, ncclInvalidUsage = 5 };
enum ncclDataType_t { ncclChar = 0 };
struct ncclUniqueId {
  char internal[128];
};
struct EmuNcclComm {
  int nranks = 1, rank = 0, device = 0;
};
using ncclComm_t = EmuNcclComm*;

inline const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclSystemError: return "unhandled system error (emulated NCCL: MPI is needed for several ranks)";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  }
  return "unknown result code";
}

inline constexpr char kEmuNcclIdTag[] = "emulated nccl id";

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, kEmuNcclIdTag, sizeof kEmuNcclIdTag);
  return ncclSuccess;
}

inline int emu_mpi_world(int* rank) {
  int size = 1;
  *rank = 0;
#if POSGRAD_HAVE_MPI
  int up = 0;
  MPI_Initialized(&up);
  if (up) {
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
#endif
  return size;
}

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (std::memcmp(id.internal, kEmuNcclIdTag, sizeof kEmuNcclIdTag) != 0) return ncclInvalidArgument;
  int mpi_rank = 0;
  const int mpi_size = emu_mpi_world(&mpi_rank);
  if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (nranks > 1 && (nranks != mpi_size || rank != mpi_rank)) return ncclSystemError;
  int device = D.current;
#if POSGRAD_HAVE_MPI
  if (nranks > 1) {  // NCCL refuses two ranks on one GPU of a node (here: the same emulated index)
    std::string all(static_cast<size_t>(nranks), '\0');
    const char mine = static_cast<char>(device);
    MPI_Allgather(&mine, 1, MPI_CHAR, all.data(), 1, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < nranks; ++r)
      if (r != rank && all[static_cast<size_t>(r)] == mine) return ncclInvalidUsage;
  }
#endif
  *comm = new EmuNcclComm{nranks, rank, device};
  return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t, ncclComm_t comm,
                                  cudaStream_t) {
  require_device_argument("ncclAllGather", 0, send);
  require_device_argument("ncclAllGather", 1, recv);
  ++D.counts.collectives;
  if (comm->nranks == 1) {
    std::memmove(recv, send, count);
    return ncclSuccess;
  }
#if POSGRAD_HAVE_MPI
  if (count > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
  const int n = static_cast<int>(count);
  return MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS ? ncclSuccess
                                                                                            : ncclSystemError;
#else
  return ncclSystemError;
#endif
}

inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t, int root, ncclComm_t comm,
                                  cudaStream_t) {
  require_device_argument("ncclBroadcast", 0, send);
  require_device_argument("ncclBroadcast", 1, recv);
  ++D.counts.collectives;
  if (root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  if (send != recv && comm->rank == root) std::memmove(recv, send, count);
  if (comm->nranks == 1) return ncclSuccess;
#if POSGRAD_HAVE_MPI
  if (count > static_cast<size_t>(INT_MAX)) return ncclInvalidArgument;
  return MPI_Bcast(recv, static_cast<int>(count), MPI_BYTE, root, MPI_COMM_WORLD) == MPI_SUCCESS ? ncclSuccess
                                                                                                 : ncclSystemError;
#else
  return ncclSystemError;
#endif
}
