// communicator.cpp — the collectives every implementation shares (checks, staging through host
// memory, the rank-ordered sum), the single-process communicator and the process's job.
#include "dist/communicator.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "dist/mpi_communicator.h"
#include "tensor/kernels/kernels.h"
#include "tensor/storage.h"

namespace posgrad::dist {

namespace {

size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

void check_tensor(const Tensor& t, const char* what, bool float_only) {
  POSGRAD_CHECK(t.defined(), ValueError, what, ": the tensor is undefined");
  POSGRAD_CHECK(t.is_contiguous(), ValueError, what, ": the tensor must be contiguous, got ", t.str());
  POSGRAD_CHECK(!float_only || t.dtype() == DType::Float32 || t.dtype() == DType::Float64, ValueError, what,
                ": the tensor must be float32 or float64, got ", t.str());
}

// Copies n bytes between two places of which at least one may be on a device.
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (n == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu())
    std::memcpy(dst, src, n);
  else
    backend(DeviceType::CUDA).copy(dst, dst_dev, src, src_dev, n);
}

template <typename T>
void ordered_sum(T* out, const T* rows, int64_t n, int ranks, Device dev) {
  // out = rows[0]; out = out + rows[r] for r = 1 .. ranks - 1: the association fixed by rank order.
  copy_bytes(out, dev, rows, dev, static_cast<size_t>(n) * sizeof(T));
  for (int r = 1; r < ranks; ++r)
    POSGRAD_KERNEL(dev, binary_forward<T>, out, out, rows + static_cast<int64_t>(r) * n, n, kernels::BinaryOp::Add);
}

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  int local_rank() const override { return 0; }
  std::string name() const override { return "single"; }
  void barrier() override {}

 protected:
  void all_gather_bytes(const void* send, void* recv, size_t nbytes, Device dev) override {
    if (send != recv) copy_bytes(recv, dev, send, dev, nbytes);
  }
  void broadcast_bytes(void*, size_t, int, Device) override {}
  std::vector<std::string> gather_strings(const std::string& s, int) override { return {s}; }
};

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> w = make_single_communicator();
  return w;
}

bool mpi_initialised = false;

}  // namespace

// ---- the shared collectives -------------------------------------------------------------------------

void Communicator::check_root(int root, const char* what) const {
  POSGRAD_CHECK(root >= 0 && root < size(), ValueError, what, ": root ", root, " is not a rank of this job (0 .. ",
                size() - 1, ")");
}

void Communicator::all_reduce_sum(Tensor& t) {
  check_tensor(t, "all_reduce_sum", true);
  const Device dev = t.device();
  if (!supports_device(dev)) {  // stage through host memory
    Tensor host = t.to(Device::cpu()).contiguous();
    all_reduce_sum(host);
    copy_bytes(t.raw_data(), dev, host.raw_data(), Device::cpu(), nbytes_of(t));
    return;
  }
  if (t.numel() == 0) return;
  const int64_t n = t.numel();
  Tensor rows = Tensor::empty({size(), n}, t.dtype(), dev);  // (N, n): rank r's buffer in row r
  all_gather_bytes(t.raw_data(), rows.raw_data(), nbytes_of(t), dev);
  if (t.dtype() == DType::Float32)
    ordered_sum(t.data<float>(), rows.data<float>(), n, size(), dev);
  else
    ordered_sum(t.data<double>(), rows.data<double>(), n, size(), dev);
}

double Communicator::all_reduce_sum(double x) {
  Tensor t = Tensor::scalar(x, DType::Float64);
  all_reduce_sum(t);
  return t.item();
}

void Communicator::broadcast(Tensor& t, int root) {
  check_tensor(t, "broadcast", false);
  check_root(root, "broadcast");
  const Device dev = t.device();
  if (!supports_device(dev)) {
    Tensor host = t.to(Device::cpu()).contiguous();
    broadcast(host, root);
    copy_bytes(t.raw_data(), dev, host.raw_data(), Device::cpu(), nbytes_of(t));
    return;
  }
  if (t.numel() == 0) return;
  broadcast_bytes(t.raw_data(), nbytes_of(t), root, dev);
}

std::string Communicator::broadcast(const std::string& s, int root) {
  check_root(root, "broadcast");
  if (size() == 1) return s;
  uint64_t len = s.size();
  broadcast_bytes(&len, sizeof len, root, Device::cpu());
  std::string out = rank() == root ? s : std::string(static_cast<size_t>(len), '\0');
  if (!out.empty()) broadcast_bytes(out.data(), out.size(), root, Device::cpu());
  return out;
}

std::vector<std::string> Communicator::gather(const std::string& s, int root) {
  check_root(root, "gather");
  return gather_strings(s, root);
}

std::unique_ptr<Communicator> make_single_communicator() { return std::make_unique<SingleCommunicator>(); }

// ---- the process's job -------------------------------------------------------------------------------

Launch launch_from_environment() {
  const char* forced = std::getenv("POSGRAD_DIST");
  if (forced && *forced) {
    const std::string f = forced;
    if (f == "mpi") return Launch::Mpi;
    if (f == "single") return Launch::Single;
    throw UsageError("POSGRAD_DIST is '" + f +
                     "'; it must be 'mpi' (start MPI) or 'single' (one process), or unset "
                     "(MPI under mpirun or srun, else one process)");
  }
  return launch_reason().empty() ? Launch::Single : Launch::Mpi;
}

std::string launch_reason() {
  for (const char* v : {"POSGRAD_DIST", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMIX_RANK"}) {
    const char* s = std::getenv(v);
    if (s && *s && !(std::string(v) == "POSGRAD_DIST" && std::string(s) != "mpi")) return std::string(v) + "=" + s;
  }
  return "";
}

bool mpi_built() { return POSGRAD_HAVE_MPI != 0; }
bool nccl_built() { return POSGRAD_HAVE_NCCL != 0; }

Communicator& world() { return *world_slot(); }

void init_world(int* argc, char*** argv) {
  if (launch_from_environment() == Launch::Single) return;
#if POSGRAD_HAVE_MPI
  world_slot() = make_mpi_communicator(argc, argv);
  mpi_initialised = true;
  if (world().size() > 1) omp_set_num_threads(default_threads());
#else
  (void)argc;
  (void)argv;
  throw UsageError("started as one of several processes (" + launch_reason() +
                   ") but this posgrad was built without MPI (configure with -DPOSGRAD_MPI=ON after installing "
                   "libopenmpi-dev, or run it alone)");
#endif
}

void finalize_world() {
  if (!mpi_initialised) return;
#if POSGRAD_HAVE_MPI
  world_slot() = make_single_communicator();
  finalize_mpi();
#endif
  mpi_initialised = false;
}

void abort_world(int status) {
#if POSGRAD_HAVE_MPI
  if (mpi_initialised && world().size() > 1) abort_mpi(status);
#endif
  (void)status;
}

int default_threads() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = std::max(1, hw / std::max(1, world().local_size()));
  return std::max(1, std::min(share, omp_get_num_procs()));
}

}  // namespace posgrad::dist
