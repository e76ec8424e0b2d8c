// nccl_communicator.h — the communicator for CUDA tensors over NCCL, built beside the CUDA backend
// where nccl.h and libnccl are found (POSGRAD_HAVE_NCCL). It is bootstrapped over a host
// communicator (MPI for a job, or the single one): rank 0 makes the ncclUniqueId
// (ncclGetUniqueId) and broadcasts its bytes through the host communicator, then every rank joins
// with ncclCommInitRank (the NCCL documentation's "one device per process" example). Each process
// takes CUDA device local_rank() of its node (device() says which); NCCL refuses two ranks on one
// device. CUDA tensors move with ncclAllGather / ncclBroadcast (then summed in rank order on the
// device by Communicator, as every implementation does: the same bits as the host path); CPU
// tensors, strings and the barrier go through the host communicator. The NCCL calls run on a stream
// of their own, ordered after the backend's work by a synchronisation before and after each
// collective: correct and simple, not overlapped.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace posgrad::dist {

// What make_device_communicator chose: comm, or null for the host path, and why (the same text on
// every rank).
struct DeviceCommunicator {
  std::unique_ptr<Communicator> comm;  // null: keep the host communicator (its CUDA tensors are staged)
  std::string why;                     // "NCCL on cuda:<local rank> of each node", or why not
};

// The communicator for a job whose tensors live on CUDA devices, over `host` (which must outlive the
// result). NCCL when all of these hold on every rank: host.size() > 1; this build has NCCL;
// POSGRAD_NCCL is not "0" (a way to force the host path); the node has a GPU for each of its
// processes (local_size() <= device count); and NCCL starts. Otherwise null, and the caller keeps
// `host` (MPI through host memory: the same bits, slower). Collective over host: every rank calls it,
// and every rank gets the same answer — the local checks are agreed by a sum over host before NCCL
// is started and its start is agreed again after, so that no rank trains over NCCL while another
// waits in MPI. No errors of its own: a failure to start NCCL is a reason in `why`.
DeviceCommunicator make_device_communicator(Communicator& host);

#if POSGRAD_HAVE_NCCL
// NCCL over host on device local_rank() % device count, unconditionally (tests; a job of one
// process). host must outlive the returned communicator. DeviceError when no GPU is present or NCCL
// cannot start (the message is NCCL's).
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host);
#endif

}  // namespace posgrad::dist
