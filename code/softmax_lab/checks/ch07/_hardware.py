"""The H200's per-SM limits that chapter 7's rules (warps, occupancy, targets) count with."""

WARPS = (1, 2, 4, 8, 16)
REGS_PER_SM = 65536      # 32-bit registers per SM (H100/H200, sm_90)
MAX_REGS_PER_THREAD = 255
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32
SHARED_PER_SM = 228 * 1024
SHARED_PER_PROGRAM = 227 * 1024  # the most shared memory one program may use
REG_OVERHEAD = 24        # the chapter's rough model: registers = values per thread + about 24
