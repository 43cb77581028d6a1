"""Small helpers every launcher shares: input checks, knob checks and the output buffer. No kernels here.

The launchers are raw kernel launches: they record no gradient, so they refuse inputs that require grad
(``softmax_lab.softmax`` is the differentiable operator). ``out=`` is checked the way ATen checks it.
"""
from __future__ import annotations

import torch

from ..device import DEVICE
from .tuning import WARPS_FOR_BLOCK, pick

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def check_tensor(x, name: str = "x", dtype=None, meta_ok: bool = False) -> None:
    """``x`` is a tensor on the kernels' device, of a dtype they take (``dtype``: the one it will be cast to
    first, as in ``softmax(x, dim, dtype)``). Every entry point (launchers, masked, the operator) checks here.
    ``meta_ok``: a meta tensor passes too (the operator's shape-only calls)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout is not torch.strided:
        raise TypeError(f"{name} is a {x.layout} tensor; the kernels take dense tensors: use .to_dense() first")
    want = x.dtype if dtype is None else dtype
    if want not in FLOAT_DTYPES:
        if not isinstance(want, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype or None, got {type(want).__name__}")
        if not want.is_floating_point:
            raise TypeError(f"{name} has dtype {want}: softmax needs a floating-point tensor; convert it first, "
                            "e.g. x.float()")
        raise TypeError(f"{name} has dtype {want}; the kernels take float16, bfloat16 or float32 "
                        "(they accumulate in float32)")
    if x.device.type != DEVICE.type and not (meta_ok and x.is_meta):
        raise ValueError(f"{name} is on {x.device} but kernels run on {DEVICE.type}: "
                         "move it with .to(softmax_lab.DEVICE)")


def check_input(x: torch.Tensor, name: str = "x") -> None:
    """What a raw launcher takes: a 2-D float tensor on the kernels' device that needs no gradient."""
    check_tensor(x, name)
    if x.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rows, cols] (softmax over the last dim), got shape {tuple(x.shape)}; "
                         "softmax_lab.softmax takes any shape")
    check_no_grad(x, name)


def check_mask(mask, x: torch.Tensor, name: str = "x") -> None:
    """An SDPA-style mask for ``x``: bool (True = takes part) or float (added), on x's device, broadcasting
    to x's shape (and not past it)."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.device != x.device:
        raise ValueError(f"mask is on {mask.device} but {name} is on {x.device}")
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool (True = takes part) or floating point (added), got {mask.dtype}")
    try:
        shape = torch.broadcast_shapes(mask.shape, x.shape)
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {name} of shape "
                         f"{tuple(x.shape)}") from None
    if shape != x.shape:
        raise ValueError(f"mask of shape {tuple(mask.shape)} would broadcast {name} of shape {tuple(x.shape)} "
                         "to a bigger shape")


def check_no_grad(x: torch.Tensor, name: str = "x") -> None:
    """A raw launch would return a result with no grad_fn: gradients would silently stop here. Refuse."""
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name} requires grad, but a kernel launcher records no gradient: use "
                           "softmax_lab.softmax(x, dim) (a differentiable operator), or pass x.detach()")


# Knobs used as tl.arange sizes must be powers of two; Triton's largest block has 2**20 elements.
POWER_OF_TWO_KNOBS = ("BLOCK", "ROWS", "num_warps", "parts", "vectors")
MAX_BLOCK = 1 << 20


def check_knobs(**knobs) -> None:
    """Raise for a knob the kernels cannot take (None means "the default"; 0 is not a default)."""
    for name, value in knobs.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int (or None for the default), got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be a positive integer (None for the default), got {value}")
        if name in POWER_OF_TWO_KNOBS and value & (value - 1):
            raise ValueError(f"{name} must be a power of two (it sizes a tl.arange), got {value}")
        if name == "num_warps" and value > 32:
            raise ValueError(f"num_warps must be at most 32 (1024 threads per program), got {value}")
        if name == "BLOCK" and value > MAX_BLOCK:
            raise ValueError(f"BLOCK must be at most {MAX_BLOCK} (Triton's largest block), got {value}")
    rows, block = knobs.get("ROWS"), knobs.get("BLOCK")
    if rows and block and rows * block > MAX_BLOCK:
        raise ValueError(f"ROWS * BLOCK = {rows * block} is more than Triton's largest block ({MAX_BLOCK})")


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """Kernels step between rows with the row stride, but need the elements of a row next to each other."""
    return x if x.stride(1) == 1 or x.shape[1] <= 1 else x.contiguous()


def output_for(x: torch.Tensor, out: torch.Tensor | None, name: str = "out", in_place: bool = True,
               x_name: str = "x") -> torch.Tensor:
    """The caller's ``out`` (checked), or a new tensor like ``x`` (called ``x_name`` in messages). ``in_place``: the
    kernel may write over ``x`` itself (``out`` is ``x``: same memory, same strides); any other overlap is refused."""
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(out).__name__}")
    if tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name} must match {x_name}: shape {tuple(x.shape)}, {x.dtype} on {x.device}; "
                         f"got shape {tuple(out.shape)}, {out.dtype} on {out.device}")
    if out.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(f"{name} requires grad, but functions with out=... arguments don't support "
                           "automatic differentiation")
    if out.shape[1] > 1 and out.stride(1) != 1:
        raise ValueError(f"{name} must have contiguous rows (stride 1 along the last dim)")
    n_rows, n_cols = out.shape  # rows of out are contiguous now: they overlap when the row stride is too small
    if n_rows > 1 and n_cols > 0 and out.stride(0) < max(n_cols, 1):  # e.g. an expand()ed tensor, stride 0
        raise ValueError(f"{name} has internal overlap (several elements share one memory location, e.g. "
                         "after expand()): the kernel would write them in an undefined order; pass a tensor "
                         "with its own memory, e.g. torch.empty_like(x)")
    if overlaps(out, x) and not (in_place and out.data_ptr() == x.data_ptr() and out.stride() == x.stride()):
        allowed = f"only out={x_name} itself (same memory, same strides) is allowed" if in_place else \
            f"this kernel reads whole rows while other programs write them, so out must not overlap {x_name}"
        raise ValueError(f"{name} overlaps {x_name} in memory ({allowed}): pass a separate tensor")
    return out


def refuse_overlap(dx: torch.Tensor, dy: torch.Tensor) -> None:
    """A backward's dx may be dy itself (each kernel reads a position of dy before it writes dx there), or lie
    beside it in one buffer, never over part of it."""
    if overlaps(dx, dy) and not (dx.data_ptr() == dy.data_ptr() and dx.stride() == dy.stride()
                                 and dx.dtype == dy.dtype):
        raise ValueError("out (dx) overlaps dy in memory (only out=dy itself, same memory and strides, is allowed): "
                         "pass a separate tensor")


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` share memory. Exact for 2-D tensors whose rows or columns are contiguous
    (``dy = B[:, :n]`` and ``out = B[:, n:]`` share a buffer, not an element); for other layouts, True when their byte
    ranges intersect."""
    if a.numel() == 0 or b.numel() == 0 or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    (a0, a1), (b0, b1) = byte_range(a), byte_range(b)
    if not (a0 < b1 and b0 < a1):
        return False
    rows_a, rows_b = row_intervals(a), row_intervals(b)
    if rows_a is None and a.dim() == 2:  # (a transposed view: the same elements, in rows of its transpose)
        rows_a = row_intervals(a.t())
    if rows_b is None and b.dim() == 2:
        rows_b = row_intervals(b.t())
    if rows_a is None or rows_b is None:
        return True
    return rows_meet(*rows_a, *rows_b) if rows_a[1] <= rows_b[1] else rows_meet(*rows_b, *rows_a)


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def row_intervals(t: torch.Tensor):
    """(first byte, rows, row stride in bytes, row length in bytes) of a 2-D tensor with contiguous rows, or None."""
    if t.dim() != 2 or (t.shape[1] > 1 and t.stride(1) != 1):
        return None
    rows, cols = t.shape
    return t.data_ptr(), rows, (t.stride(0) if rows > 1 else 0) * t.element_size(), cols * t.element_size()


def rows_meet(a0, a_rows, a_stride, a_len, b0, b_rows, b_stride, b_len) -> bool:
    """Whether row i of a, bytes [a0 + i·a_stride, + a_len), meets row k of b for some i, k (a has the fewer rows):
    when -b_len < d + k·b_stride < a_len, with d = b0 - (a0 + i·a_stride), the start of b's row 0 seen from a's row i.
    Equal strides: one d for every pair, with t = k - i in (-a_rows, b_rows) in place of k."""
    if a_stride == b_stride:
        return meets(b0 - a0, -(a_rows - 1), b_rows - 1, a_stride, a_len, b_len)
    if a_rows <= 256:
        return any(meets(b0 - (a0 + i * a_stride), 0, b_rows - 1, b_stride, a_len, b_len) for i in range(a_rows))
    if a_rows > 1 << 20:  # (too many rows to look through for an odd pair of views: answer as the byte ranges do)
        return True
    d = (b0 - a0) - torch.arange(a_rows, dtype=torch.int64, device="cpu") * a_stride  # every row of a at once
    return bool(meets(d, 0, b_rows - 1, b_stride, a_len, b_len).any())


def meets(d, k_first, k_last, stride, a_len, b_len):
    """Is there a k in [k_first, k_last] with -b_len < d + k·stride < a_len? (``d`` an int, or an int64 tensor of
    them: then a tensor of answers.)"""
    if stride == 0:
        return (-b_len < d) & (d < a_len)
    first = (-b_len - d) // stride + 1  # the first k past -b_len
    last = -((d - a_len) // stride) - 1  # the last k short of a_len
    if isinstance(d, torch.Tensor):
        return first.clamp(min=k_first) <= last.clamp(max=k_last)
    return max(k_first, first) <= min(k_last, last)


def prepare(x: torch.Tensor, out: torch.Tensor | None, max_cols: int | None = None, kernel: str = "",
            instead: str = "", in_place: bool = True, **knobs) -> tuple[torch.Tensor, torch.Tensor]:
    """What every launcher does first: check ``x`` (and its row length against ``max_cols``) and the tuning
    ``knobs``, make the rows of ``x`` contiguous, and get the output (``in_place``: see ``output_for``).
    Returns ``(x, y)``."""
    check_input(x)
    check_knobs(**knobs)
    if max_cols is not None:
        check_row_length(x.shape[1], max_cols, kernel, instead)
    y = output_for(x, out, in_place=in_place)  # (against the caller's x, before any copy of it)
    return rows_view(x), y


def backward_inputs(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None):
    """What every backward launcher does first: check ``y`` and ``dy`` (2-D, alike in shape; their dtypes may
    differ: each is read as it is, the sums are float32), get dx (``out`` checked against the caller's y and dy: it
    may be either of them itself, or lie beside them in one buffer, never over part of one), then make the rows of
    y and dy contiguous. Returns ``(y, dy, dx)``; dx has y's dtype."""
    check_input(y, "y")
    check_input(dy, "dy")
    if dy.shape != y.shape:
        raise ValueError(f"dy has shape {tuple(dy.shape)} but y has shape {tuple(y.shape)}")
    dx = output_for(y, out, "out (dx)", x_name="y")
    refuse_overlap(dx, dy)
    return rows_view(y), rows_view(dy), dx


def check_row_length(n_cols: int, max_cols: int, kernel: str, instead: str) -> None:
    if n_cols > max_cols:
        raise ValueError(f"{kernel} supports rows of up to {max_cols} elements, got {n_cols}; use {instead}")


SHARED_BYTES = 227 * 1024  # shared memory one program may use on an H100/H200 (the Gluon kernels' rows)


def shared_memory_cols(dtype: torch.dtype) -> int:
    """The longest row (a power of two) whose copy fits one program's shared memory: 65536 fp16/bf16, 32768 fp32."""
    return 1 << (SHARED_BYTES // (2 if dtype in (torch.float16, torch.bfloat16) else 4)).bit_length() - 1


def prepare_gluon(x, out, kernel: str, refusal=None, shared_memories: int = 1, **knobs):
    """``prepare`` for the Gluon kernels: also a GPU that can run them, a row that fits ``shared_memories``
    programs' shared memory, rows on 16 bytes. ``refusal(x)``: the kernel's own reasons (default
    ``gluon_refusal(x, kernel)``). Returns ``(x, y)``. (In place is safe for them: a program reads its whole
    row, or slice, before it writes it, and no other program reads that part.)"""
    check_input(x)
    max_cols = shared_memories * shared_memory_cols(x.dtype)
    x, y = prepare(x, out, max_cols, kernel, "cooperative_softmax", **knobs)
    why = refusal(x) if refusal else gluon_refusal(x, kernel)
    if why:
        raise ValueError(why)
    return x, y


def gluon_refusal(x: torch.Tensor, kernel: str, row_bytes: int | None = None, clusters: bool = False) -> str:
    """Why the Gluon kernel ``kernel`` (staged, resident, clustered) cannot take ``x``, or '' when it can. It needs
    a GPU with ``cp.async`` (compute capability 8.0 or newer; 9.0 for ``clusters`` of programs) and
    ``row_bytes`` of shared memory per program (default: the row, rounded up to a power of two), and rows that
    start on 16 bytes: its copies move whole 16-byte vectors, up to the vector holding a row's last element,
    which must lie inside x's memory."""
    if x.device.type != "cuda":
        return (f"{kernel} needs a GPU: it is a Gluon kernel, which Triton's CPU interpreter cannot run; "
                f"use {'cooperative_softmax' if clusters else 'cooperative_softmax or fused_softmax'}")
    capability, shared = device_limits(x.device)
    row_bytes = row_bytes or next_power_of_2(x.shape[1]) * x.element_size()
    return device_refusal(kernel, capability, shared, row_bytes, clusters) or vector_refusal(x, kernel)


_LIMITS: dict = {}


def device_limits(device: torch.device) -> tuple[tuple[int, int], int]:
    """(compute capability, shared memory one program may use) of a GPU, asked once per device."""
    if device.index not in _LIMITS:
        props = torch.cuda.get_device_properties(device)
        _LIMITS[device.index] = ((props.major, props.minor),
                                 getattr(props, "shared_memory_per_block_optin", SHARED_BYTES))
    return _LIMITS[device.index]


def device_refusal(kernel: str, capability: tuple[int, int], shared: int, row_bytes: int,
                   clusters: bool = False) -> str:
    """The GPU half of ``gluon_refusal`` (a plain function, so that it is tested without a GPU)."""
    if clusters and capability < (9, 0):
        return (f"{kernel} runs a row on a cluster of programs, which GPUs of compute capability "
                f"{capability[0]}.{capability[1]} cannot launch (9.0 or newer: H100, H200...); use cooperative_softmax")
    if capability < (8, 0):
        return (f"{kernel} needs cp.async, which GPUs of compute capability {capability[0]}.{capability[1]} "
                "do not have (8.0 or newer: A100, RTX 30xx, H100...); use cooperative_softmax or fused_softmax")
    if row_bytes > shared:
        instead = "more parts, or cooperative_softmax" if clusters else "cooperative_softmax or fused_softmax"
        return (f"{kernel} needs {row_bytes} bytes of shared memory per program for this row; this GPU gives "
                f"{shared} bytes: use {instead}")
    return ""


def vector_refusal(x: torch.Tensor, kernel: str, name: str = "x") -> str:
    """The 16-byte half of ``gluon_refusal``: rows less than 2**31 elements apart (the kernels multiply the stride
    back in 32 bits), starting on 16 bytes, and the last row's last vector is x's (``name``: what x is called)."""
    vec = 16 // x.element_size()
    if not x.numel():
        return ""
    if x.shape[0] > 1 and x.stride(0) >= 2**31:  # the kernels multiply the stride back in 32 bits (it is faster)
        return (f"{kernel} takes rows less than 2**31 elements apart; {name}'s rows are {x.stride(0)} apart: make "
                f"{name} contiguous, or use cooperative_softmax")
    if x.data_ptr() % 16 or (x.shape[0] > 1 and x.stride(0) % vec):
        return (f"{kernel} copies rows in 16-byte pieces, so every row of {name} must start on a 16-byte boundary "
                f"(row stride a multiple of {vec} elements); pad the rows to a multiple of {vec}, or use "
                "cooperative_softmax")
    n_rows, n_cols = x.shape
    end = x.storage_offset() + (n_rows - 1) * x.stride(0) + cdiv(n_cols, vec) * vec  # elements the copies reach
    if end * x.element_size() > x.untyped_storage().nbytes():
        return (f"{kernel} copies whole 16-byte vectors, and the vector holding the last element of {name} passes "
                f"the end of {name}'s memory (a row of {n_cols} elements is not a multiple of {vec}); pad the row, "
                "or use cooperative_softmax")
    return ""


# The cooperative kernels' scratch memory (their (m, l) pairs and counters), one pair of buffers per GPU and
# stream: key (device index, raw stream).
_SCRATCH: dict = {}


def scratch(device: torch.device, n_floats: int, n_counts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(floats, counts)``: room for ``n_floats`` float32 values and ``n_counts`` int32 counters that are 0, for
    one launch of a cooperative kernel that finishes in one launch. The kernels set their counters back to 0
    as they finish (``cooperative.count_in``) and launches on one stream run one after another, so each
    stream keeps one pair of buffers (grown when too small) instead of a ``torch.zeros`` (an allocation and a
    fill kernel) per call. Streams never share them. On the CPU, and while a CUDA graph is captured (its
    replays may run on any stream), new memory each call."""
    if device.type != "cuda" or torch._C._cuda_isCurrentStreamCapturing():
        return (torch.empty(n_floats, dtype=torch.float32, device=device),
                torch.zeros(n_counts, dtype=torch.int32, device=device))
    key = (device.index, torch._C._cuda_getCurrentRawStream(device.index))
    got = _SCRATCH.get(key)
    if got is None or got[0].numel() < n_floats or got[1].numel() < n_counts:
        n_floats, n_counts = max(n_floats, got[0].numel() if got else 0), max(n_counts, got[1].numel() if got else 0)
        got = _SCRATCH[key] = (torch.empty(n_floats, dtype=torch.float32, device=device),
                               torch.zeros(n_counts, dtype=torch.int32, device=device))
    return got


def scratch_pointers(device: torch.device, n_floats: int, n_counts: int):
    """``scratch``'s two buffers as ``(floats.data_ptr(), counts.data_ptr(), buffers)`` (a plan's launch takes
    addresses; keep ``buffers`` until it has launched)."""
    floats, counts = buffers = scratch(device, n_floats, n_counts)
    return floats.data_ptr(), counts.data_ptr(), buffers


_SMS: dict = {}


def num_sms(device: torch.device) -> int:
    """Multiprocessors of the GPU (programs run on these); 4 in the CPU interpreter, to keep grids small.
    Asked once per device (a property query costs microseconds)."""
    if device.type != "cuda":
        return 4
    if device.index not in _SMS:
        _SMS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SMS[device.index]


def default_num_warps(block: int) -> int:
    """More warps for wider blocks: roughly 8-16 elements per thread (``tuning.WARPS_FOR_BLOCK``)."""
    return pick(WARPS_FOR_BLOCK, block)


def split_in_chunks(n_cols: int, chunks: int, block: int) -> tuple[int, int]:
    """Cut a row into about ``chunks`` pieces of whole tiles of ``block`` elements, no more pieces than tiles.
    Returns ``(chunks, chunk_size)``: the chunk count again, since rounding the size up can leave fewer."""
    chunks = max(1, min(chunks, cdiv(n_cols, block)))
    chunk_size = cdiv(cdiv(n_cols, chunks), block) * block
    return cdiv(n_cols, chunk_size), chunk_size


def row_vector(n_cols: int, *tensors: torch.Tensor) -> int:
    """The ``VEC`` knob of the register kernels (fused, multirow, cooperative, the backward tile), and the Gluon
    kernels' ``OUT_VEC`` (``row_vector(n_cols, y)``): the elements of one 16-byte vector when the row length and
    every tensor's row stride are whole vectors, else 1. The kernel receives those ints divided by VEC and
    multiplies them back, so the compiler knows each row starts on 16 bytes and loads and stores 16 bytes at a
    time. (Triton marks an int argument as a multiple of 16 only when it is one: without this, rows of 1,000
    fp32 or 8,200 bf16 elements, whole vectors all, were read and written one element at a time.)"""
    vec = 16 // max(t.element_size() for t in tensors)
    whole = n_cols % vec == 0 and all(t.shape[0] <= 1 or t.stride(0) % vec == 0 for t in tensors)
    small = max(n_cols, *[t.stride(0) for t in tensors]) < 2**31  # (multiplied back in 32 bits; else 64-bit ints)
    return vec if whole and small else 1


def part_vector(n_cols: int, *tensors: torch.Tensor) -> int:
    """``row_vector``, or, where 16-bit rows are not whole 16-byte vectors, the widest smaller piece (2 or 4
    elements: 4 or 8 bytes) that the row length and every row stride are whole multiples of; 1 if none. The
    register kernels take it as ``VEC`` the same way: a bf16 row of 130 elements (260 bytes) then moves 4 bytes
    per access instead of 2."""
    vec = row_vector(n_cols, *tensors)
    size = max(t.element_size() for t in tensors)
    if vec > 1 or size > 2 or max(n_cols, *[t.stride(0) for t in tensors]) >= 2**31:
        return vec  # (fp32 rows in 8-byte pieces measured no faster than in elements)
    vec = 16 // size // 2
    while vec > 1 and not (n_cols % vec == 0 and all(t.shape[0] <= 1 or t.stride(0) % vec == 0 for t in tensors)):
        vec //= 2
    return vec


def whole_chunks(n_elements: int, chunk: int) -> int:
    """Chunks of ``chunk`` elements that hold ``n_elements``: all counts up to 8, then one of 4 counts per power
    of two (10, 12, 14, 16, 20, 24, ...), so rows of any length compile few kernels and take at most a fifth
    more room than they need (a power of two: up to half)."""
    chunks = cdiv(n_elements, chunk)
    step = max(1, next_power_of_2(chunks) // 8)
    return cdiv(chunks, step) * step


# Plain-Python twins of triton.cdiv and triton.next_power_of_2. Triton's versions go through a constexpr
# wrapper costing microseconds per call, and a launcher calls them on every launch (launch overhead matters
# on small inputs, where the kernel itself takes microseconds on a GPU).
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def power_of_2_at_most(n: int) -> int:
    """The largest power of two <= n (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def relauncher(kernel, grid, args, per_call=2, **options):
    """Compile ``kernel`` as ``kernel[grid](*args, **options)`` would, and return ``run(out_ptr, in_ptr)``,
    which launches the compiled kernel again with new output and input addresses (ints: ``t.data_ptr()``)
    in the first two arguments and the rest as given here (``per_call=3``: ``run(out_ptr, in_ptr, ptr)``,
    a third address given at each call too). Valid while those tensors have the dtypes and the
    16-byte pointer alignment of ``args`` (Triton compiles one kernel per kind); the caller's cache key
    ensures it, and that they are on this GPU.

    Triton's ``kernel[grid](...)`` binds the arguments, computes its cache key, looks the compiled kernel up
    and builds launch metadata on every call (microseconds of Python); ``run`` calls the compiled launcher
    directly, and passes addresses as ints, which spares it two driver queries (``cuPointerGetAttribute``).
    Returns None in the CPU interpreter (nothing is compiled there)."""
    compiled = kernel.warmup(*args, grid=grid, **options)
    if compiled is None or not hasattr(compiled, "function"):
        return None
    compiled._init_handles()
    launcher = compiled.run
    fixed = (*args[per_call:], *[options[name] for name in kernel.arg_names[len(args):]])  # + the constexprs
    g0, g1, g2 = (*grid, 1, 1)[:3]
    runner = compiled[(g0, g1, g2)]  # (Triton's own: launch metadata, hooks, scratch memory)
    if (not hasattr(launcher, "launch") or launcher.global_scratch_size
            or getattr(launcher, "profile_scratch_size", 0)):  # scratch memory: allocated per launch by the runner
        return lambda *ptrs: runner(*ptrs, *fixed)
    device = torch.cuda.current_device()
    stream = torch._C._cuda_getCurrentRawStream
    function, meta = compiled.function, compiled.packed_metadata
    launch, coop, pdl = launcher.launch, launcher.launch_cooperative_grid, launcher.launch_pdl
    from triton import knobs

    runtime = knobs.runtime

    def run(*ptrs):
        # Triton 3.6's launch hooks are chains, empty unless a profiler adds one: then the runner, which gives
        # the hook the launch's metadata. (Until round 16 an empty chain counted as a hook here, so every planned
        # call took the runner: 11-12 µs a call on the H200's host against 4-6 for the launch itself.)
        enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
        if getattr(enter, "calls", enter) or getattr(leave, "calls", leave):
            runner(*ptrs, *fixed)
        else:
            launch(g0, g1, g2, stream(device), function, coop, pdl, None, None, meta, None, None, None, *ptrs, *fixed)

    return run
