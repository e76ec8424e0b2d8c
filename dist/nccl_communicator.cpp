// nccl_communicator.cpp — see nccl_communicator.h. Compiled only with CUDA and NCCL.
#include "dist/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>

#include "tensor/storage.h"

namespace posgrad::dist {

namespace {

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw DeviceError(std::string(call) + " failed: " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw DeviceError(std::string(call) + " failed: " + ncclGetErrorString(r));
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(Communicator& host) : host_(host) {
    POSGRAD_CHECK(cuda_available(), DeviceError, "the NCCL communicator needs a CUDA device; none is present");
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    // The node-local rank: ranks are numbered node by node by mpirun and srun (block placement); a
    // cyclic placement still gives distinct devices whenever local_size() <= devices.
    device_ = (host.rank() % std::max(1, host.local_size())) % devices;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id;
    if (host.is_root()) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::string bytes =
        host.broadcast(host.is_root() ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : std::string(), 0);
    POSGRAD_CHECK(bytes.size() == sizeof id, DeviceError, "NCCL bootstrap: received ", bytes.size(),
                  " bytes of the unique id, expected ", sizeof id);
    std::memcpy(&id, bytes.data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, host.size(), id, host.rank()), "ncclCommInitRank");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_size() const override { return host_.local_size(); }
  std::string name() const override { return "nccl"; }
  void barrier() override { host_.barrier(); }

 protected:
  bool supports_device(Device dev) const override { return dev.is_cuda() && dev.index == device_; }

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

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host) {
  return std::make_unique<NcclCommunicator>(host);
}

}  // namespace posgrad::dist
