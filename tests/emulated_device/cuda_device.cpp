// cuda_device.cpp — the emulated CUDA device (fake_device.h): the emulation of
// tests/support/cuda_emulation.cpp a third time, with the kernel files at their real names
// (::posgrad::kernels::cuda) and backend.cu compiled against the fake runtime; with NCCL,
// dist/nccl_communicator.cpp too, against fake_nccl.h. Linked as an object
// library ahead of posgrad_tensor, it supplies every symbol of the .cu objects, so the linker takes
// none of those from the archive and the program's CUDA path runs here.
#include "emulated_device/fake_device.h"

#if POSGRAD_HAVE_MPI
#include <mpi.h>  // fake_nccl.h moves the bytes of a job's collectives with MPI
#endif

#define POSGRAD_EMU_NS emu_device
#define POSGRAD_EMU_ROW_BLOCK 64
#define POSGRAD_EMU_ATTN_TILE 32
#define POSGRAD_EMU_DEVICE 1
#include "support/cuda_emulation.cpp"  // NOLINT(bugprone-suspicious-include): the same model, as the device

// NCCL, and the communicator over it, on the fake runtime (fake_nccl.h).
#if POSGRAD_HAVE_NCCL
namespace emu_device {
#include "emulated_device/fake_nccl.h"
}  // namespace emu_device
#include "dist/nccl_communicator.cpp"  // NOLINT(bugprone-suspicious-include): against the fake NCCL
#endif
