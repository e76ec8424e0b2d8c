// cuda_emulation_production.cpp — the emulation of cuda_emulation.cpp a second time, in namespace
// emu_production, with the block sizes the kernels have on the GPU (row blocks of 256 threads,
// attention tiles of 128 keys or queries), so that tests can run the production tiling too: several
// full tiles, the multi-tile online-softmax rescale, 128-thread reductions (cuda_emulation.h).
#define POSGRAD_EMU_NS emu_production
#define POSGRAD_EMU_ROW_BLOCK 256
#define POSGRAD_EMU_ATTN_TILE 128
#include "cuda_emulation.cpp"  // NOLINT(bugprone-suspicious-include): the same model, other sizes
