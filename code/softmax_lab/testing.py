"""The correctness harness every test, check and benchmark uses.

* ``TOLERANCES``: per-dtype (atol, rtol) for comparing against the float64 reference.
* ``poison``: fill an output with NaN before a launch, so a kernel that stores nothing cannot pass.
* ``cases``: fresh random inputs on the seed boundary shapes and the classic pitfalls.
* ``check_softmax``: run a kernel on one input and compare with ``torch.testing.assert_close``.
"""
from __future__ import annotations

import inspect

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from .device import DEVICE
from .reference import softmax_ref

# (atol, rtol) against the float64 reference. fp16 keeps ~11 bits, bf16 ~8 bits of mantissa.
TOLERANCES = {
    torch.float64: (1e-12, 1e-10),
    torch.float32: (1e-6, 1e-5),
    torch.float16: (1e-3, 1e-2),
    torch.bfloat16: (8e-3, 4e-2),
}

# Row-length boundaries around block sizes 32 and 256 (from the seed chapter's exercises).
BOUNDARY_SHAPES = [(1, 1), (2, 31), (3, 32), (4, 33), (2, 255), (3, 257)]

TRACE_ROW = [1000.0, 1001.0, 1002.0]


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    if dtype not in TOLERANCES:
        raise TypeError(f"no tolerance for dtype {dtype}; softmax kernels take float16, bfloat16, float32 or float64")
    return TOLERANCES[dtype]


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with NaN in place (a value no correct softmax writes) and return it."""
    return t.fill_(float("nan"))


def poisoned_like(x: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor shaped like ``x``, full of NaN."""
    return poison(torch.empty(x.shape, dtype=x.dtype, device=x.device))


@dataclass
class Case:
    name: str
    x: torch.Tensor
    pitfall: str = ""  # what a failure here usually means, in plain words


def _gen(seed: int | None) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(torch.seed() if seed is None else seed)
    return g


def randn(shape, dtype=torch.float32, device=None, scale: float = 3.0, seed: int | None = None) -> torch.Tensor:
    """Fresh random normal input (drawn on the CPU, so the same seed gives the same values on CPU and GPU)."""
    x = torch.randn(shape, generator=_gen(seed), dtype=torch.float32) * scale
    return x.to(dtype=dtype, device=device or DEVICE)


def cases(dtype: torch.dtype = torch.float32, device=None, shapes=None, seed: int | None = None,
          strided: bool = True) -> Iterator[Case]:
    """The standard set of inputs: boundary shapes, all-negative rows, the [1000,1001,1002] trace,
    identical values, and a strided view. Random values are fresh unless ``seed`` is given."""
    device = device or DEVICE
    shapes = BOUNDARY_SHAPES if shapes is None else shapes
    for i, shape in enumerate(shapes):
        yield Case(f"random {shape[0]}x{shape[1]}",
                   randn(shape, dtype, device, seed=None if seed is None else seed + i),
                   "a row length that is not a multiple of the block: check the mask on loads and stores")
    yield Case("all-negative row [-1002, -1001, -1000]",
               torch.tensor([[-1002.0, -1001.0, -1000.0]], dtype=dtype, device=device),
               "max became 0: did you pad masked lanes with 0 instead of -inf?")
    yield Case("large values [1000, 1001, 1002]", torch.tensor([TRACE_ROW], dtype=dtype, device=device),
               "exp(1000) overflows: subtract the row max before exp")
    yield Case("identical values", torch.full((2, 37), 7.0, dtype=dtype, device=device),
               "every entry should be 1/N")
    if strided:
        big = randn((4, 1100), dtype, device, seed=None if seed is None else seed + 99)
        yield Case("strided view big[:, :1000]", big[:, :1000],
                   "rows are not contiguous in memory: step between rows with the row stride, not N")


@dataclass
class Result:
    name: str
    ok: bool
    message: str = ""


def compare(y: torch.Tensor, x: torch.Tensor, expected: torch.Tensor | None = None) -> str:
    """'' when ``y`` matches the reference softmax of ``x`` (or ``expected``), else a short reason."""
    if y is None:
        return "the kernel returned None"
    if tuple(y.shape) != tuple(x.shape):
        return f"output shape {tuple(y.shape)} != input shape {tuple(x.shape)}"
    if y.dtype != x.dtype:
        return f"output dtype {y.dtype} != input dtype {x.dtype}"
    ref = softmax_ref(x) if expected is None else expected.to(torch.float64)
    if torch.isnan(y).any() and not torch.isnan(ref).any():
        n = int(torch.isnan(y).sum())
        return f"{n} output value(s) are NaN (still poisoned: not stored, or overflowed)"
    atol, rtol = tolerance(x.dtype)
    try:
        torch.testing.assert_close(y.to(torch.float64).cpu(), ref.cpu(), atol=atol, rtol=rtol, equal_nan=True)
    except AssertionError as err:
        first = str(err).strip().splitlines()
        return "values differ from the float64 reference: " + "; ".join(l.strip() for l in first[1:5] if l.strip())
    return ""


def check_softmax(fn: Callable, x: torch.Tensor, expected: torch.Tensor | None = None) -> str:
    """Run ``fn(x, out=poisoned)`` (or ``fn(x)`` if it takes no ``out``) and compare. '' means correct."""
    y = fn(x, out=poisoned_like(x)) if takes_out(fn) else fn(x)
    return compare(y, x, expected)


def takes_out(fn: Callable) -> bool:
    """Whether ``fn`` accepts an ``out=`` keyword (read from its signature, never guessed from an error)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == "out" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) or p.kind is p.VAR_KEYWORD
               for p in params)


def run_cases(fn: Callable, dtype: torch.dtype = torch.float32, **kw) -> list[Result]:
    results = []
    for case in cases(dtype, **kw):
        msg = check_softmax(fn, case.x)
        results.append(Result(case.name, not msg, f"{msg} ({case.pitfall})" if msg and case.pitfall else msg))
    return results


def assert_softmax_correct(fn: Callable, dtype: torch.dtype = torch.float32, **kw) -> None:
    """For tests: raise AssertionError listing every failing case."""
    bad = [f"{r.name}: {r.message}" for r in run_cases(fn, dtype, **kw) if not r.ok]
    assert not bad, "\n".join(bad)
