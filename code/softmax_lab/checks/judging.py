"""What the grader itself runs for an exercise (``softmax-lab grade``), next to the friendly check in the notebook.

A *judge* names what to launch and on what: for a kernel exercise, the learner's ``@triton.jit`` function by
name, with the grader's own buffers and grid; for a Python exercise, the learner's functions with the grader's
arguments. Inputs are drawn fresh at grade time from a seed the grader picks (never the notebook's inputs),
and include what the chapters teach: padding, masked stores (guard zones around every output), strided inputs
and outputs, and on kernels that must use them, 64-bit row offsets. The learner's code runs in a sandbox; the
outputs come back as arrays, and the verdict is computed here, outside, against float64 references.

The module an exercise's id names (``course.registry.check_module``) declares ``JUDGES = {exercise_id:
KernelJudge(...) | PythonJudge(...)}``, built from the same case table as its notebook check;
``softmax_lab.grading.judge`` imports that module and nothing else. The grader never gets imported from here: it
says what the checks need to know (``set_gpu_scale``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .common import GUARD, GUARD_LEN

TOL = {"float32": (1e-6, 1e-5), "float16": (1e-3, 1e-2), "bfloat16": (8e-3, 4e-2), "float64": (1e-12, 1e-10)}
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
         "int32": torch.int32, "int64": torch.int64}
INT64_HINT = ("row offsets are computed in 32 bits, not 64-bit: tl.program_id is a 32-bit int, so row * stride "
              "wraps around past 2**31 elements and the rows beyond are read and written at wrong addresses")


@dataclass
class Buf:
    """One flat buffer handed to the kernel (a pointer argument): its initial contents and, for an output,
    where the result must appear (``offset`` + row ``step``, ``shape``) and its float64 reference."""
    storage: np.ndarray                 # float64 values (converted to ``dtype`` when written)
    dtype: str = "float32"
    output: bool = False
    offset: int = 0
    shape: tuple = ()
    step: int = 0                       # elements between rows of the view (2-D); 0 for 1-D
    ref: np.ndarray | None = None       # float64, shape ``shape``
    # A buffer too big to ship (GPU: more than 2**31 elements): ``size`` elements on the device, zeros except
    # the ``windows`` (offset, length) whose values ``storage`` holds one after the other; the kernel's pointer
    # is element ``base``, and its rows are ``kernel_step`` apart (``offset``/``step`` describe ``storage``).
    size: int = 0
    windows: list = field(default_factory=list)
    base: int = 0
    kernel_step: int = 0


@dataclass
class KCase:
    name: str
    grid: tuple
    args: list                          # ("buf", name) | ("int", v) | ("float", v)
    buffers: dict
    constexprs: dict = field(default_factory=dict)
    int64: bool = False                 # count pid-derived 32-bit pointer offsets (CPU interpreter)
    hint: str = ""


@dataclass
class KernelJudge:
    kernel: str                         # the @triton.jit function the learner's cell must define
    cases: Callable[[np.random.Generator], list]  # -> list[KCase]
    int64: bool = False
    kind: str = "kernel"


@dataclass
class PCall:
    name: str
    fn: str
    args: list = field(default_factory=list)   # JSON data; {"dtype": "float16"} for a torch dtype
    expect: Callable[[object], str] = lambda value: ""  # '' or what is wrong with the learner's value
    fold: list | None = None                   # for online_update: the row folded tile by tile
    tile: int = 0


@dataclass
class PythonJudge:
    """An exercise of plain Python functions: ``calls`` of them, each decided here by its ``expect``; then
    ``source_problem(cell source)`` ('' or what is wrong with the cell's code itself), as the item ``source_case``."""
    calls: Callable[[np.random.Generator], list]  # -> list[PCall]
    source_problem: Callable[[str], str] | None = None
    source_case: str = "your cell's source"
    kind: str = "python"


@dataclass
class NCase:
    """One launch of a numba exercise in the grader's simulator: ``function`` of the learner's cell (a kernel,
    or a device function called once per thread by the grader's ``probe`` kernel source), ``blocks`` x
    ``threads``, float32 buffers (a Buf's ``shape``/``step`` give the 2-D view the kernel gets), the race recorder on
    when ``race``. ``spec`` is the exercise's own data for its verdict (op, values kind ...)."""
    name: str
    function: str
    blocks: int
    threads: int
    buffers: dict
    args: list                          # ("buf", name) | ("int", v)
    probe: str = ""
    race: bool = False
    shared_bytes: int = 0
    spec: dict = field(default_factory=dict)


@dataclass
class NumbaJudge:
    """A chapter 9 exercise: the cell's ``@cuda.jit`` functions, defined alone in a sandbox without the package and
    run in numba's CUDA simulator; ``problem(case, outputs, race)`` decides each case here, ``source_problem(cell
    source)`` the source itself (or None); ``helpers``: the grader's own device functions the cell's kernel calls."""
    functions: tuple
    cases: Callable[[np.random.Generator], list]  # -> list[NCase]
    problem: Callable[[NCase, dict, dict | None], str]
    source_problem: Callable[[str], str] | None = None
    helpers: str = ""
    kind: str = "numba"


# ---------------------------------------------------------------------------------------------- helpers


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to ``dtype`` (and back to float64): what the kernel really reads."""
    return torch.from_numpy(np.asarray(values, dtype=np.float64)).to(TORCH[dtype]).to(torch.float64).numpy()


def to_file_array(values: np.ndarray, dtype: str) -> np.ndarray:
    t = torch.from_numpy(np.asarray(values, dtype=np.float64)).to(TORCH[dtype])
    return t.view(torch.int16).numpy() if dtype == "bfloat16" else t.numpy()


def from_file_array(arr: np.ndarray, dtype: str) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(arr))
    if dtype == "bfloat16":
        t = t.view(torch.bfloat16)
    return t.to(torch.float64).numpy()


def softmax64(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


BIG_STEP = 2**30 + 64  # 3 rows this far apart: row 2 starts past 2**31 elements (int32 offsets overflow)
MARGIN = 64


def big_rows_input(rng, x: np.ndarray, big_step: int, dtype: str = "float32") -> Buf:
    """x (R, C) with rows ``big_step`` apart in a buffer of (R-1) * big_step + C + MARGIN elements."""
    R, C = x.shape
    w = C + MARGIN
    storage = rng.normal(0, 3, R * w)
    for r in range(R):
        storage[r * w: r * w + C] = x[r]
    return Buf(cast(storage, dtype), dtype, shape=(R, C), step=w, size=(R - 1) * big_step + w,
               windows=[(r * big_step, w) for r in range(R)], kernel_step=big_step)


def big_rows_output(ref: np.ndarray, big_step: int, dtype: str = "float32") -> Buf:
    """An output (R, C) with rows ``big_step`` apart; MARGIN guard elements on both sides of every row."""
    R, C = ref.shape
    w = C + 2 * MARGIN
    storage = np.zeros(R * w)
    for r in range(R):
        storage[r * w + MARGIN: r * w + MARGIN + C] = np.nan
    return Buf(storage, dtype, output=True, offset=MARGIN, shape=(R, C), step=w, ref=ref,
               size=(R - 1) * big_step + w, windows=[(r * big_step, w) for r in range(R)], base=MARGIN,
               kernel_step=big_step)


_GPU_SCALE = False  # set by the grader (``set_gpu_scale``): the checks never import it


def set_gpu_scale(on: bool) -> None:
    """The grader says whether its sandbox sees a GPU with the memory for the 2**31-element cases."""
    global _GPU_SCALE
    _GPU_SCALE = bool(on)


def gpu_scale() -> bool:
    """Judge 64-bit offsets with real tensors past 2**31 elements (a GPU with the memory for them)."""
    return _GPU_SCALE


def rows_input(rng, x: np.ndarray, step: int | None = None, dtype: str = "float32") -> Buf:
    """x (R, C) laid out with ``step`` elements between rows, random values in the gaps and after the end
    (so a load that runs past the row reads garbage)."""
    R, C = x.shape
    step = step or C
    storage = rng.normal(0, 3, R * step + GUARD_LEN)
    for r in range(R):
        storage[r * step: r * step + C] = x[r]
    return Buf(cast(storage, dtype), dtype, shape=(R, C), step=step)


def rows_output(ref: np.ndarray, step: int | None = None, dtype: str = "float32") -> Buf:
    """An output (R, C) with ``step`` between rows: NaN where results go, GUARD everywhere else."""
    R, C = ref.shape
    step = step or C
    storage = np.full(R * step + GUARD_LEN, GUARD)
    for r in range(R):
        storage[r * step: r * step + C] = np.nan
    return Buf(storage, dtype, output=True, shape=(R, C), step=step, ref=ref)


def view_of(buf: Buf, storage: np.ndarray) -> np.ndarray:
    if len(buf.shape) == 1:
        return storage[buf.offset: buf.offset + buf.shape[0]]
    R, C = buf.shape
    return np.stack([storage[buf.offset + r * buf.step: buf.offset + r * buf.step + C] for r in range(R)])


def output_problem(buf: Buf, got: np.ndarray) -> str:
    """'' when the output view matches the reference and nothing outside it changed; else plain words."""
    if got.shape != buf.storage.shape:
        return "the output buffer came back with the wrong size"
    mask = np.ones(got.shape, dtype=bool)
    idx = np.arange(got.size)
    if len(buf.shape) == 1:
        inside = (idx >= buf.offset) & (idx < buf.offset + buf.shape[0])
    else:
        rel = idx - buf.offset
        inside = (rel >= 0) & (rel < buf.shape[0] * buf.step) & (rel % max(buf.step, 1) < buf.shape[1])
    mask &= ~inside
    before = cast(buf.storage, buf.dtype)
    if not np.array_equal(got[mask], before[mask], equal_nan=True):
        return ("the kernel wrote outside the output (past the end of a row, into the gap between strided rows, "
                "or after the last row): the store is not masked, or rows were stepped by something other than "
                "the output's own row stride")
    y = view_of(buf, got)
    ref = buf.ref
    if np.isnan(y).any() and not np.isnan(ref).any():
        return f"{int(np.isnan(y).sum())} of {y.size} outputs were never written (still NaN) or are NaN"
    atol, rtol = TOL[buf.dtype]
    same_nan = np.isnan(y) == np.isnan(ref)
    fin = ~np.isnan(ref)
    if same_nan.all() and np.allclose(y[fin], ref[fin], atol=atol, rtol=rtol):
        return ""
    bad = ~np.isclose(y, ref, atol=atol, rtol=rtol, equal_nan=True)
    return f"{int(bad.sum())} of {y.size} outputs differ from the float64 reference"


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    if isinstance(a, bool) or not isinstance(a, (int, float)):
        return False
    if np.isinf(b) or np.isinf(a):
        return a == b
    return abs(a - b) <= rel + rel * abs(b)


def expect_equal(want) -> Callable[[object], str]:
    def problem(value) -> str:
        if isinstance(want, (list, tuple)):
            if not isinstance(value, list) or len(value) != len(want):
                return f"expected {len(want)} values, got {_short(value)}"
            if all(close(v, w) for v, w in zip(value, want)):
                return ""
            return f"got {_short(value)}, expected {_short(list(want))}"
        return "" if close(value, want, 1e-6) else f"got {_short(value)}, expected {_short(want)}"
    return problem


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__: list[str] = []


def np2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def softmax_rows(rng, shape) -> np.ndarray:
    """Fresh rows of shape (R, C): random, and one of them all negative when there are several."""
    x = rng.normal(0, 3, shape)
    if shape[0] > 1:
        x[-1] = -1000.0 - np.abs(x[-1])
    return x


def fresh_values(rng, kind: str, shape: tuple) -> np.ndarray:
    """The same case's values for a judge (see ``_pitfalls.case_values``), drawn from the grader's seed."""
    if kind.startswith("["):
        return np.array([[float(v) for v in kind.strip("[]").split(",")]])
    if kind == "sevens":
        return np.full(shape, 7.0)
    if kind == "below -1000":
        return -1000.0 - np.abs(rng.normal(0, 3, shape))
    return softmax_rows(rng, shape)


def softmax_case(rng, name, x, args, block, grid, strided=False, int64=False, hint="", dtype="float32",
                 constexprs=None, big_step=0, steps=None) -> KCase:
    """One row-wise softmax launch: ``args`` names the kernel's arguments in order, from
    x, out, n (columns), x_stride, out_stride; the other arguments are given as ("int", v).
    ``big_step``: rows that far apart in huge buffers (the GPU's 64-bit offset case); ``steps``: the input's and
    the output's row steps from a case table (None: contiguous, or random gaps when ``strided``)."""
    R, C = x.shape
    if big_step:
        xin = big_rows_input(rng, x, big_step, dtype)
        out = big_rows_output(softmax64(view_of(xin, cast(xin.storage, dtype))), big_step, dtype)
        xs = ys = big_step
    else:
        if steps is not None:
            xs, ys = steps[0] or C, steps[1] or C
        else:
            xs = C + int(rng.integers(3, 40)) if strided else C
            ys = C + int(rng.integers(3, 40)) if strided else C
        xin = rows_input(rng, x, xs, dtype)
        out = rows_output(softmax64(view_of(xin, xin.storage)), ys, dtype)
    table = {"x": ("buf", "x"), "out": ("buf", "out"), "n": ("int", C), "x_stride": ("int", xs),
             "out_stride": ("int", ys)}
    return KCase(name, grid, [table[a] if isinstance(a, str) else a for a in args], {"x": xin, "out": out},
                 dict(BLOCK=block, **(constexprs or {})), int64=int64, hint=hint)
