"""Name the mistake, not just the mismatch: what chapters 0-4's checks share.

``softmax_problem(fn, x, block)`` runs a learner's launcher ``fn(x, out)`` with the output poisoned (NaN) and
a guard zone after the last row, then compares with the float64 reference. When the output is wrong it
tries the classic mistakes one by one (each simulated in float64 from the same input) and returns the one
that explains the output, in plain words:

* exp overflow (no max subtraction)           * padding lanes that read 0
* loads or stores past the end of the row     * only the denominator shifted (output scaled by e^max)
* forgot to divide by the sum                 * rows stepped by N instead of the row stride
* outputs never written
"""
from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import torch

from ..device import DEVICE
from ..reference import softmax_ref
from ..testing import compare
from .common import GUARD, GUARD_LEN, guarded

FP32_EXP_MAX = math.log(torch.finfo(torch.float32).max)  # ≈ 88.72: exp overflows past this

# Each message names the mistake and what it caused, never the line that fixes it: the hint ladder
# (softmax_lab.hint(<exercise>)) gives the fix, one recorded level at a time.
NOT_WRITTEN = ("some outputs were never written (still NaN): some rows got no program, or the store left part of a "
               "row out")
OVERFLOW = ("exp overflowed to inf, and inf/inf is NaN: the kernel called exp on a value past 88.7, more than "
            "float32 can hold, so the sum became inf and the outputs 0 or NaN")
UNDERFLOW = ("every exp underflowed to 0, and 0/0 is NaN: every value the kernel passed to exp was below about "
             "-104, where exp rounds to 0 in float32, so the sum became 0")
PAD_ZERO = ("row of all negative numbers: the padding lanes read 0, above every real score, so the row's max "
            "became 0 and each padding lane added exp(0 - 0) = 1 to the sum, more than any real lane's exp(x) < 1: "
            "the real outputs come out too small (for rows far below 0, almost 0), and they add up to less than 1")
PAD_ZERO_ANY = ("the padding lanes read 0, so each added exp(0 - max) to the sum: the sum is too large and every "
                "real output too small, so the row adds up to less than 1")
UNMASKED_LOAD = ("lanes past the end of the row read the next row's values (the load is not masked): they took part "
                 "in this row's max and sum")
UNMASKED_STORE = ("the kernel wrote past the end of the last row: the store is not masked, so the padding lanes wrote "
                  "into memory the output does not own")
ROWS_TOO_FAR = ("the kernel wrote past the end of the output, further than any lane of its last row reaches: output "
                "rows were placed further apart than this output's rows are, so the last ones landed in memory it "
                "does not own")
DENOM_ONLY = ("every output is e^max times too large, so the row adds up to e^max, not 1: the numerator's "
              "exponentials and the denominator's were not taken of the same values")
NOT_NORMALIZED = ("the outputs are exp(x - max), not divided by the row sum: they do not add up to 1")
NOT_SHIFTED_NUMERATOR = ("outputs are inf or 0: the numerator is exp(x) itself, which overflows (or underflows) for "
                         "values this large, while only the denominator was shifted by the row max")
ROW_STRIDE = ("rows were stepped by n_cols, but this input is a view like big[:, :1000] whose rows lie further apart "
              "(its row stride is larger than n_cols): every row after the first read the wrong elements")
INPUT_GUARD = float("nan")  # after the input's last row: a load with no mask reads NaN, never what padding reads


@contextlib.contextmanager
def quiet():
    """Silence numpy/torch warnings (stderr output carries PIDs and breaks nbval comparisons)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yield


def _softmax64(x: torch.Tensor) -> torch.Tensor:
    return softmax_ref(x)


def _close(y: torch.Tensor, ref: torch.Tensor) -> bool:
    if y.shape != ref.shape:
        return False
    a, b = y.detach().to(torch.float64).cpu(), ref.to(torch.float64).cpu()
    same_nan = torch.isnan(a) == torch.isnan(b)
    finite = torch.isfinite(a) & torch.isfinite(b)
    same_inf = (~torch.isfinite(a) & ~torch.isnan(a)) == (~torch.isfinite(b) & ~torch.isnan(b))
    ok = torch.allclose(a[finite], b[finite], rtol=1e-4, atol=1e-6) if finite.any() else True
    return bool(same_nan.all() and same_inf.all() and ok)


def _zero_padded(x64: torch.Tensor, block: int) -> torch.Tensor | None:
    n = x64.shape[-1]
    if block is None or block <= n:
        return None
    pad = torch.zeros(*x64.shape[:-1], block - n, dtype=torch.float64)
    return _softmax64(torch.cat([x64, pad], dim=-1))[..., :n]


def _unmasked_rows(flat64: torch.Tensor, rows: int, n: int, row_step: int, block: int) -> torch.Tensor | None:
    """What a kernel that loads BLOCK lanes with no mask sees: each row runs on into what follows it."""
    if block is None or block <= n:
        return None
    out = []
    for r in range(rows):
        seen = flat64[r * row_step: r * row_step + block]
        out.append(_softmax64(seen)[:n])
    return torch.stack(out)


def explain(y: torch.Tensor, x: torch.Tensor, block: int | None = None, flat: torch.Tensor | None = None,
            row_step: int | None = None) -> str:
    """'' when y is softmax(x) over the last dim, else the most likely mistake in plain words."""
    with quiet():
        basic = compare(y, x)
        if not basic:
            return ""
        if y is None or tuple(y.shape) != tuple(x.shape) or y.dtype != x.dtype:
            return basic
        x64 = x.detach().to(torch.float64).cpu()
        y64 = y.detach().to(torch.float64).cpu()
        ref = _softmax64(x64)
        big = bool((x64.abs() > FP32_EXP_MAX).any())
        m = x64.amax(dim=-1, keepdim=True)
        # Lane mistakes first: they are the most specific (they need a block wider than the row). A load with
        # no mask reads past the row (the next row, or the guard zone after the input), never only zeros: it is
        # named before padding that reads 0.
        if flat is not None and x.dim() == 2:
            step = row_step if row_step is not None else x.shape[-1]
            unmasked = _unmasked_rows(flat.detach().to(torch.float64).cpu(), x.shape[0], x.shape[1], step, block)
            # (all NaN from the guard alone says nothing when exp can overflow: that is named below)
            if unmasked is not None and _close(y64, unmasked) and not (big and bool(torch.isnan(unmasked).all())):
                return UNMASKED_LOAD
        zero = _zero_padded(x64, block)
        if zero is not None and _close(y64, zero):
            return PAD_ZERO if bool((x64 < 0).all()) else PAD_ZERO_ANY
        if flat is not None and x.dim() == 2:
            if not x.is_contiguous():
                n = x.shape[1]
                wrong = flat.detach().to(torch.float64).cpu()[: x.shape[0] * n].reshape(x.shape[0], n)
                if _close(y64, _softmax64(wrong)) or _close(y64[1:], _softmax64(wrong)[1:]):
                    return ROW_STRIDE
        # A numerator exp(x) over a shifted denominator: e^max times too big (inf when x is large).
        scaled = ref * torch.exp(m)
        if bool(torch.isfinite(scaled).all() and (scaled > 0).any()) and _close(y64, scaled):
            return DENOM_ONLY
        if big and (bool(torch.isinf(y64).any()) or bool((y64 == 0).all() and (ref > 0).any())):
            return NOT_SHIFTED_NUMERATOR
        if torch.isnan(y64).any() and big:
            return OVERFLOW if bool((x64 > FP32_EXP_MAX).any()) else UNDERFLOW
        if _close(y64, torch.exp(x64 - m)):
            return NOT_NORMALIZED
        if not x.is_contiguous() and x.dim() == 2:
            return ROW_STRIDE
        if torch.isnan(y64).any() and not torch.isnan(ref).any():
            return NOT_WRITTEN
        return _wrong_values(y64, ref) if basic.startswith("values differ") else basic


def _wrong_values(y64: torch.Tensor, ref: torch.Tensor) -> str:
    """Where the output is wrong, in integers only (raw floats would differ between CPU and GPU)."""
    bad = ~torch.isclose(y64, ref, rtol=1e-5, atol=1e-6, equal_nan=True)
    where = [int(i) for i in bad.nonzero()[0]] if bad.any() else []
    at = (f" (first at row {where[0]}, column {where[1]})" if len(where) == 2 else
          f" (first at index {where[0]})" if where else "")
    return f"{int(bad.sum())} of {bad.numel()} outputs differ from the float64 reference{at}"


def case_values(kind: str, shape: tuple, seed: int = 0) -> torch.Tensor:
    """A case table's values for a notebook check, from a fixed seed (its printed lines never change): "random",
    "below -1000" (every value), "[-1002, -1001, -1000]", "[1000, 1001, 1002]" or "sevens" (identical values)."""
    if kind.startswith("["):
        return torch.tensor([[float(v) for v in kind.strip("[]").split(",")]])
    if kind == "sevens":
        return torch.full(shape, 7.0)
    values = random_rows(shape, seed)
    return -1000.0 - values.abs() if kind == "below -1000" else values


def guarded_output(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A NaN-filled contiguous output shaped like x, followed in memory by a guard zone of GUARD values."""
    flat = guarded(x.numel(), x.dtype, x.device)
    out = flat[: x.numel()].view(x.shape)
    out.fill_(float("nan"))
    return out, flat[x.numel():]


def guarded_input(values: torch.Tensor, strided_cols: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Copy ``values`` (2-D) into memory followed by a guard zone of INPUT_GUARD. With ``strided_cols`` the rows
    sit ``strided_cols`` apart (a view like big[:, :N]). Returns (x, the flat buffer from x's start, row step)."""
    rows, n = values.shape
    step = strided_cols or n
    flat = torch.full((rows * step + GUARD_LEN,), INPUT_GUARD, dtype=values.dtype, device=values.device)
    if strided_cols:
        big = flat[: rows * step].view(rows, step)
        big.normal_(generator=None).mul_(3.0)
        x = big[:, :n]
    else:
        x = flat[: rows * n].view(rows, n)
    x.copy_(values)
    return x, flat, step


def softmax_problem(fn, values: torch.Tensor, block_of=None, strided_cols: int | None = None) -> str:
    """Run ``fn(x, out)`` on ``values`` (2-D, or 1-D for a single row); '' or the named mistake.

    ``block_of(n_cols)`` gives the BLOCK the launcher uses, so the padding mistakes can be simulated.
    """
    one_row = values.dim() == 1
    v2 = values.reshape(1, -1) if one_row else values
    x2, flat, step = guarded_input(v2.to(DEVICE), strided_cols)
    x = x2.reshape(-1) if one_row else x2
    out, guard = guarded_output(x)
    with quiet():
        y = fn(x, out)
        y = out if y is None else y
        block = block_of(x.shape[-1]) if block_of else None
        written = (guard != GUARD).nonzero()
        if len(written):
            # the last row's lanes (padding included) end block - n_cols elements past the output's end at most
            reach = block - x.shape[-1] if block else None
            return ROWS_TOO_FAR if reach is not None and int(written.max()) >= reach else UNMASKED_STORE
        if one_row and isinstance(y, torch.Tensor) and tuple(y.shape) == tuple(x.shape):
            return explain(y.reshape(1, -1), x2, block, flat=flat, row_step=step)  # one row: read as 1 x n
        return explain(y, x, block, flat=flat if not one_row else None, row_step=step)


class Verdict:
    """What a check returns: truthy when every case passed. It displays as nothing in Jupyter, so a check
    cell shows only the printed verdict lines (nbval compares them), with no trailing ``True``/``False``."""

    def __init__(self, ok: bool):
        self.ok = bool(ok)

    def __bool__(self) -> bool:
        return self.ok

    def __eq__(self, other) -> bool:
        return self.ok == bool(other)

    def __hash__(self) -> int:
        return hash(self.ok)

    def __repr__(self) -> str:
        return f"Verdict({self.ok})"

    def _ipython_display_(self) -> None:
        pass


NO_LAUNCH = ("your launcher ran no Triton kernel (is it calling torch.softmax or a library function?): the "
             "exercise is to compute this in your own @triton.jit kernel")


def no_launch(kernel: str = "") -> str:
    """NO_LAUNCH, naming first the kernel the exercise asks for (long lines get cut in the gradebook)."""
    if not kernel:
        return NO_LAUNCH
    return (f"your launcher never launched {kernel}, nor any Triton kernel (is it calling torch.softmax or a "
            "library function?): the exercise is to compute this in your own @triton.jit kernel")


def counted(fn, x: torch.Tensor, out: torch.Tensor | None = None):
    """Run ``fn(x, out)`` with every Triton kernel it launches counted by memcount (interpreted on CPU copies,
    on a GPU machine too, so the counts are the same everywhere). Lanes outside every tensor are switched off
    and logged (``c._outside_log``), so a wrong kernel cannot write over memory it does not own.
    Returns (y, MemoryCount)."""
    from ..memcount import count_calls

    out = torch.full_like(x, float("nan")) if out is None else out
    with quiet():
        y, c = count_calls(fn, x, out, _guard=True)
    return (out if y is None else y), c


OUTSIDE = ("your kernel loaded or stored outside every tensor it was given (lanes past the end of a row, or rows "
           "stepped by the wrong stride)")


def traffic_problem(fn, x: torch.Tensor, loads: int, stores: int, what: str, out: torch.Tensor | None = None,
                    wrong=None, kernel: str = "") -> str:
    """'' when ``fn(x, out)`` launches a Triton kernel that computes softmax(x) (or what ``wrong(y, x) -> ''``
    accepts) with exactly ``loads`` elements loaded and ``stores`` stored (counted by memcount), else what is
    wrong; ``what`` says what the least traffic is, in words ("load each element once ...": the message names the
    gap, "2 more loads than a kernel that would load each element once ..."); ``kernel``: the
    name of the kernel the exercise asks for."""
    y, c = counted(fn, x, out)
    if c.launches == 0:
        return no_launch(kernel)
    if c._outside_log:
        return OUTSIDE
    if c.loads != loads or c.stores != stores:
        gaps = [f"{abs(got - want)} {'more' if got > want else 'fewer'} {verb}" for got, want, verb in
                ((c.loads, loads, "loads"), (c.stores, stores, "stores")) if got != want]
        return (f"your kernel loaded {c.loads} and stored {c.stores} elements for {x.numel()} inputs: "
                f"{' and '.join(gaps)} than a kernel that would {what}")
    # Wrong values are the other cases' verdict, not this one's: here only a launch that does not compute
    # the output at all (an extra kernel, the result taken from torch) is named.
    if (wrong or explain)(y, x) and torch.isnan(y.detach().float()).all():
        return NOT_WRITTEN
    return ""


def random_rows(shape, seed: int, scale: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(torch.float32)


__all__: list[str] = []
