// nccl_communicator.h — the communicator for CUDA tensors over NCCL, built beside the CUDA backend
// where nccl.h and libnccl are found (POSGRAD_HAVE_NCCL). It is bootstrapped over a host
// communicator (MPI for a job, or the single one): rank 0 makes the ncclUniqueId
// (ncclGetUniqueId) and broadcasts its bytes through the host communicator, then every rank joins
// with ncclCommInitRank (the NCCL documentation's "one device per process" example). Each process
// uses CUDA device local rank % device count, where the local rank counts the processes on its node.
// CUDA tensors move with ncclAllGather / ncclBroadcast (then summed in rank order on the device by
// Communicator, as every implementation does); CPU tensors, strings and the barrier go through the
// host communicator. The NCCL calls run on a stream of their own, ordered after the backend's work
// by a synchronisation before and after each collective: correct and simple, not overlapped.
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace posgrad::dist {

#if POSGRAD_HAVE_NCCL
// host must outlive the returned communicator. DeviceError when no GPU is present or NCCL cannot
// start (the message is NCCL's).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);
#endif

}  // namespace posgrad::dist
