"""What the kernel exercises of chapter 7 share: run a learner's launcher on rows laid out with guard
values around them, name the layout mistake, and count its loads, stores and programs with ``memcount``."""
from __future__ import annotations

import numpy as np
import torch
import triton

from ...device import DEVICE
from ...reference import softmax_ref
from .._pitfalls import explain, quiet
from ..common import GUARD, Report, guarded


STRIDE_OUT = ("the output rows landed {where}, stepped by {what} - a strided output (a view into a bigger tensor) "
              "has its own row stride, and its rows are that far apart")


GAP_WRITE = ("the kernel wrote into the gap between output rows (or past the last row): an unmasked store, or "
             "output rows stepped by another stride than the output's own")




def fresh_layout(rng: np.random.Generator, n_cols: int) -> tuple[int | None, int | None]:
    """Row steps (input, output) for a fresh case: contiguous, or both strided by a random gap."""
    if rng.integers(2):
        return None, None
    return n_cols + int(rng.integers(3, 40)), n_cols + int(rng.integers(3, 40))


def _strided_buffers(values: torch.Tensor, in_step: int, out_step: int, seed: int):
    """x (a view with rows ``in_step`` apart, random values in the gaps) and out (rows ``out_step`` apart:
    NaN where the results go, GUARD in the gaps and after the end), both on DEVICE, with their buffers."""
    rows, n = values.shape
    g = torch.Generator().manual_seed(seed)
    flat_in = (torch.randn(rows * in_step + 64, generator=g) * 3).to(values.dtype).to(DEVICE)
    x = flat_in[: rows * in_step].view(rows, in_step)[:, :n]
    x.copy_(values.to(DEVICE))
    flat_out = guarded(rows * out_step, values.dtype, DEVICE)
    out = flat_out[: rows * out_step].view(rows, out_step)[:, :n]
    out.fill_(float("nan"))
    return x, out, flat_in, flat_out


def _rows_at(flat: torch.Tensor, rows: int, n: int, step: int) -> torch.Tensor | None:
    if (rows - 1) * step + n > flat.numel():
        return None
    return torch.stack([flat[r * step: r * step + n] for r in range(rows)])


def _kernel_problem(launch, values: torch.Tensor, in_step: int | None = None, out_step: int | None = None,
                    seed: int = 0) -> str:
    """Run ``launch(x, out)`` on ``values`` laid out with the given row steps; '' or the named mistake."""
    rows, n = values.shape
    in_step, out_step = in_step or n, out_step or n
    x, out, flat_in, flat_out = _strided_buffers(values, in_step, out_step, seed)
    with quiet():
        launch(x, out)
        flat = flat_out.cpu()
        got = flat[: rows * out_step].view(rows, out_step)[:, :n]
        ref = softmax_ref(values)
        gaps = torch.ones(flat.numel(), dtype=torch.bool)
        gaps[: rows * out_step].view(rows, out_step)[:, :n] = False
        if not bool((flat[gaps] == GUARD).all()):
            for what, step in (("n_cols", n), ("the input's row stride", in_step)):
                if step != out_step:
                    moved = _rows_at(flat, rows, n, step)
                    if moved is not None and torch.allclose(moved.double(), ref, atol=1e-5, rtol=1e-4):
                        return STRIDE_OUT.format(where=f"{step} elements apart", what=what)
            return GAP_WRITE
        if bool(got.isnan().all(dim=1).any()):  # NaN rows: never stored, or stored as NaN? Run again to tell.
            out.fill_(7.0)
            launch(x, out)
            unwritten = int((out.cpu() == 7.0).all(dim=1).sum())
            if unwritten:
                return (f"{unwritten} of {rows} output rows were never written (they kept what the output held "
                        "before the launch): no program took those rows")
        host_in = flat_in.cpu()
        xc = host_in[: rows * in_step].view(rows, in_step)[:, :n]
        return explain(got, xc, triton.next_power_of_2(n), flat=host_in, row_step=in_step)


def _counted(launch, x: torch.Tensor, **kw):
    from ...memcount import count_calls

    out = torch.full_like(x, float("nan"))
    with quiet():
        _, c = count_calls(lambda: launch(x, out, **kw))
    return c, out


def _per_element(log, argument: str, numel: int) -> np.ndarray:
    """How often each element of ``argument`` was touched, over every launch and program (memcount's log)."""
    counts = np.zeros(numel, dtype=np.int64)
    for _, _, name, idx in log:
        if name == argument:
            np.add.at(counts, idx[idx < numel], 1)
    return counts


def _traffic_problem(c, numel: int) -> str:
    """One read of every input element and one write of every output element, nothing else."""
    reads = _per_element(c._load_log, "in_ptr", numel)
    writes = _per_element(c._store_log, "out_ptr", numel)
    extra = c.loads + c.stores - int(reads.sum()) - int(writes.sum())
    if writes.max(initial=0) > 1:
        return (f"some outputs were written {int(writes.max())} times: every row must be stored by exactly one "
                "program, once")
    if (writes == 0).any():
        return f"{int((writes == 0).sum())} of {numel} outputs were never written"
    if reads.max(initial=0) > 1:
        return (f"some input elements were read {int(reads.max())} times: the tile went to memory again for a "
                "later step (the max, the exponentials or the sum), where one read per element is the minimum")
    if (reads == 0).any():
        return f"{int((reads == 0).sum())} of {numel} input elements were never read"
    stray_loads = c.loads - int(reads.sum())
    if extra and stray_loads == extra:
        return (f"{extra} loads touched memory that is not the input's elements (past its last row or column): "
                "lanes of padding the load's mask let through read another buffer's memory, or none at all")
    if extra:
        return (f"{extra} loads or stores of other buffers: scratch memory traffic, which the softmax itself "
                "never needs")
    return ""


def _not_implemented(launch, x) -> bool:
    try:
        with quiet():
            launch(x, torch.empty_like(x))
    except NotImplementedError:
        return True
    except Exception as err:
        return "NotImplementedError" in f"{type(err).__name__}: {err}"
    return False


NOT_IMPLEMENTED = "not implemented yet - replace `raise NotImplementedError` with your code"


def _programs_problem(c, want: int, what: str) -> str:
    if c.launches != 1:
        return f"{c.launches} launches: one launch does it"
    if c.programs != want:
        return f"{c.programs} programs, expected {want} ({what})"
    return ""


def _not_written(report: Report, name: str, call) -> bool:
    """True, with the verdict line, when ``call()`` still raises the blank exercise's NotImplementedError (any
    other error is left to the cases, which name it)."""
    try:
        call()
    except NotImplementedError:
        report.add(name, NOT_IMPLEMENTED)
        return True
    except Exception:
        pass
    return False
