"""Mutants of chapters 5, 6 and 8: wrong answers that the checks of the property each chapter teaches must catch.

Each mutant is a kernel (or function) a learner could write. For the properties added by issue 13 (is it online,
traffic, strided outputs, fp16 accumulation), the test asserts that the mutant passes every case of the check
*except* the new one(s) (so it passed the check as it was before) and that the new case fails with a message
that names the mistake. The new exercises (ch05-combine, ch05-long-row) get their solution, a blank and their
mutants here too. Sizes stay tiny: the CPU interpreter runs all of it in CI.
"""
import importlib.util
import math
from pathlib import Path

import softmax_lab
import nbformat
import pytest
import torch
import triton
import triton.language as tl

from softmax_lab.checks import ch05, ch06, ch08

NEG_INF = float("-inf")


def blank(*args, **kwargs):
    raise NotImplementedError("exercise: replace this line with your code")


def run(check, fn, capsys):
    ok = check(fn)
    return ok, capsys.readouterr().out


def fail_lines(out):
    return [line for line in out.splitlines() if line.startswith("FAIL")]


def assert_only_new_cases_fail(check, fn, new_case_words, message_words, capsys):
    """The mutant fails, every FAIL line is one of the new cases (so the old check passed it), and the
    message names the mistake."""
    ok, out = run(check, fn, capsys)
    assert not ok, out
    fails = fail_lines(out)
    assert fails, out
    for line in fails:
        assert any(w in line for w in new_case_words), f"an old case failed too:\n{line}\n{out}"
    for w in message_words:
        assert any(w in line for line in fails), f"no FAIL line says {w!r}:\n{out}"


def assert_fails_saying(check, fn, message_words, capsys):
    ok, out = run(check, fn, capsys)
    assert not ok, out
    for w in message_words:
        assert any(w in line for line in fail_lines(out)), f"no FAIL line says {w!r}:\n{out}"


def assert_passes(check, fn, exercise, capsys):
    ok, out = run(check, fn, capsys)
    assert ok and "FAIL" not in out, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED")


def assert_blank(check, fn, exercise, capsys):
    ok, out = run(check, fn, capsys)
    assert not ok
    assert all("not implemented yet" in line for line in fail_lines(out)), out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED (0/")


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
            if BUG == "provisional":  # writes a provisional output in walk 1, overwritten in walk 2
                tl.store(y_row + cols, (tl.exp(x - shift) / l).to(y_ptr.dtype.element_ty), mask=cols < n_cols)
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
    """The miss of issue 13: a kernel that walks the row three times passed 11/11."""
    assert_only_new_cases_fail(ch05.check_online_softmax, _online("three-walks"), ONLINE_NEW,
                               ["read every element 3 times", "that is not online"], capsys)


def test_online_provisional_writes(capsys):
    assert_only_new_cases_fail(ch05.check_online_softmax, _online("provisional"), ONLINE_NEW,
                               ["wrote every output 2 times"], capsys)


@pytest.mark.parametrize("bug,words", [("pad-zero", ["pad with 0 instead of -inf", "pad masked lanes with -inf"]),
                                       ("row-stride", ["row stride"])])
def test_online_named_pitfalls(bug, words, capsys):
    ok, out = run(ch05.check_online_softmax, _online(bug), capsys)
    assert not ok
    assert any(any(w in line for w in words) for line in fail_lines(out)), out


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
    (combine_no_rescale, ["rescale both to the merged max"]),
    (combine_one_side, ["only one of the two sums was rescaled"]),
    (combine_no_guard, ["two empty chunks", "shift by 0"]),
    (combine_scalars_only, ["elementwise on tensors"]),
    (combine_first_max, ["larger of the two maxima"]),
    (combine_exp_of_m, ["never by exp(m)"]),
], ids=["no-rescale", "one-side", "no-guard", "scalars-only", "first-max", "exp-of-m"])
def test_combine_mutants(fn, words, capsys):
    assert_fails_saying(ch05.check_combine, fn, words, capsys)


# =========================================================================================== ch05-long-row

@triton.jit
def _chunk_stats(x_ptr, m_ptr, l_ptr, n, CHUNK, BLOCK: tl.constexpr, BUG: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    start = c * CHUNK
    end = tl.minimum(start + CHUNK, n)
    m = -float("inf")
    l = 0.0
    for offset in range(0, CHUNK, BLOCK):
        cols = start + offset + tl.arange(0, BLOCK)
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


def test_long_row_solution(capsys):
    assert_passes(ch05.check_long_row, _long(), "ch05-long-row", capsys)


def test_long_row_blank(capsys):
    assert_blank(ch05.check_long_row, blank, "ch05-long-row", capsys)


@pytest.mark.parametrize("bug,combine,words", [
    ("own-chunk", combine_solution, ["does not sum to 1", "merge of every program's (m, l)"]),
    ("no-guard", combine_solution, ["chunk with nothing in it"]),
    ("", combine_no_guard, ["merging two such states must not make NaN"]),
    ("floor-chunk", combine_solution, ["round the chunk size up"]),
    ("one-program", combine_solution, ["only 1 of the 4 programs read x"]),
    ("whole-row-each", combine_solution, ["1 kernel launch(es)"]),
], ids=["own-chunk", "no-guard-kernel", "no-guard-combine", "floor-chunk", "one-program", "whole-row-each"])
def test_long_row_mutants(bug, combine, words, capsys):
    assert_fails_saying(ch05.check_long_row, _long(bug, combine), words, capsys)


# ============================================================================================== ch06-masked

@triton.jit
def _masked_kernel(x_ptr, y_ptr, pad_ptr, x_row_stride, y_row_stride, S, rows_per_batch, BLOCK: tl.constexpr,
                   CAUSAL: tl.constexpr, HAS_PAD: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = row % S
    k = tl.arange(0, BLOCK)
    keep = k < S
    if CAUSAL:
        keep = keep & (k <= q)
    if HAS_PAD:
        keep = keep & (k >= tl.load(pad_ptr + row // rows_per_batch))
    x_row = x_ptr + row * x_row_stride
    if BUG == "in-stride":
        x_row = x_ptr + row * S
    if BUG == "load-all":  # reads every score, masks afterwards: right values, more traffic
        x = tl.load(x_row + k, mask=k < S, other=-float("inf")).to(tl.float32)
        x = tl.where(keep, x, -float("inf"))
    else:
        x = tl.load(x_row + k, mask=keep, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    m = tl.where(m == -float("inf"), 0.0, m)
    if BUG == "load-twice":  # loads again for the exponentials
        x = tl.load(x_row + k, mask=keep, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - m)
    if BUG == "half-sum" and x_ptr.dtype.element_ty == tl.float16:  # the sum taken over fp16 copies
        total = tl.sum(e.to(tl.float16), axis=0).to(tl.float32)
    else:
        total = tl.sum(e, axis=0)
    y = e.to(tl.float32) / tl.where(total == 0.0, 1.0, total)
    y_row = y_ptr + row * y_row_stride
    if BUG == "out-stride":
        y_row = y_ptr + row * x_row_stride
    tl.store(y_row + k, y.to(y_ptr.dtype.element_ty), mask=k < S)


def _masked(bug=""):
    def masked_attention_softmax(scores, out=None, causal=True, left_pad=None):
        B, H, S, _ = scores.shape
        x = scores.reshape(B * H * S, S)
        out = torch.empty(scores.shape, dtype=scores.dtype, device=scores.device) if out is None else out
        y = out.view(B * H * S, S)
        pad = left_pad if left_pad is not None else x
        _masked_kernel[(B * H * S,)](x, y, pad, x.stride(0), y.stride(0), S, H * S,
                                     BLOCK=triton.next_power_of_2(S), CAUSAL=causal,
                                     HAS_PAD=left_pad is not None, BUG=bug)
        return out
    return masked_attention_softmax


def test_masked_solution(capsys):
    assert_passes(ch06.check_masked_softmax, _masked(), "ch06-masked", capsys)


@pytest.mark.parametrize("bug,new_cases,words", [
    ("out-stride", ["strided output"], ["the output has its own row stride"]),
    ("in-stride", ["strided scores"], ["x_ptr + row * x_row_stride"]),
    ("load-all", ["traffic"], ["read scores that the mask removes"]),
    ("load-twice", ["traffic"], ["read 2 times"]),
])
def test_masked_mutants(bug, new_cases, words, capsys):
    assert_only_new_cases_fail(ch06.check_masked_softmax, _masked(bug), new_cases, words, capsys)


def test_masked_half_sum(capsys, monkeypatch):
    """An fp16 sum: chapter 6's row names it. numpy (the interpreter's tl.sum) adds fp16 in fp32, so without the
    emulation that row passes (only the strict 64x64 case's extra rounding gives the mutant away there)."""
    import contextlib

    if softmax_lab.ON_GPU:
        pytest.skip("CPU interpreter emulation")
    ok, out = run(ch06.check_masked_softmax, _masked("half-sum"), capsys)
    assert not ok
    assert any("chapter 6's sum" in line and "accumulated in fp16" in line for line in fail_lines(out)), out
    monkeypatch.setattr(ch06, "half_sums_in_half", contextlib.nullcontext)
    ok, out = run(ch06.check_masked_softmax, _masked("half-sum"), capsys)
    assert not any("chapter 6's sum" in line for line in fail_lines(out)), out  # the interpreter alone hides it


def test_half_sums_in_half_only_touches_fp16_on_the_cpu():
    """The emulation: tl.sum of fp16 adds in fp16 while it is on, fp32 sums are unchanged, and it is undone."""
    if softmax_lab.ON_GPU:
        pytest.skip("the emulation is CPU-only (kernels compiled for the GPU never reach the interpreter)")
    from triton.runtime import interpreter

    original = interpreter.ReduceOps.sum
    terms = torch.full((4096,), math.exp(-8.0))
    terms[0] = 1.0
    sums = {}

    @triton.jit
    def _sum(x_ptr, out_ptr, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(out_ptr, tl.sum(x, axis=0).to(tl.float32))

    for dt in (torch.float16, torch.float32):
        out = torch.zeros(1)
        with ch06.half_sums_in_half():
            _sum[(1,)](terms.to(dt), out, BLOCK=4096)
        sums[dt] = float(out)
    assert interpreter.ReduceOps.sum is original
    assert sums[torch.float16] == 1.0  # chapter 6's running sum in fp16: every small term rounded away
    assert abs(sums[torch.float32] - 2.3737) < 1e-3


# ============================================================================================ ch08-backward

@triton.jit
def _backward_kernel(y_ptr, dy_ptr, dx_ptr, y_row_stride, dy_row_stride, dx_row_stride, n_cols,
                     BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if BUG == "no-cast" and y_ptr.dtype.element_ty == tl.float16:  # fp16 never converted: fp16 dot product
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0)
    elif BUG == "pad-inf":
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    elif BUG == "one-stride":
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    else:
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=0)
    if BUG == "load-twice":  # y loaded again for dx
        y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dx = y * (dy - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _backward(bug=""):
    def softmax_backward(y, dy, out=None):
        n_rows, n_cols = y.shape
        out = torch.empty(y.shape, dtype=y.dtype, device=y.device) if out is None else out
        _backward_kernel[(n_rows,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), n_cols,
                                    BLOCK=triton.next_power_of_2(n_cols), BUG=bug)
        return out
    return softmax_backward


def test_backward_solution(capsys):
    assert_passes(ch08.check_softmax_backward, _backward(), "ch08-backward", capsys)


def test_backward_no_cast_fails(capsys):
    """The miss of issue 13: a kernel that never casts passed "float16 2x100 (accumulate in fp32)"."""
    assert_only_new_cases_fail(ch08.check_softmax_backward, _backward("no-cast"), ["dy = 1000 + noise"],
                               ["accumulated in half precision"], capsys)


def test_backward_loads_twice_fails_traffic(capsys):
    assert_only_new_cases_fail(ch08.check_softmax_backward, _backward("load-twice"), ["traffic"],
                               ["y was read 2 times per element"], capsys)


@pytest.mark.parametrize("bug,words", [("pad-inf", ["padding lanes must load as 0.0"]),
                                       ("one-stride", ["own row stride"])])
def test_backward_named_pitfalls(bug, words, capsys):
    assert_fails_saying(ch08.check_softmax_backward, _backward(bug), words, capsys)


# ============================================== the new exercises as the notebooks hold them (both versions)

ROOT = Path(__file__).resolve().parents[2]
HEADER = "import softmax_lab\nimport math\nimport torch\nimport triton\nimport triton.language as tl\n\n"
CH05 = "05_online_softmax.ipynb"


def _cell(folder, notebook, exercise):
    nb = nbformat.read(ROOT / folder / notebook, as_version=4)
    cells = [c for c in nb.cells if f"exercise:{exercise}" in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"{notebook}: expected one cell tagged exercise:{exercise}"
    return cells[0].source


def _module(tmp_path, name, *sources):
    path = tmp_path / f"{name}.py"  # Triton needs the kernels' source in a real file
    path.write_text(HEADER + "\n\n".join(sources) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_new_exercises_solutions_pass(tmp_path, capsys):
    combine = _cell("solutions", CH05, "ch05-combine")
    m = _module(tmp_path, "sol_combine", combine)
    assert_passes(ch05.check_combine, m.combine, "ch05-combine", capsys)
    m = _module(tmp_path, "sol_long", combine, _cell("solutions", CH05, "ch05-long-row"))
    assert_passes(ch05.check_long_row, m.long_row_softmax, "ch05-long-row", capsys)


def test_new_exercises_blank_say_not_implemented(tmp_path, capsys):
    if not (ROOT / "notebooks" / CH05).exists():
        pytest.skip("notebooks/ not built")
    combine = _cell("notebooks", CH05, "ch05-combine")
    m = _module(tmp_path, "blank_combine", combine)
    assert_blank(ch05.check_combine, m.combine, "ch05-combine", capsys)
    # the long row with a blank combine and blank kernels: still "not implemented", never a crash
    m = _module(tmp_path, "blank_long", combine, _cell("notebooks", CH05, "ch05-long-row"))
    assert_blank(ch05.check_long_row, m.long_row_softmax, "ch05-long-row", capsys)


def test_new_exercises_have_no_skeleton():
    """ch05-combine and ch05-long-row: each function's whole body (after its docstring) is the solution region."""
    import ast

    for ident in ("ch05-combine", "ch05-long-row"):
        src = _cell("notebooks", CH05, ident)
        for fn in [n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]:
            body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) \
                else fn.body
            assert len(body) == 1 and isinstance(body[0], ast.Raise), (ident, fn.name, ast.unparse(fn))


def test_judges_of_the_new_cases(tmp_path):
    """The grader's own launches: solutions pass; a chunk mask that ignores the chunk's end, an fp16 dot product
    and a merge without the -inf guard fail."""
    pytest.importorskip("shutil").which("bwrap") or pytest.skip("needs bubblewrap")
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    src = {"ch05-combine": _cell("solutions", CH05, "ch05-combine"),
           "ch05-long-row": _cell("solutions", CH05, "ch05-long-row"),
           "ch08-backward": _cell("solutions", "08_backward.ipynb", "ch08-backward")}
    good = judge.run("", src, Limits(cell_timeout=60), seed=11)
    assert all(v.ok for v in good.values()), {k: v.text(k) for k, v in good.items()}
    end = 'mask=cols < end, other=-float("inf")).to(tl.float32)\n        m_new'
    assert end in src["ch05-long-row"]
    guard = 'shift = torch.where(m == float("-inf"), torch.zeros_like(m), m)'
    assert guard in src["ch05-combine"]
    bad = {"ch05-combine": src["ch05-combine"].replace(guard, "shift = m"),
           "ch05-long-row": src["ch05-long-row"].replace(end, end.replace("cols < end", "cols < n")),
           "ch08-backward": src["ch08-backward"].replace(".to(tl.float32)", "")}
    v = judge.run("", bad, Limits(cell_timeout=60), seed=11)
    assert any("two empty chunks" in ln for ln in v["ch05-combine"].lines), v["ch05-combine"].text("ch05-combine")
    assert any("not a multiple of BLOCK" in ln for ln in v["ch05-long-row"].lines), v["ch05-long-row"].text("x")
    assert any("dy = 1000 + noise" in ln for ln in v["ch08-backward"].lines), v["ch08-backward"].text("x")
