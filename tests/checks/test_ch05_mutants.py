"""Mutants of chapter 5: wrong answers that the checks of the property the chapter teaches (online) must catch.

Each mutant is a kernel (or function) a learner could write. For the properties the check gained (is it online,
provisional writes), the test asserts that the mutant passes every case of the check *except* the new one(s)
(so it passed the check as it was before) and that the new case fails with a message that names the mistake.
The exercises ch05-combine and ch05-long-row get their solution, a blank and their mutants here too, as
stand-ins and as the notebooks hold them. Sizes stay tiny: the CPU interpreter runs all of it in CI.
"""
import functools
import importlib.util
import math

import pytest
import torch
import triton
import triton.language as tl

from check_helpers import NEG_INF, ROOT, blank, check_output, notebook_cell
from mutant_helpers import assert_blank, assert_fails_saying, assert_only_new_cases_fail, assert_passes, fail_lines
from softmax_lab.checks import ch05


# ================================================================================ ch05-online-kernel: online?

@triton.jit
def _online_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    if BUG == "row-stride":
        x_row = x_ptr + row * n_cols
    if BUG == "three-walks":  # max walk, sum walk, write walk: right values, not online
        m = -float("inf")
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
            m = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m == -float("inf"), 0.0, m)
        l = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
            l = l + tl.sum(tl.exp(x - shift), axis=0)
    else:
        m = -float("inf")
        l = 0.0
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            if BUG == "pad-zero":
                x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            else:
                x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
            l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
            m = m_new
            if BUG == "provisional" or BUG == "one-walk":  # a provisional output in walk 1
                tl.store(y_row + cols, (tl.exp(x - shift) / l).to(y_ptr.dtype.element_ty), mask=cols < n_cols)
    if BUG != "one-walk":  # walk 2 overwrites every provisional output
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < n_cols)


def _online(bug=""):
    def online_softmax(x, out=None, BLOCK=32):
        out = torch.empty_like(x) if out is None else out
        _online_kernel[(x.shape[0],)](x, out, x.stride(0), out.stride(0), x.shape[1], BLOCK=BLOCK, BUG=bug)
        return out
    return online_softmax


ONLINE_NEW = ["is it online?"]


def test_online_solution_passes(capsys):
    assert_passes(ch05.check_online_softmax, _online(), "ch05-online-kernel", capsys)


def test_online_three_walks_is_not_online(capsys):
    """A kernel that walks the row three times passed all 11 cases before the check counted reads."""
    assert_only_new_cases_fail(ch05.check_online_softmax, _online("three-walks"), ONLINE_NEW,
                               ["read every element 3 times", "that is not online"], capsys)


def test_online_provisional_writes(capsys):
    assert_only_new_cases_fail(ch05.check_online_softmax, _online("provisional"), ONLINE_NEW,
                               ["wrote every output 2 times"], capsys)


def test_online_one_walk_names_outputs_written_too_early(capsys):
    """One walk that stores each tile with the (m, l) known so far: one read and one write, right on rows of one
    tile, wrong wherever a later tile changes the max or the sum. The check names that, not the fix."""
    ok, out = check_output(ch05.check_online_softmax, _online("one-walk"), capsys)
    assert not ok
    assert "PASS  random 2x31, BLOCK=32" in out and "PASS  is it online?" in out, out
    fails = fail_lines(out)
    assert any("max in the last tile" in line and "max and sum of the tiles read so far" in line
               for line in fails), out


@pytest.mark.parametrize("bug,words", [("pad-zero", ["pad with 0 instead of -inf",
                                                    "padding lanes took part in the max"]),
                                       ("row-stride", ["row stride"])])
def test_online_named_pitfalls(bug, words, capsys):
    ok, out = check_output(ch05.check_online_softmax, _online(bug), capsys)
    assert not ok
    assert any(any(w in line for w in words) for line in fail_lines(out)), out


# ================================================================= ch05-online-update: the derived rate, inverted

def update_inverted_rate(m, l, tile):
    """The exchange rate turned upside down: the old l multiplied by exp(m_new - m) when the max grows."""
    m_new = max(m, float(tile.max()))
    if m_new == NEG_INF:
        return m_new, l
    rate = 0.0 if m == NEG_INF else math.exp(m_new - m)
    return m_new, l * rate + float(torch.exp(tile - m_new).sum())


def test_online_update_inverted_rate(capsys):
    assert_fails_saying(ch05.check_online_update, update_inverted_rate, ["converted the wrong way"], capsys)


def update_no_shift(m, l, tile):
    """No max subtracted at all: l is the plain sum of exp(x)."""
    return max(m, float(tile.max())), l + float(torch.exp(tile).sum())


def update_own_max(m, l, tile):
    """The old l rescaled, but the tile summed against its own max instead of m_new."""
    m_new = max(m, float(tile.max()))
    if m_new == NEG_INF:
        return m_new, l
    t_max = float(tile.max())
    old = l * math.exp(m - m_new) if m != NEG_INF else 0.0
    return m_new, old + (0.0 if t_max == NEG_INF else float(torch.exp(tile - t_max).sum()))


@pytest.mark.parametrize("update,words", [(update_no_shift, ["no max subtracted"]),
                                          (update_own_max, ["against the tile's own max"])],
                         ids=["no-shift", "own-max"])
def test_online_update_named_not_as_rescale(update, words, capsys):
    """The review: these were once called "l was not rescaled" (the no-shift one already at tile 1, where the max
    had not grown) and given the -inf message where nothing was NaN."""
    assert_fails_saying(ch05.check_online_update, update, words, capsys)
    ok, out = check_output(ch05.check_online_update, update, capsys)
    assert not any("not rescaled" in line or "NaN" in line for line in fail_lines(out)), out


# ============================================================================================ ch05-combine

def combine_solution(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    shift = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    return m, l1 * torch.exp(m1 - shift) + l2 * torch.exp(m2 - shift)


def combine_no_rescale(m1, l1, m2, l2):
    return torch.maximum(m1, m2), l1 + l2


def combine_one_side(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    shift = torch.where(m == NEG_INF, torch.zeros_like(m), m)
    return m, l1 * torch.exp(m1 - shift) + l2


def combine_no_guard(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    return m, l1 * torch.exp(m1 - m) + l2 * torch.exp(m2 - m)


def combine_scalars_only(m1, l1, m2, l2):  # Python max and math.exp: right on one pair, not elementwise
    m = max(m1, m2)
    shift = 0.0 if m == NEG_INF else m
    return m, l1 * math.exp(m1 - shift) + l2 * math.exp(m2 - shift)


def combine_first_max(m1, l1, m2, l2):
    shift = torch.where(m1 == NEG_INF, torch.zeros_like(m1), m1)
    return m1, l1 * torch.exp(m1 - shift) + l2 * torch.exp(m2 - shift)


def combine_exp_of_m(m1, l1, m2, l2):  # rescales through exp(m) itself: overflows at 1000
    m = torch.maximum(m1, m2)
    return m, (l1 * torch.exp(m1) + l2 * torch.exp(m2)) / torch.exp(m)


def test_combine_solution(capsys):
    assert_passes(ch05.check_combine, combine_solution, "ch05-combine", capsys)


def test_combine_blank(capsys):
    assert_blank(ch05.check_combine, blank, "ch05-combine", capsys)


@pytest.mark.parametrize("fn,words", [
    (combine_no_rescale, ["each l was counted against its own chunk's max"]),
    (combine_one_side, ["only one of the two sums was rescaled"]),
    (combine_no_guard, ["two empty chunks", "exp(-inf - (-inf)) = NaN"]),
    (combine_scalars_only, ["many (m, l) pairs at once"]),
    (combine_first_max, ["larger of the two maxima"]),
    (combine_exp_of_m, ["a rescaling factor grew past what a float holds"]),
], ids=["no-rescale", "one-side", "no-guard", "scalars-only", "first-max", "exp-of-m"])
def test_combine_mutants(fn, words, capsys):
    assert_fails_saying(ch05.check_combine, fn, words, capsys)


# =========================================================================================== ch05-long-row

@triton.jit
def _chunk_stats(x_ptr, m_ptr, l_ptr, n, CHUNK, BLOCK: tl.constexpr, BUG: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    last = CHUNK
    if BUG == "mask-at-n":  # masked at the row's end only: right while CHUNK is whole tiles
        end = n
    if BUG == "overlap":  # each chunk's sum also counts the next chunk's first element
        end = tl.minimum(start + CHUNK + 1, n)
        last = CHUNK + BLOCK
    if BUG == "drop-tail":  # CHUNK // BLOCK whole tiles: a chunk's last, partial tile is never read
        last = CHUNK // BLOCK * BLOCK
    m = -float("inf")
    l = 0.0
    for offset in range(0, last, BLOCK):
        cols = start + offset + tl.arange(0, BLOCK)
        if BUG == "pad-zero":  # padding lanes read 0: they count in the chunk's max and sum
            x = tl.load(x_ptr + cols, mask=cols < end, other=0.0).to(tl.float32)
        else:
            x = tl.load(x_ptr + cols, mask=cols < end, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        if BUG == "no-guard":
            shift = m_new
        else:
            shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    tl.store(m_ptr + c, m)
    tl.store(l_ptr + c, l)


@triton.jit
def _normalize(x_ptr, y_ptr, stats_ptr, n, CHUNK, BLOCK: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    M = tl.load(stats_ptr)
    L = tl.load(stats_ptr + 1)
    for offset in range(0, CHUNK, BLOCK):
        cols = start + offset + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < end, other=-float("inf")).to(tl.float32)
        tl.store(y_ptr + cols, (tl.exp(x - M) / L).to(y_ptr.dtype.element_ty), mask=cols < end)


@triton.jit
def _normalize_own_chunk(x_ptr, y_ptr, m_ptr, l_ptr, n, CHUNK, BLOCK: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    M = tl.load(m_ptr + c)
    L = tl.load(l_ptr + c)
    for offset in range(0, CHUNK, BLOCK):
        cols = start + offset + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < end, other=-float("inf")).to(tl.float32)
        tl.store(y_ptr + cols, (tl.exp(x - M) / L).to(y_ptr.dtype.element_ty), mask=cols < end)


@triton.jit
def _whole_row_each(x_ptr, y_ptr, n, CHUNK, BLOCK: tl.constexpr):
    """One launch: every program finds the whole row's (m, l) itself, then writes its chunk."""
    c = tl.program_id(0).to(tl.int64)
    m = -float("inf")
    l = 0.0
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        l = l * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    for offset in range(0, CHUNK, BLOCK):
        cols = start + offset + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + cols, mask=cols < end, other=-float("inf")).to(tl.float32)
        tl.store(y_ptr + cols, (tl.exp(x - m) / l).to(y_ptr.dtype.element_ty), mask=cols < end)


def _long(bug="", combine=combine_solution):
    def long_row_softmax(x, out=None, programs=8, BLOCK=1024):
        n = x.numel()
        out = torch.empty_like(x) if out is None else out
        grid = 1 if bug == "one-program" else programs
        chunk = triton.cdiv(triton.cdiv(n, grid), BLOCK) * BLOCK
        if bug == "floor-chunk":
            chunk = n // grid
        if bug == "drop-tail":  # chunks of ceil(n / programs), not whole tiles
            chunk = triton.cdiv(n, grid)
        if bug == "whole-row-each":
            _whole_row_each[(grid,)](x, out, n, chunk, BLOCK=BLOCK)
            return out
        m = torch.empty(grid, dtype=torch.float32, device=x.device)
        l = torch.empty(grid, dtype=torch.float32, device=x.device)
        _chunk_stats[(grid,)](x, m, l, n, chunk, BLOCK=BLOCK, BUG=bug)
        if bug == "own-chunk":
            _normalize_own_chunk[(grid,)](x, out, m, l, n, chunk, BLOCK=BLOCK)
            return out
        M, L = m[0], l[0]
        for c in range(1, grid):
            M, L = combine(M, L, m[c], l[c])
        _normalize[(grid,)](x, out, torch.stack([M, L]), n, chunk, BLOCK=BLOCK)
        return out
    return long_row_softmax


class _StatsKernel:
    """chunk_stats_kernel as the check launches it alone (``kernel[grid](x, m, l, n, CHUNK, BLOCK=...)``):
    _chunk_stats with one BUG bound, or a blank one."""
    def __init__(self, bug=""):
        self.bug = bug

    def __getitem__(self, grid):
        if self.bug == "blank":
            return blank
        return lambda *args, **kwargs: _chunk_stats[grid](*args, BUG=self.bug, **kwargs)


def _check(bug=""):
    """check_long_row with the launcher's chunk_stats_kernel (the notebook passes both)."""
    return functools.partial(ch05.check_long_row, chunk_stats_kernel=_StatsKernel(bug))


def test_long_row_solution(capsys):
    assert_passes(_check(), _long(), "ch05-long-row", capsys)


def test_long_row_blank(capsys):
    assert_blank(_check("blank"), blank, "ch05-long-row", capsys)


def test_long_row_masked_only_at_n(capsys):
    """The review (2026-12-02): a chunk masked only at the row's end is right while the launcher's CHUNK is whole
    tiles (every case but one), and counts the next chunk's first elements when it is not (the grader's judge
    had that case, the notebook did not)."""
    ok, out = check_output(_check("mask-at-n"), _long("mask-at-n"), capsys)
    assert not ok, out
    ragged = next(name for name, *_, how in ch05.long_row.LONG_CASES if how == ch05.long_row.RAGGED)
    for name, *_ in ch05.long_row.LONG_CASES:
        if name != ragged:
            assert f"PASS  {name}" in out.splitlines(), out
    line = next(ln for ln in fail_lines(out) if ln.startswith(f"FAIL  {ragged}:"))
    assert "took in the first 6 elements of chunk 1" in line and "counted twice" in line, line
    assert "reaches past its end" in line, line


@pytest.mark.parametrize("bug,combine,words", [
    ("own-chunk", combine_solution, ["a whole number", "normalised with its own (m, l)"]),
    ("pad-zero", combine_solution, ["less than 1", "padding or a neighbour's elements, in a chunk's max"]),
    ("overlap", combine_solution, ["less than 1", "a neighbour's elements"]),
    ("", combine_no_rescale, ["less than 1", "still counted against its own chunk's max"]),
    ("no-guard", combine_solution, ["chunk with nothing in it"]),
    ("", combine_no_guard, ["or the merge of two such chunks, made a NaN"]),
    ("floor-chunk", combine_solution, ["belong to no program"]),
    ("one-program", combine_solution, ["only 1 of the 4 programs read x"]),
    ("whole-row-each", combine_solution, ["1 kernel launch(es)"]),
    ("drop-tail", combine_solution, ["the row sums to inf", "left out of every chunk's max and sum",
                                     "(M, L) = (-inf, 0)"]),
], ids=["own-chunk", "pad-zero", "overlap", "combine-no-rescale", "no-guard-kernel", "no-guard-combine",
        "floor-chunk", "one-program", "whole-row-each", "drop-tail"])
def test_long_row_mutants(bug, combine, words, capsys):
    assert_fails_saying(_check(bug), _long(bug, combine), words, capsys)
    if bug != "own-chunk":  # the review: padding and overlaps were once diagnosed as per-chunk normalisation
        ok, out = check_output(_check(bug), _long(bug, combine), capsys)
        assert not any("own (m, l)" in line for line in fail_lines(out)), out
    if bug == "drop-tail":  # the review: round(inf) once crashed the check ("your code raised OverflowError")
        ok, out = check_output(_check(bug), _long(bug, combine), capsys)
        assert "OverflowError" not in out, out
        line = next(ln for ln in fail_lines(out) if ln.startswith("FAIL  1 element on 2 programs"))
        assert "the row sums to inf" in line, line


# ============================================== the new exercises as the notebooks hold them (both versions)

HEADER = "import softmax_lab\nimport math\nimport torch\nimport triton\nimport triton.language as tl\n\n"
CH05 = "05_online_softmax.ipynb"


def _module(tmp_path, name, *sources):
    path = tmp_path / f"{name}.py"  # Triton needs the kernels' source in a real file
    path.write_text(HEADER + "\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_new_exercises_solutions_pass(tmp_path, capsys):
    combine = notebook_cell("solutions", CH05, "ch05-combine")
    m = _module(tmp_path, "sol_combine", combine)
    assert_passes(ch05.check_combine, m.combine, "ch05-combine", capsys)
    m = _module(tmp_path, "sol_long", combine, notebook_cell("solutions", CH05, "ch05-long-row"))
    assert_passes(ch05.check_long_row, m.long_row_softmax, "ch05-long-row", capsys)


def test_new_exercises_blank_say_not_implemented(tmp_path, capsys):
    if not (ROOT / "notebooks" / CH05).exists():
        pytest.skip("notebooks/ not built")
    combine = notebook_cell("notebooks", CH05, "ch05-combine")
    m = _module(tmp_path, "blank_combine", combine)
    assert_blank(ch05.check_combine, m.combine, "ch05-combine", capsys)
    # the long row with a blank combine and blank kernels: still "not implemented", never a crash
    m = _module(tmp_path, "blank_long", combine, notebook_cell("notebooks", CH05, "ch05-long-row"))
    assert_blank(ch05.check_long_row, m.long_row_softmax, "ch05-long-row", capsys)


def test_new_exercises_have_no_skeleton():
    """ch05-combine and ch05-long-row: each function's whole body (after its docstring) is the solution region."""
    import ast

    for ident in ("ch05-combine", "ch05-long-row"):
        src = notebook_cell("notebooks", CH05, ident)
        for fn in [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]:
            body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) \
                else fn.body
            assert len(body) == 1 and isinstance(body[0], ast.Raise), (ident, fn.name, ast.unparse(fn))


# ============================================================ ch05-online-kernel: half precision in and out

HALF_CASES = ["float16 2x100", "bfloat16 2x100", "float16 2x256 of one 8"]
ONLINE_HALF = [  # (name, edits of the solution's kernel, words its FAIL lines must hold)
    ("exp-of-half", [(".to(tl.float32)", ""), ("tl.exp(x - shift)", "tl.exp(x - shift.to(x.dtype))")],
     ["tl.exp was given a half-precision tensor"]),
    ("sum-in-half", [("tl.sum(tl.exp(x - shift), axis=0)",
                      "tl.sum(tl.exp(x - shift).to(x_ptr.dtype.element_ty), axis=0)")],
     ["more than 1 fp16 ulp", "never grows past 1.0"]),
]


def _online_cell(edits, tmp_path):
    from check_helpers import load

    source = notebook_cell("solutions", CH05, "ch05-online-kernel")
    for old, new in edits:
        assert old in source, f"the solution of ch05-online-kernel no longer holds {old!r}: update this test"
        source = source.replace(old, new)
    return load("ch05-online-kernel", source, tmp_path).online_softmax


@pytest.mark.parametrize("name, edits, words", ONLINE_HALF, ids=[m[0] for m in ONLINE_HALF])
def test_online_half_precision_mutants(name, edits, words, tmp_path, capsys):
    """Half-precision arithmetic passes every fp32 case and fails only the fp16/bf16 ones, naming what happened."""
    assert_only_new_cases_fail(ch05.check_online_softmax, _online_cell(edits, tmp_path), HALF_CASES, words, capsys)


def test_online_without_conversion_or_cast_is_right(tmp_path, capsys):
    """No `.to(tl.float32)` at the loads and no cast at the store is still a right kernel in Triton: `x - shift`
    takes the fp32 running max's type (exp, max and sum run in fp32) and tl.store converts to the output's dtype,
    in the interpreter as on the GPU. The fp16 cases judge the result (within 1 fp16 ulp), not the spelling."""
    fn = _online_cell([(".to(tl.float32)", ""), ("y.to(y_ptr.dtype.element_ty)", "y")], tmp_path)
    assert_passes(ch05.check_online_softmax, fn, "ch05-online-kernel", capsys)
