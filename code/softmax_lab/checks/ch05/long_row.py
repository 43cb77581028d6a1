"""Exercise ch05-long-row: one long 1-D row spread over several programs: a first launch reduces each chunk to
``(m, l)``, the partials are combined, a second launch normalises; tiny rows and a 500,000-element row, with
its traffic counted."""
from __future__ import annotations

import math

import numpy as np
import torch

from ...device import DEVICE
from ...memcount import count_calls
from ...reference import softmax_ref
from ...testing import compare, poisoned_like
from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import TORCH, Buf, GUARD, GUARD_LEN, KCase, KernelJudge, cast
from ._online import NEG_INF, _per_element, _stats


def long_row_problem(fn, x: torch.Tensor, programs: int, block: int) -> str:
    """'' when ``fn(x, out, programs=..., BLOCK=...)`` gives the softmax of the 1-D row ``x``."""
    out = poisoned_like(x)
    with quiet():
        y = fn(x, out, programs=programs, BLOCK=block)
    y = out if y is None else y
    problem = compare(y, x)
    if not problem:
        return ""
    ref = softmax_ref(x)
    if y.shape == x.shape and torch.isnan(y).any() and not torch.isnan(ref).any():
        nan = torch.isnan(y).cpu()
        if bool(nan.all()):
            return (f"{problem} - every output is NaN: a chunk with nothing in it (past the end of the row, or all "
                    "-inf), or the merge of two such chunks, made a NaN that reached the row's (M, L)")
        first = int(nan.nonzero()[0])
        if bool(nan[first:].all()):
            return (f"{problem} - the last outputs were never written (still NaN): the chunks did not cover the "
                    "whole row, so its last elements belong to no program")
        return f"{problem} - some outputs of a chunk were never written in the second launch"
    if y.shape == x.shape:
        s = float(y.to(torch.float64).sum())
        if abs(s - 1) > 1e-3:
            return f"{problem} - {sum_problem(s)}"
    return problem


def sum_problem(s: float) -> str:
    """What a row that sums to ``s`` (not 1) says about the (M, L) it was divided by."""
    if not math.isfinite(s):
        return (f"the row sums to {s}: some outputs are inf or NaN, so exp(x - M) / L was divided by an L of 0, or "
                "an element was larger than the M it was shifted by: elements were left out of every chunk's max "
                "and sum (a chunk that counted none of its elements keeps the stats (-inf, 0), and a row whose "
                "chunks all did so is divided by (M, L) = (-inf, 0))")
    if s > 1.5 and abs(s - round(s)) < 1e-3:
        return (f"the row sums to {s:.3f}, a whole number: each of {round(s)} chunks sums to 1 on its own, as if "
                "each was normalised with its own (m, l), not with the whole row's")
    if s < 1:
        return (f"the row sums to {s:.3f}, less than 1: the L the outputs were divided by is larger than the row's "
                "sum of exp(x - M): something in it was counted besides each element once against the row's max "
                "(lanes past a chunk's end, padding or a neighbour's elements, in a chunk's max or sum; or a "
                "partial sum still counted against its own chunk's max)")
    return (f"the row sums to {s:.3f}, more than 1: the L the outputs were divided by is smaller than the row's sum "
            "of exp(x - M): some elements were left out of every chunk's sum, or a partial sum was scaled down "
            "more than the row's max requires")


def long_row_traffic_problem(fn, x: torch.Tensor, programs: int, block: int, per_program: bool) -> str:
    """Two launches; every element read once by one program in each, written once (memcount)."""
    n = x.numel()
    out = poisoned_like(x)
    with quiet():
        y, c = count_calls(fn, x, out, programs=programs, BLOCK=block)
    y = out if y is None else y
    problem = compare(y, x)
    if problem:
        return problem
    if c.launches != 2:
        return (f"the launcher started {c.launches} kernel launch(es), where the exercise has two: each launch "
                "reads the row once, so every launch more is one more read of every element")
    reads = c.loads_of.get("x_ptr", c.loads)  # the signature names it x_ptr; else every load
    if reads > 2 * n:
        return (f"every element was read {_per_element(reads, n)} times: each launch reads every element once, "
                "2 reads in all")
    writes = c.stores_of.get("y_ptr", c.stores - 2 * programs)  # else every store but the partials
    if writes != n:
        return f"every output was written {_per_element(writes, n)} times, where once is allowed"
    if per_program:
        for launch in (0, 1):
            seen = c.load_map("x_ptr", n, launch=launch)
            readers = int((seen.sum(axis=1) > 0).sum())
            if readers < min(programs, n):
                return (f"launch {launch + 1}: only {readers} of the {programs} programs read x - spread the row "
                        "over all of them, one chunk each")
            if bool((seen.sum(axis=0) != 1).any()):
                return (f"launch {launch + 1}: some elements were read by several programs (or none): each "
                        "program reads only its own chunk")
    return ""


# The cases, read by the notebook check and by the grader's judge alike: (name, elements, programs, BLOCK, values,
# dtype, how). Values: "random", "rising" (the max in the last chunk), "lead -inf" (the first two chunks all
# -inf) or "below -1000"; how: None (the launcher's output), "per program" / "total" (memcount of the whole
# launcher), or RAGGED: chunk_stats_kernel launched alone with CHUNK = ceil(n / programs), not a whole number of
# tiles, so that its last tile reaches into the next chunk. The check runs each row drawn from a fixed seed; the
# judge launches the learner's first kernel, chunk_stats_kernel, on rows drawn from the grader's seed (with the
# launcher's whole-tile CHUNK, or ceil(n / programs) for RAGGED), and adds a fresh ragged chunk.
RAGGED = "CHUNK not whole tiles"
LONG_CASES = [
    ("1 element on 2 programs: the second program's chunk is empty", 1, 2, 32, "random", "float32", None),
    ("37 elements on 3 programs, BLOCK=8", 37, 3, 8, "random", "float32", None),
    ("a rising row of 1000 on 4 programs, BLOCK=32: the max is in the last chunk", 1000, 4, 32, "rising", "float32",
     None),
    ("300 elements on 4 programs, the first two chunks all -inf", 300, 4, 16, "lead -inf", "float32", None),
    ("all-negative row of 200 around -1000 on 3 programs", 200, 3, 16, "below -1000", "float32", None),
    ("float16 row of 500 on 3 programs, BLOCK=64", 500, 3, 64, "random", "float16", None),
    ("bfloat16 row of 300 on 2 programs, BLOCK=32", 300, 2, 32, "random", "bfloat16", None),
    ("1000 elements on 4 programs: 2 launches, each program reads its own chunk once per launch", 1000, 4, 32,
     "random", "float32", "per program"),
    ("one row of 500,000 on 8 programs, BLOCK=4096: correct, 2 reads + 1 write per element", 500_000, 8, 4096,
     "random", "float32", "total"),
    ("chunk_stats_kernel alone: 70 elements on 4 programs, CHUNK = 18, not a whole number of BLOCK = 8 tiles", 70, 4,
     8, "random", "float32", RAGGED),
]
CHECK_SEED = 58


def chunk_size(n: int, programs: int, block: int) -> int:
    """Elements per program: whole tiles of BLOCK, enough of them to cover the row."""
    return math.ceil(math.ceil(n / programs) / block) * block


def case_row(n: int, programs: int, block: int, kind: str, rng: np.random.Generator) -> np.ndarray:
    """One case's row in float64, drawn from ``rng`` (the check's fixed seed, or the grader's)."""
    if kind == "rising":
        return np.linspace(-10.0, 10.0, n)
    x = rng.normal(0, 1, n)
    if kind == "below -1000":
        x -= 1000.0
    if kind == "lead -inf":
        x[:2 * chunk_size(n, programs, block)] = NEG_INF
    return x


def chunk_stats(x: np.ndarray, programs: int, chunk: int) -> list[tuple[float, float]]:
    """Each program's (m, l) of its own chunk x[c*chunk : (c+1)*chunk], in float64."""
    return [_stats(x[c * chunk:(c + 1) * chunk]) for c in range(programs)]


def _stats_close(got: np.ndarray, want: list[tuple[float, float]]) -> list[int]:
    """The programs whose (m, l) in ``got`` (2 x programs, fp32) is not ``want``'s."""
    bad = []
    for c, (m, l) in enumerate(want):
        gm, gl = float(got[0, c]), float(got[1, c])
        if not (gm == m or abs(gm - m) <= 1e-5 * max(1.0, abs(m))) or not abs(gl - l) <= 1e-5 * max(1.0, abs(l)):
            bad.append(c)
    return bad


def ragged_chunk_problem(kernel, x: torch.Tensor, programs: int, block: int) -> str:
    """'' when ``kernel[(programs,)](x, m, l, n, CHUNK, BLOCK=block)`` stores each chunk's (m, l), with
    CHUNK = ceil(n / programs), which is not a whole number of tiles: the last tile of a chunk reaches past it."""
    if kernel is None:
        return ("chunk_stats_kernel was not given to the check (it is launched alone here): pass it as the second "
                "argument")
    n = x.numel()
    chunk = math.ceil(n / programs)
    partials = torch.full((2, programs + GUARD_LEN), float("nan"), device=DEVICE)
    partials[:, programs:] = GUARD
    with quiet():
        kernel[(programs,)](x, partials[0], partials[1], n, chunk, BLOCK=block)
    got = partials.cpu().numpy().astype(np.float64)
    if bool((got[:, programs:] != GUARD).any()):
        return f"a (m, l) was stored past the last of the {programs} programs' partials"
    row = x.detach().cpu().to(torch.float64).numpy()
    bad = _stats_close(got, chunk_stats(row, programs, chunk))
    if not bad:
        return ""
    c = bad[0]
    reach = math.ceil(chunk / block) * block  # how far a chunk's tiles go
    spilled = [_stats(row[k * chunk:min(k * chunk + reach, n)]) for k in range(programs)]
    if not _stats_close(got, spilled):
        return (f"program {c}'s (m, l) also took in the first {reach - chunk} elements of chunk {c + 1}: CHUNK = "
                f"{chunk} is not a whole number of {block}-lane tiles, so a chunk's last tile reaches past its end, "
                "and those lanes were read as its own - the next chunk's elements are counted twice (in both "
                "chunks' max and sum), so the row's L comes out too large")
    return (f"program {c}'s (m, l) is not the max and the sum of exp(x - max) of its own chunk "
            f"x[{c * chunk}:{min((c + 1) * chunk, n)}]")


def check_long_row(long_row_softmax, chunk_stats_kernel=None) -> Verdict:
    """Exercise ch05-long-row: ``long_row_softmax(x, out, programs=..., BLOCK=...)`` for one long 1-D row, and its
    ``chunk_stats_kernel`` launched alone on a chunk that is not whole tiles (found among the launcher's globals
    when it is not passed)."""
    if chunk_stats_kernel is None:
        chunk_stats_kernel = getattr(long_row_softmax, "__globals__", {}).get("chunk_stats_kernel")
    report = Report("ch05-long-row")
    rng = np.random.default_rng(CHECK_SEED)
    for name, n, programs, block, kind, dtype, traffic in LONG_CASES:
        x = torch.from_numpy(case_row(n, programs, block, kind, rng)).to(TORCH[dtype]).to(DEVICE)
        if traffic == RAGGED:
            report.run(name, lambda x=x, p=programs, b=block: ragged_chunk_problem(chunk_stats_kernel, x, p, b))
        elif traffic is None:
            report.run(name, lambda x=x, p=programs, b=block: long_row_problem(long_row_softmax, x, p, b))
        else:
            report.run(name, lambda x=x, p=programs, b=block, t=traffic: long_row_traffic_problem(
                long_row_softmax, x, p, b, per_program=t == "per program"))
    return Verdict(report.show())


def _stats_case(rng, name, x, programs, block, dtype="float32", whole_tiles=True):
    """chunk_stats_kernel on the row ``x``: each program's (m, l) in fp32, guard zones around the partials."""
    n = x.size
    chunk = chunk_size(n, programs, block) if whole_tiles else math.ceil(n / programs)
    x = cast(x, dtype)  # what the kernel reads
    stats = chunk_stats(x, programs, chunk)
    bufs = {"x": Buf(cast(np.concatenate([x, rng.normal(0, 3, GUARD_LEN)]), dtype), dtype)}
    for name_, k in (("m", 0), ("l", 1)):
        storage = np.concatenate([np.full(programs, np.nan), np.full(GUARD_LEN, GUARD)])
        bufs[name_] = Buf(storage, "float32", output=True, shape=(programs,), ref=np.array([s[k] for s in stats]))
    args = [("buf", "x"), ("buf", "m"), ("buf", "l"), ("int", n), ("int", chunk)]
    return KCase(name, (programs,), args, bufs, {"BLOCK": block})


def _long_row_cases(rng):
    """The grader's launches of the first kernel of ch05-long-row: every case of the table (rows from its seed),
    and one fresh chunk that is not whole tiles of BLOCK."""
    out = [_stats_case(rng, name, case_row(n, programs, block, kind, rng), programs, block, dtype,
                       whole_tiles=how != RAGGED)
           for name, n, programs, block, kind, dtype, how in LONG_CASES]
    n = int(rng.integers(60, 100))
    out.append(_stats_case(rng, f"{n} elements on 4 programs (CHUNK = {math.ceil(n / 4)}, not a multiple of "
                                "BLOCK = 8)", rng.normal(0, 3, n), 4, 8, whole_tiles=False))
    return out


JUDGES = {"ch05-long-row": KernelJudge("chunk_stats_kernel", _long_row_cases)}
