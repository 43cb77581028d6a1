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
from ...testing import compare, poisoned_like, randn
from .._pitfalls import Verdict, quiet
from ..common import Report
from ..judging import Buf, GUARD, GUARD_LEN, KCase, KernelJudge, cast
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
                    "-inf) must give (-inf, 0), and merging two such states must not make NaN (shift by 0 while "
                    "the max is -inf)")
        first = int(nan.nonzero()[0])
        if bool(nan[first:].all()):
            return (f"{problem} - the last outputs were never written (still NaN): the chunks must cover the whole "
                    "row, so round the chunk size up (triton.cdiv(n, programs)), not down")
        return f"{problem} - every program must write its whole chunk in the second launch"
    if y.shape == x.shape:
        s = float(y.to(torch.float64).sum())
        if abs(s - 1) > 1e-3:
            return (f"{problem} - the row does not sum to 1: normalise with the whole row's (M, L), the merge of "
                    "every program's (m, l), not with each chunk's own")
    return problem


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
        return (f"the launcher started {c.launches} kernel launch(es): the design is two, one that reduces each "
                "chunk to (m, l) and one that normalises, with the merge of the partials in between")
    reads = c.loads_of.get("x_ptr", c.loads)  # the signature names it x_ptr; else every load
    if reads > 2 * n:
        return (f"every element was read {_per_element(reads, n)} times: each launch reads every element once, "
                "2 reads in all")
    writes = c.stores_of.get("y_ptr", c.stores - 2 * programs)  # else every store but the partials
    if writes != n:
        return f"every output was written {_per_element(writes, n)} times: write each output once, in launch 2"
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


def _long_cases(seed: int = 58):
    d = DEVICE
    yield "1 element on 2 programs: the second program's chunk is empty", randn((1,), device=d, seed=seed), 2, 32
    yield "37 elements on 3 programs, BLOCK=8", randn((37,), device=d, seed=seed + 1), 3, 8
    yield "a rising row of 1000 on 4 programs, BLOCK=32: the max is in the last chunk", \
        torch.linspace(-10.0, 10.0, 1000, device=d), 4, 32
    lead = randn((300,), device=d, seed=seed + 2)
    lead[:160] = NEG_INF
    yield "300 elements on 4 programs, the first two chunks all -inf", lead, 4, 16
    yield "all-negative row of 200 around -1000 on 3 programs", randn((200,), device=d, seed=seed + 3) - 1000.0, 3, 16
    yield "float16 row of 500 on 3 programs, BLOCK=64", randn((500,), torch.float16, device=d, seed=seed + 4), 3, 64


def check_long_row(long_row_softmax) -> Verdict:
    """Exercise ch05-long-row: ``long_row_softmax(x, out, programs=..., BLOCK=...)`` for one long 1-D row."""
    report = Report("ch05-long-row")
    for name, x, programs, block in _long_cases():
        report.run(name, lambda x=x, p=programs, b=block: long_row_problem(long_row_softmax, x, p, b))
    small = randn((1000,), device=DEVICE, seed=59)
    report.run("1000 elements on 4 programs: 2 launches, each program reads its own chunk once per launch",
               lambda: long_row_traffic_problem(long_row_softmax, small, 4, 32, per_program=True))
    big = randn((500_000,), device=DEVICE, seed=60)
    report.run("one row of 500,000 on 8 programs, BLOCK=4096: correct, 2 reads + 1 write per element",
               lambda: long_row_traffic_problem(long_row_softmax, big, 8, 4096, per_program=False))
    return Verdict(report.show())


def _long_row_cases(rng):
    """The first launch of ch05-long-row: each program's chunk reduced to (m, l), with guard zones around the
    partials; chunks past the end of the row and chunks of -inf."""
    def case(name, x, programs, block, whole_tiles=True):
        n = x.size
        chunk = math.ceil(n / programs)
        if whole_tiles:
            chunk = math.ceil(chunk / block) * block
        else:
            name += f" (CHUNK = {chunk}, not a multiple of BLOCK = {block})"
        x = cast(x, "float32")  # what the kernel reads
        stats = [_stats(x[c * chunk:(c + 1) * chunk]) for c in range(programs)]
        bufs = {"x": Buf(cast(np.concatenate([x, rng.normal(0, 3, GUARD_LEN)]), "float32"))}
        for name_, k in (("m", 0), ("l", 1)):
            storage = np.concatenate([np.full(programs, np.nan), np.full(GUARD_LEN, GUARD)])
            bufs[name_] = Buf(storage, "float32", output=True, shape=(programs,),
                              ref=np.array([s[k] for s in stats]))
        args = [("buf", "x"), ("buf", "m"), ("buf", "l"), ("int", n), ("int", chunk)]
        return KCase(name, (programs,), args, bufs, {"BLOCK": block})

    n1 = int(rng.integers(20, 60))
    lead = rng.normal(0, 3, 200)
    lead[:100] = -np.inf
    return [case("1 element on 2 programs", rng.normal(0, 3, 1), 2, 16),
            case(f"{n1} elements on 3 programs", rng.normal(0, 3, n1), 3, 8),
            case(f"{n1 + 40} elements on 4 programs", rng.normal(0, 3, n1 + 40), 4, 8, whole_tiles=False),
            case("200 elements on 4 programs, the first two chunks all -inf", lead, 4, 16),
            case("all-negative row of 90 on 3 programs", rng.normal(0, 3, 90) - 1000.0, 3, 16),
            case("500,000 elements on 8 programs", rng.normal(0, 3, 500_000), 8, 4096)]


JUDGES = {"ch05-long-row": KernelJudge("chunk_stats_kernel", _long_row_cases)}
