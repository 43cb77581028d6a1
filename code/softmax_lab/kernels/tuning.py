"""The tuning policy: every tuned number of the package, as small rule lists, at the bottom of the import graph.

A rule list is ``[(limit, value), ...]``: ``pick(rules, key)`` gives the value of the first rule whose limit is
>= the key (limit ``None``: any key). Lists keyed by row length are per element size (4: fp32, 2: fp16/bf16).
The launchers read their defaults here; ``dispatch.py`` reads the kernel choices here and imports the kernels.
Why each limit sits where it does (the H200 sweeps behind them): docs/performance.md, "How the dispatcher chooses".
"""
from __future__ import annotations

import torch


def pick(rules, key):
    """The value of the first ``(limit, value)`` rule with ``key <= limit`` (limit ``None``: any key)."""
    for limit, value in rules:
        if limit is None or key <= limit:
            return value
    raise ValueError(f"no rule for {key} in {rules}")


def element_size(dtype: torch.dtype) -> int:
    """The key of the per-element-size lists: 2 for fp16/bf16, 4 otherwise."""
    return 2 if dtype in (torch.float16, torch.bfloat16) else 4


# --- Forward: (kernel, knobs) by row length. ROWS = rows per program.
# Short rows share a program (multirow); rows that fit one block get one program (fused) and more warps, fewer
# for rows a little longer than a power of two (their blocks are up to half padding), or stay in shared memory
# (resident); rows too long for one program's shared memory are split over a cluster (clustered) or shared by
# cooperating programs (cooperative); the longest fp32 rows read their chunk again from L2 (l2_reread).
# ``online=True``: the shared-memory kernels take each row's sum with its max as the chunks land (chunk_state.py),
# measured faster in every range it is set for (+0.3 to +5.3 points of copy; round 10). 16-bit rows past 16,384 on
# 16 warps: 0 to +1.7 points from 20,000 to 32,768 (equal at 24,576), 8 warps ahead at 16,384 and below (round 11).
# ``clustered_tma`` (rounds 13-14): the slice copied by TMA, held in registers: fp32 rows of 49,152-131,072 (95.1-98.0%
# of copy against 89.6-91.9 on clustered or cooperative), 16-bit rows of 65,537-73,728 (94.2 at 73,728 against 91.8
# streamed); or streamed from shared memory (``stream=True``), where registers held too few rows at a time: 16-bit
# rows of 57,345-65,536 (95.1 against 93.2 held), 73,729-131,072 (91.4 against 86.2 held at 77,824, 95.1-95.2
# against clustered's 87.5 at 128,256), 131,073-262,144 (95.3 on 8 programs of 8 warps at 163,840, 95.6 on 16 of 4
# at 262,144, against cooperative's 75-77), fp32 rows of 131,073-262,144 (95.3 against 93.3 held at 151,936; 92.9
# on 16 programs of 8 warps at 200,000 against cooperative's 88.9). The held form from round 13; the streamed form
# from round 14, once its race was found (docs/performance.md).
FORWARD = {
    4: [(128, ("multirow", dict(ROWS=8, num_warps=4))), (256, ("multirow", dict(ROWS=4, num_warps=4))),
        (512, ("multirow", dict(ROWS=2, num_warps=2))), (2048, ("multirow", dict(ROWS=1, num_warps=4))),
        (4096, ("fused", dict(num_warps=16))), (5120, ("fused", dict(num_warps=8))),
        (12288, ("fused", dict(num_warps=16))), (16384, ("fused", dict(num_warps=32))),
        (28672, ("resident", dict(num_warps=8, overlap=True, online=True))), (32768, ("fused", dict(num_warps=32))),
        (49151, ("cooperative", dict(BLOCK=8192, num_warps=4))),
        (65536, ("clustered_tma", dict(parts=8, num_warps=8))),
        (131072, ("clustered_tma", dict(parts=16, num_warps=4))),
        (163840, ("clustered_tma", dict(parts=16, num_warps=4, stream=True))),
        (262144, ("clustered_tma", dict(parts=16, num_warps=8, stream=True))),
        (1048576, ("cooperative", dict(BLOCK=8192, num_warps=8))),
        (None, ("l2_reread", dict(BLOCK=8192, num_warps=8)))],
    2: [(128, ("multirow", dict(ROWS=8, num_warps=4))), (256, ("multirow", dict(ROWS=4, num_warps=2))),
        (896, ("multirow", dict(ROWS=2, num_warps=2))), (1024, ("multirow", dict(ROWS=2, num_warps=4))),
        (2048, ("multirow", dict(ROWS=1, num_warps=4))), (4096, ("fused", dict(num_warps=8))),
        (6144, ("fused", dict(num_warps=4))), (7680, ("fused", dict(num_warps=8))),
        (8192, ("fused", dict(num_warps=16))),
        (16384, ("resident", dict(num_warps=8, overlap=True, online=True))),
        (57344, ("resident", dict(num_warps=16, overlap=True, online=True))),
        (65536, ("clustered_tma", dict(parts=4, num_warps=4, stream=True))),
        (73728, ("clustered_tma", dict(parts=8, num_warps=4))),
        (131072, ("clustered_tma", dict(parts=8, num_warps=4, stream=True))),
        (196608, ("clustered_tma", dict(parts=8, num_warps=8, stream=True))),
        (262144, ("clustered_tma", dict(parts=16, num_warps=4, stream=True))),
        (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))],
}
# Rows a little past a power of two (``multirow``'s ``tail=True``): the largest power of two the row holds in one
# tile, the rest (up to 1 / TAIL_PART of it and TAIL_MAX elements: 130 = 128 + 2, 1100 = 1024 + 76) in a second,
# narrow one, where one power-of-two tile would be up to half padding. 16-bit rows, and fp32 rows that are not whole
# 16-byte vectors, measured faster so on the H200 (fp32 rows of whole vectors measured either way: 520 and 8200
# faster, 80, 272 and 4200 slower, so FORWARD keeps them). A quarter past: fp32 77 = 64 + 13 measured faster (136.2
# against 123.7% of copy), bf16 160 = 128 + 32 slower (85.4 against 91.1), so 16-bit tails stop at an eighth.
# (ROWS, num_warps) by the power-of-two tile; None: no tail. TAIL_MAX: the longest tail tile measured faster (1100 =
# 1024 + 76, in a tile of 128); the one longer tail measured, 12,000 fp32 as 8192 + 4096, ran slower than fused.
TAIL_TILES = {4: [(32, None), (64, (8, 1)), (128, (4, 1)), (256, (2, 1)), (512, (1, 2)), (1024, (1, 4)),
                  (4096, (1, 8)), (8192, (1, 16)), (None, None)],
              2: [(64, None), (128, (8, 1)), (256, (4, 1)), (512, (2, 1)), (1024, (1, 1)), (2048, (4, 8)),
                  (8192, (1, 8)), (None, None)]}
TAIL_MAX = 128
TAIL_PART = {4: 4, 2: 8}
# Where a Gluon kernel cannot run (the CPU interpreter, GPUs before Hopper, where they were not measured, rows
# that do not start on 16 bytes): the kernels they replaced, by element size and row length.
GLUON_KERNELS = ("resident", "clustered", "clustered_tma")
GLUON_FALLBACK = {4: [(32768, ("fused", dict(num_warps=32))), (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))],
                  2: [(16384, ("fused", dict(num_warps=32))), (None, ("cooperative", dict(BLOCK=8192, num_warps=4)))]}
GLUON_CAPABILITY = (9, 0)  # the Gluon kernels were tuned on an H200 (9.0); resident runs from 8.0 (cp.async)

# --- Rows that do not start on 16 bytes (odd widths, odd strides, an odd first element): ``unaligned.py`` reads
# each row from the vector boundary before it, a window of n_cols + VEC - 1 elements, where that measured faster
# than the register kernels reading one element at a time: short fp32 rows in a tile, and every backward. On a
# GPU, longer rows whose window fits shared memory wait there (``unaligned_resident.py``, fewer warps for shorter
# windows: fp32 windows past 16,384, 16-bit ones of 1,032 to 57,344, two programs a multiprocessor at the
# longest; 16-bit windows from 24,576 and fp32 ones from 16,385 start on the 128-byte line before their row,
# ``line=128``, so that a warp's copies fill whole lines); the longest 16-bit rows go to cooperating programs.
# Short 16-bit rows keep the register kernels, 8 rows a program on one warp from 129 elements (in 4-byte pieces
# where the row allows: ``_launch.part_vector``), and so do 16-bit rows of whole 8-byte pieces that FORWARD gives
# fused or multirow (``dispatch._runnable``). Rows a little past a power of two take ``TAIL_TILES`` before these.
# ``online=True``: measured faster in every range (+1.8 to +7.1 points; round 10). Rules by window length: (kernel,
# knobs); ("tile", None): the unaligned tile with FORWARD's rows and warps for that window; None: the register
# kernels (FORWARD). Backward: 16-bit windows up to ``short`` take ROWS rows and num_warps warps per tile; 16-bit
# rows for cooperating programs, BLOCK and cooperative_warps (else the launchers' defaults).
UNALIGNED_FORWARD = {4: [(128, ("unaligned", dict(ROWS=8, num_warps=2))), (16384, ("tile", None)),
                         (57344, ("unaligned_resident", dict(num_warps=16, line=128, online=True))), (None, None)],
                     2: [(135, None), (263, ("multirow", dict(ROWS=8, num_warps=1))), (1031, None),
                         (2055, ("unaligned_resident", dict(num_warps=1, online=True))),
                         (16384, ("unaligned_resident", dict(num_warps=2, online=True))),
                         (24575, ("unaligned_resident", dict(num_warps=4, online=True))),
                         (57344, ("unaligned_resident", dict(num_warps=8, line=128, online=True))),
                         (None, ("unaligned_cooperative", dict(BLOCK=4096, num_warps=4)))]}
# Where ``unaligned_resident`` (a Gluon kernel) cannot run (not on a GPU it was tuned on; an output whose rows lie
# otherwise around vectors), by window length: what ran there before it (None: the register kernels; "tile":
# as in UNALIGNED_FORWARD).
UNALIGNED_GLUON_FALLBACK = {4: [(32768, ("tile", None)), (None, None)],
                            2: [(16391, None), (None, ("unaligned_cooperative", dict(BLOCK=4096, num_warps=4)))]}
UNALIGNED_BACKWARD = {4: dict(), 2: dict(short=256, ROWS=8, num_warps=2, BLOCK=8192, cooperative_warps=4)}

# --- Backward: [ROWS, BLOCK] tiles of BACKWARD_TILE elements for rows up to BACKWARD_TILE_COLS; longer rows:
# cooperative programs holding COOPERATIVE_BACKWARD_BYTES of y and as much of dy each. On the GPU the Gluon kernels
# were tuned on (GLUON_CAPABILITY), longer rows whose y and dy windows fit one program's shared memory go to
# ``resident_backward`` first: 16-bit rows, and fp32 rows that are not whole 16-byte vectors or do not start on
# 16 bytes (fp32 rows of whole vectors ran faster on the cooperative kernel: 95.5% of copy against 91.9 at
# 4096×20000). By row length: num_warps, or None (not there).
RESIDENT_BACKWARD = {4: [(16384, None), (28672, 8), (None, None)],
                     2: [(16384, None), (18432, 4), (57344, 16), (None, None)]}
RESIDENT_BACKWARD_WHOLE_VECTORS = {4: False, 2: True}  # rows of whole vectors there too
RESIDENT_BACKWARD_LINE = 128  # its windows start on the 128-byte line before each row (where y and dy allow)
# Rows of whole 16-byte vectors too long for one program (past RESIDENT_BACKWARD): ``clustered_backward``, its parts
# through the partners' shared memory, with these knobs by row length (None: the cooperative kernel). Measured at
# 65,536, 128,256 and 151,936 elements (8 programs of 4 warps: 88.2-97.1% of copy against the cooperative kernel's
# 80.4-91.8; docs/performance.md, round 8); not below 65,536 or past 151,936, so those rows keep the cooperative one.
CLUSTERED_BACKWARD = {4: [(65535, None), (151936, dict(parts=8, num_warps=4)), (None, None)],
                      2: [(65535, None), (151936, dict(parts=8, num_warps=4)), (None, None)]}
# Rows of whole 16-byte vectors past the tile kernel's: ``clustered_tma_backward`` first (round 15), y's and dy's
# slices copied by TMA into the shared memory of a cluster of programs, streamed from there twice (the dot, then dx),
# the parts sent by st.async; knobs by row length (None: the kernels above). Measured on the H200
# (h200-tma-backward{,-borders}-round15.json, % of copy against what ran there before): 16-bit rows 97.4-98.7
# against 79.5-95.8 (the tile kernel at 16,384, ``resident_backward`` past it) up to 57,344, 97.5-99.5 against
# 82.1-94.7 on the clustered and
# cooperative kernels from 65,536 to 262,144; fp32 rows 99.3-100.0 against the cooperative kernel's 89.9-95.7 from
# 20,000 to 50,000, 95.2-99.6 against 91.8-97.0 from 65,536 to 163,840. Not past those (fp32 200,000: 80.4 against
# the cooperative kernel's 89.2), nor at fp32 16,384 (100.0 against the tile kernel's 99.1: within a run's spread).
# fp32 rows of 131,073-163,840 on 16 programs have slices of 8,448-10,240 columns, a tile of 8,192 and a tail tile
# of 256-2,048 of y and of dy (up to 80 KB of shared memory: two programs a multiprocessor); held=True keeps the
# tail's columns in registers (64 KB, three). 16 programs of 8 warps, held, against 16 of 4 as before, % of copy:
# 512×135000 98.7 against 94.8, 512×147456 99.3 against 96.5, 512×147460 94.9 against 84.5, 512×151936 99.0 against
# 94.6, 512×163840 98.5 against 94.7 (8 warps without held: 98.0, 98.4, 83.9, 93.4, 96.1) (h200-held-tail-round17.json,
# -border-). Not measured on shorter rows.
TMA_BACKWARD = {4: [(16384, None), (32768, dict(parts=8, num_warps=4)), (131072, dict(parts=16, num_warps=4)),
                    (163840, dict(parts=16, num_warps=8, held=True)), (None, None)],
                2: [(16383, None), (32768, dict(parts=4, num_warps=4)), (65536, dict(parts=8, num_warps=4)),
                    (131072, dict(parts=16, num_warps=4)), (262144, dict(parts=16, num_warps=8)), (None, None)]}
# Rows that are not whole 16-byte vectors, copied as one line of elements (flat descriptors), by element size,
# as TMA_BACKWARD (h200-tma-backward-odd-round16.json, % of copy, best knobs against the dispatcher's kernel before:
# resident_backward or the unaligned cooperative kernel). 16-bit: 4096×16385 92.8 (2 × 4) against 86.0, 4096×20001
# 92.0 (2 × 4) against 84.8, 2048×32001 92.1 (4 × 4) against 86.1, 2048×50257 91.7 (8 × 4) against 85.8,
# 1024×100001 89.0 (16 × 4) against 68.6; the border between 2 × 4 and 4 × 4 (24,576) not measured. fp32:
# 4096×20001 96.3 (4 × 8) against 92.9, 2048×50257 95.2 (16 × 4; 8 × 8 95.4) against 86.8, 1024×128257 92.1
# (16 × 8) against 88.1. Round 15 stored dx an element at a time here (16-bit rows 28-41%): not taken then.
TMA_BACKWARD_FLAT = {4: [(16384, None), (32768, dict(parts=4, num_warps=8)), (65536, dict(parts=16, num_warps=4)),
                         (163840, dict(parts=16, num_warps=8)), (None, None)],
                     2: [(16383, None), (24576, dict(parts=2, num_warps=4)), (32768, dict(parts=4, num_warps=4)),
                         (65536, dict(parts=8, num_warps=4)), (131072, dict(parts=16, num_warps=4)), (None, None)]}
BACKWARD_TILE_COLS = 16384
BACKWARD_TILE = 4096
COOPERATIVE_BACKWARD_BYTES = 16384
CHUNKED_BACKWARD_BLOCK = 8192  # the older two-launch path (softmax_backward(..., chunks=...))

# --- Launcher defaults, when a learner calls a kernel without knobs.
WARPS_FOR_BLOCK = [(1024, 4), (4096, 8), (16384, 16), (None, 32)]  # ~8-16 elements per thread
MULTIROW_TILE = 4096  # elements per multirow program (ROWS = MULTIROW_TILE // BLOCK): bigger tiles spill
COOPERATIVE_BYTES = 32768  # input per cooperative program (8192 fp32, 16384 fp16/bf16)
COOPERATIVE_WARPS = [(1024, 1), (2048, 2), (4096, 4), (8192, 8), (None, 16)]  # 32 elements per thread
L2_REREAD_PROGRAMS_PER_SM = 4  # l2_reread: programs per SM (all resident at once)
L2_REREAD_BYTES = 24 << 20  # l2_reread: chunks in flight (read once, read again from the 60 MB L2) at most
STREAM_BLOCK = 4096  # the tile of online and split-row softmax (rows streamed through)
SPLIT_ROW_PROGRAMS_PER_SM = 4  # split-row: enough (row, chunk) programs to fill the GPU about 4 times


# --- Plain eager calls on small inputs: PyTorch's own kernel (``op._plan``) up to this many bytes, rows up to
# TORCH_EAGER_COLS (torch gives longer rows a block each: 4x70001 bf16 takes it 18 µs). Round 5 sent inputs up to
# 4 MiB there: a Triton launch cost the H200's host 12-13 µs, torch's kernel through our fast path 9-10. That launch
# was Triton's runner (round 16: the relaunch's "no hook" test never held); launched directly, our kernels' small
# calls cost what the routed ones cost (31 forward inputs up to 4 MiB, median 11.0 µs against 11.6 in round 17,
# 16.6 against 17.0 in round 16) in half the GPU time (2.1 µs against 4.0): 0, none routed (docs/performance.md,
# "Issue 28, round 17"). SOFTMAX_LAB_TORCH_BELOW=<bytes> turns the route on.
TORCH_EAGER_BYTES = 0
TORCH_EAGER_COLS = 16384
