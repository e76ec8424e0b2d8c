// mpi_communicator.h — the communicator over MPI's C API (MPI_COMM_WORLD), for CPU processes. Built
// where CMake finds MPI (POSGRAD_MPI=AUTO|ON); MPI's headers stay inside mpi_communicator.cpp.
// Collectives on CPU buffers: MPI_Allgather (all_reduce_sum, then summed in rank order by
// Communicator), MPI_Bcast, MPI_Gather + MPI_Gatherv (strings), MPI_Barrier. A CUDA tensor is
// staged through host memory by Communicator (the NCCL communicator moves it on the device).
// Messages larger than INT_MAX elements are refused (ValueError), not split.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace posgrad::dist {

#if POSGRAD_HAVE_MPI
// MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is initialised already, then the communicator of
// MPI_COMM_WORLD. local_size() from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). IoError when MPI
// cannot start (the message is MPI's).
std::unique_ptr<Communicator> make_mpi_communicator(int* argc, char*** argv);
// MPI_Finalize (when MPI was initialised and not finalised yet).
void finalize_mpi();
// MPI_Abort(MPI_COMM_WORLD, status): does not return.
[[noreturn]] void abort_mpi(int status);
#endif

}  // namespace posgrad::dist
