// nccl_communicator.cpp — see nccl_communicator.h. The NCCL communicator itself is compiled only with
// CUDA and NCCL; make_device_communicator everywhere (without NCCL it says so). The emulated device
// (tests/emulated_device/) compiles this file again against its fake CUDA runtime and fake NCCL.
#include "dist/nccl_communicator.h"

#if POSGRAD_HAVE_NCCL && !defined(POSGRAD_CUDA_EMULATION)
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include <cstdlib>
#include <cstring>
#include <map>

#include "tensor/storage.h"

namespace posgrad::dist {

namespace {

// Why POSGRAD_NCCL keeps this process off NCCL ("" when it does not): 0 forces the host path; unset,
// empty or 1 leave the choice to the checks; anything else is named (and also keeps the host path, so
// that a typo such as "off" still does what it meant, and says so).
std::string environment_obstacle() {
  const char* v = std::getenv("POSGRAD_NCCL");
  if (!v || !*v || std::string(v) == "1") return "";
  if (std::string(v) == "0") return "POSGRAD_NCCL=0";
  return "POSGRAD_NCCL is '" + std::string(v) + "', which is neither 0 (the host path) nor 1 (NCCL where possible)";
}

}  // namespace

#if POSGRAD_HAVE_NCCL

namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw DeviceError(std::string(call) + " failed: " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw DeviceError(std::string(call) + " failed: " + ncclGetErrorString(r));
}

int device_count() {
  int devices = 0;
  check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  return devices;
}

// Root's unique id on every rank (through host; the same call sequence on every rank).
ncclUniqueId shared_unique_id(Communicator& host, const ncclUniqueId& mine) {
  const std::string bytes = host.broadcast(
      host.is_root() ? std::string(reinterpret_cast<const char*>(&mine), sizeof mine) : std::string(), 0);
  POSGRAD_CHECK(bytes.size() == sizeof(ncclUniqueId), DeviceError, "NCCL bootstrap: received ", bytes.size(),
                " bytes of the unique id, expected ", sizeof(ncclUniqueId));
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof id);
  return id;
}

class NcclCommunicator final : public Communicator {
 public:
  // Joins the clique of `id` as host.rank() on CUDA device `device`.
  NcclCommunicator(Communicator& host, int device, const ncclUniqueId& id) : host_(host), device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId copy = id;
    check_nccl(ncclCommInitRank(&comm_, host.size(), copy, host.rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_size() const override { return host_.local_size(); }
  int local_rank() const override { return host_.local_rank(); }
  Device device() const override { return Device::cuda(device_); }
  std::string name() const override { return "nccl"; }
  void barrier() override { host_.barrier(); }

 protected:
  // CPU buffers go through the host communicator inside all_gather_bytes / broadcast_bytes; another
  // GPU's tensors are staged through host memory by Communicator.
  bool supports_device(Device dev) const override { return dev.is_cpu() || (dev.is_cuda() && dev.index == device_); }

  void all_gather_bytes(const void* send, void* recv, size_t nbytes, Device dev) override {
    if (dev.is_cpu()) return forward_all_gather(send, recv, nbytes);
    backend(DeviceType::CUDA).synchronize();  // the buffers' producers have finished
    check_nccl(ncclAllGather(send, recv, nbytes, ncclChar, comm_, stream_), "ncclAllGather");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (ncclAllGather)");
  }
  void broadcast_bytes(void* buf, size_t nbytes, int root, Device dev) override {
    if (dev.is_cpu()) {
      const std::string part =
          host_.broadcast(rank() == root ? std::string(static_cast<const char*>(buf), nbytes) : std::string(), root);
      std::memcpy(buf, part.data(), nbytes);
      return;
    }
    backend(DeviceType::CUDA).synchronize();
    check_nccl(ncclBroadcast(buf, buf, nbytes, ncclChar, root, comm_, stream_), "ncclBroadcast");
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (ncclBroadcast)");
  }
  std::vector<std::string> gather_strings(const std::string& s, int root) override { return host_.gather(s, root); }

 private:
  // A CPU all-gather through the host communicator's public collectives: each rank's bytes
  // broadcast from it in turn (the host path is only for small CPU buffers here).
  void forward_all_gather(const void* send, void* recv, size_t nbytes) {
    for (int r = 0; r < size(); ++r) {
      std::string part =
          host_.broadcast(r == rank() ? std::string(static_cast<const char*>(send), nbytes) : std::string(), r);
      std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(r) * nbytes, part.data(), nbytes);
    }
  }

  Communicator& host_;
  int device_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// This process's obstacle to NCCL ("" when there is none), and its device.
std::string local_obstacle(const Communicator& host, int* device) {
  if (const std::string env = environment_obstacle(); !env.empty()) return env;
  if (!cuda_available()) return "no CUDA device";
  try {
    const int devices = device_count();
    if (host.local_size() > devices)
      return detail::concat(host.local_size(), " processes share ", devices, devices == 1 ? " GPU" : " GPUs",
                            " on a node; NCCL needs one GPU per process");
    *device = host.local_rank();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Root's summary of every rank's reason ("" from each rank that has none), the same on every rank.
std::string agreed_reason(Communicator& host, const std::string& mine) {
  const std::vector<std::string> all = host.gather(mine, 0);
  std::string text;
  if (host.is_root()) {
    std::map<std::string, std::vector<int>> ranks_of;
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty()) ranks_of[all[r]].push_back(static_cast<int>(r));
    for (const auto& [reason, ranks] : ranks_of) {
      text += (text.empty() ? "" : "; ") + reason;
      if (ranks.size() == all.size()) continue;  // every rank: no list
      text += ranks.size() == 1 ? " (rank " : " (ranks ";
      for (size_t i = 0; i < ranks.size(); ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
      text += ")";
    }
  }
  return host.broadcast(text, 0);
}

}  // namespace

DeviceCommunicator make_device_communicator(Communicator& host) {
  DeviceCommunicator out;
  if (host.size() == 1) {
    out.why = "one process";
    return out;
  }
  // 1. The local checks, and root's unique id, agreed before anyone enters NCCL.
  int device = 0;
  std::string obstacle = local_obstacle(host, &device);
  ncclUniqueId id{};
  if (obstacle.empty() && host.is_root()) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) obstacle = std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r);
  }
  out.why = agreed_reason(host, obstacle);
  if (!out.why.empty()) return out;
  // 2. Every rank joins; the start is agreed again (a rank whose ncclCommInitRank failed says so).
  const ncclUniqueId shared = shared_unique_id(host, id);
  std::string failure;
  try {
    out.comm = std::make_unique<NcclCommunicator>(host, device, shared);
  } catch (const Error& e) {
    failure = e.what();
  }
  out.why = agreed_reason(host, failure);
  if (!out.why.empty()) {
    out.comm.reset();
    out.why = "NCCL did not start: " + out.why;
    return out;
  }
  out.why = "NCCL, each process on cuda:<its rank on the node>";
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  POSGRAD_CHECK(cuda_available(), DeviceError, "the NCCL communicator needs a CUDA device; none is present");
  const int device = host.local_rank() % std::max(1, device_count());
  ncclUniqueId id{};
  if (host.is_root()) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::make_unique<NcclCommunicator>(host, device, shared_unique_id(host, id));
}

#else  // no NCCL in this build

DeviceCommunicator make_device_communicator(Communicator& host) {
  DeviceCommunicator out;
  const std::string env = environment_obstacle();
  out.why = host.size() == 1 ? "one process" : !env.empty() ? env : "this posgrad was built without NCCL";
  return out;
}

#endif

}  // namespace posgrad::dist
