"""Exercise ch07-row-vector: ``row_vector(n_cols, *tensors)``, the ``VEC`` a register kernel may take its ints in
(16-byte vectors when the row length and every row stride are whole vectors, else 1). A wrong VEC is also
launched in the package's fused kernel, so the verdict shows the rows it breaks."""
from __future__ import annotations

import numpy as np
import torch
import triton

from ...device import DEVICE
from ...kernels._launch import row_vector as vector_rule  # the exercise's rule: what the launchers use
from ...reference import softmax_ref
from .._pitfalls import Verdict, quiet
from ..common import GUARD, Report
from ..judging import PCall, PythonJudge, expect_equal
from ._kernels import _not_written


def _rows_of(n_rows: int, n_cols: int, row_step: int, dtype, start: int = 0) -> torch.Tensor:
    """An [n_rows, n_cols] view whose rows are ``row_step`` elements apart, ``start`` elements into its memory
    (zeros), on the device the kernels run on."""
    base = torch.zeros(start + n_rows * row_step, dtype=dtype, device=DEVICE)
    return base.as_strided((n_rows, n_cols), (row_step, 1), start)


BF, F16, F32 = torch.bfloat16, torch.float16, torch.float32


# The cases, read by the notebook check and by the grader's judge alike, then fresh ones in both.
# (case, n_cols, [(n_rows, row step, dtype, start) for the input, then the output, ...])
VECTOR_CASES = [
    ("rows of 1000 fp32, contiguous", 1000, [(3, 1000, F32, 0), (3, 1000, F32, 0)]),
    ("rows of 1000 bf16, contiguous", 1000, [(3, 1000, BF, 0), (3, 1000, BF, 0)]),
    ("rows of 1004 fp16 (not whole vectors)", 1004, [(3, 1004, F16, 0), (3, 1004, F16, 0)]),
    ("x = big[:, :1000] of rows of 1002 fp32", 1000, [(3, 1002, F32, 0), (3, 1000, F32, 0)]),
    ("x = big[:, 8:1008] of rows of 1024 fp32 (its start is the pointer's business)", 1000,
     [(3, 1024, F32, 8), (3, 1000, F32, 0)]),
    ("a contiguous input, an output with rows 1001 apart", 1000, [(3, 1000, F32, 0), (3, 1001, F32, 0)]),
    ("rows of 24 bf16 into an fp32 output", 24, [(3, 24, BF, 0), (3, 24, F32, 0)]),
]


FRESH_VECTOR_CASES = 40  # fresh cases in every notebook check (one verdict line for all of them)
JUDGE_FRESH = 10         # fresh cases in every grader run, besides all the named ones


def fresh_case(rng: np.random.Generator) -> tuple[int, list[tuple]]:
    """One random (n_cols, specs) like VECTOR_CASES': two or three tensors of 2 to 4 rows (one row: its stride
    never matters, and either answer is safe), from a new generator every notebook run or the grader's seed."""
    dtypes = [[F32, F16, BF][int(rng.integers(3))] for _ in range(int(rng.integers(2, 4)))]
    n_cols = int(rng.choice([int(rng.integers(1, 3000)), 8 * int(rng.integers(1, 400))]))
    rows = int(rng.integers(2, 5))
    return n_cols, [(rows, n_cols + int(rng.choice([0, 0, 1, 2, 4, 8, int(rng.integers(0, 32))])), d, 0)
                    for d in dtypes]


def _fused_with(vec, tensors) -> str:
    """'' when ``vec`` divides the row length and every row stride; else which it does not, and what the fused
    kernel does on the first two tensors (input, output) when its launcher passes their ints divided by ``vec``
    (run here, with VEC=vec)."""
    from ...kernels.fused import fused_softmax_kernel

    if isinstance(vec, bool) or not isinstance(vec, int) or vec < 1:
        return f"row_vector returned {vec!r}; VEC is a whole number of elements, at least 1"
    x, y = tensors[0], tensors[1]
    n_rows, n_cols = x.shape
    names = ["the input's", "the output's"] + [f"tensor {k + 1}'s" for k in range(2, len(tensors))]
    bad = [f"the row length ({n_cols})"] if n_cols % vec else []
    bad += [f"{name} row stride ({t.stride(0)})" for name, t in zip(names, tensors) if t.stride(0) % vec and n_rows > 1]
    if not bad:
        return ""
    x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).to(x.dtype))
    y.fill_(GUARD)
    with quiet():
        fused_softmax_kernel[(n_rows,)](y, x, *[i // vec for i in (x.stride(0), y.stride(0), n_cols)],
                                        BLOCK=triton.next_power_of_2(n_cols), VEC=vec)
    wrong = int((~torch.isclose(y.double(), softmax_ref(x), atol=1e-2, rtol=1e-2).all(dim=1)).sum())
    shown = f"the fused kernel, given the ints // {vec}, got {wrong} of {n_rows} rows wrong" if wrong else \
        "its ints // VEC * VEC lose the remainder"
    return (f"VEC = {vec} does not divide {' and '.join(bad)}: {shown} - the launcher promised whole vectors "
            "where there are none")


def _vector_problem(row_vector, n_cols, tensors) -> str:
    got, want = row_vector(n_cols, *tensors), vector_rule(n_cols, *tensors)
    if isinstance(got, bool) or not isinstance(got, int):
        return f"row_vector returned {got!r}; VEC must be an int (it becomes a tl.constexpr)"
    if got == want:
        return ""
    wrong = _fused_with(got, tensors)
    if wrong:
        return wrong
    if got < want:
        return (f"VEC = {got}, expected {want}: every row here is whole 16-byte vectors, so the kernel may take "
                f"its ints in {want}-element pieces and move 16 bytes at a time")
    widest = max(t.element_size() for t in tensors)
    return (f"VEC = {got}, expected {want}: one of these tensors has {widest}-byte elements, and {got} of them "
            f"are {got * widest} bytes, more than one 16-byte access holds")


def _fresh_vectors(row_vector) -> str:
    rng = np.random.default_rng()
    for _ in range(FRESH_VECTOR_CASES):
        n_cols, specs = fresh_case(rng)
        tensors = [_rows_of(r, n_cols, step, d, start) for r, step, d, start in specs]
        rows = specs[0][0]
        problem = _vector_problem(row_vector, n_cols, tensors)
        if problem:
            shapes = ", ".join(f"{str(t.dtype)[6:]} rows {t.stride(0)} apart" for t in tensors)
            return f"{rows} row(s) of {n_cols} ({shapes}): {problem}"
    return ""


def check_row_vector(row_vector) -> Verdict:
    """Exercise ch07-row-vector: ``row_vector(n_cols, *tensors)`` gives the widest VEC that every row allows."""
    report = Report("ch07-row-vector")
    if _not_written(report, "row_vector", lambda: row_vector(8, torch.empty(2, 8))):
        return Verdict(report.show())
    for name, n_cols, specs in VECTOR_CASES:
        tensors = [_rows_of(r, n_cols, step, d, start) for r, step, d, start in specs]
        report.run(name, lambda n=n_cols, t=tensors: _vector_problem(row_vector, n, t))
    report.run(f"{FRESH_VECTOR_CASES} fresh random cases (new ones every run)", lambda: _fresh_vectors(row_vector))
    return Verdict(report.show())


def _vector_calls(rng):
    """The grader's calls: every named case and JUDGE_FRESH fresh ones from its seed, on shape-only tensors (a
    view's start offset is the pointer's business, so the grader's views start at 0)."""
    cases = [(n_cols, specs) for _, n_cols, specs in VECTOR_CASES]
    calls = []
    for n_cols, specs in cases + [fresh_case(rng) for _ in range(JUDGE_FRESH)]:
        tensors = [torch.empty_strided((r, n_cols), (step, 1), dtype=d, device="meta") for r, step, d, _ in specs]
        dtypes = [str(d).removeprefix("torch.") for _, _, d, _ in specs]
        args = [{"strided": {"shape": [r, n_cols], "stride": [step, 1], "dtype": name}}
                for (r, step, _, _), name in zip(specs, dtypes)]
        calls.append(PCall(f"row_vector({n_cols}, rows {[s[1] for s in specs]} apart, {'/'.join(dtypes)})",
                           "row_vector", [n_cols, *args], expect_equal(vector_rule(n_cols, *tensors))))
    return calls


JUDGES = {"ch07-row-vector": PythonJudge(_vector_calls)}
