"""Mutants of the capstone ch06-attention: the classic mistakes of an attention kernel with online softmax, each
written into the notebook's own solution, must fail the notebook check on the case built for it, with a message
that names the mistake and its consequence (never the fix: ``conftest.feedback_names_no_fix``), and must fail
the grader's judge on fresh values. Sizes stay tiny: the CPU interpreter runs all of it in CI.
"""
import shutil

import softmax_lab  # before triton: picks the device (the interpreter on a CPU)
import pytest
import torch

from conftest import exercise_source, run_check
from softmax_lab.checks import common
from softmax_lab.checks.ch06 import attention as cases

EX = "ch06-attention"
ACC_UPDATE = "acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))"
MASK_THEN_MAX = '        s = tl.where(keep, s, -float("inf"))\n        m_new = tl.maximum(m, tl.max(s, axis=1))\n'

# (mutant, edits of the solution, a case it must fail, words its FAIL line must hold)
MUTANTS = [
    ("no rescale of the accumulator when m grows", [(ACC_UPDATE, "acc = acc + tl.dot(p, v.to(tl.float32))")],
     "the max arrives late", "stayed weighted by the old max"),
    ("no rescale of l either", [(ACC_UPDATE, "acc = acc + tl.dot(p, v.to(tl.float32))"),
                                ("l = l * alpha + tl.sum(p, axis=1)", "l = l + tl.sum(p, axis=1)")],
     "the max arrives late", "stayed weighted by the old max"),
    ("no -inf guard on the shift", [('shift = tl.where(m_new == -float("inf"), 0.0, m_new)', "shift = m_new")],
     "left padding [0, 37], causal", "exp(-inf - (-inf)) is NaN"),
    ("no guard on l = 0", [("out = acc / tl.where(l == 0.0, 1.0, l)[:, None]", "out = acc / l[:, None]")],
     "a sequence that is all padding", "a query that sees no key came out NaN"),
    ("mask applied after the max",
     [(MASK_THEN_MAX, MASK_THEN_MAX.split("\n")[1] + "\n" + MASK_THEN_MAX.split("\n")[0] + "\n")],
     "score hundreds above", "masked scores took part in the max"),
    ("fp16 accumulation of the output",
     [("acc = tl.zeros([BLOCK_M, D], tl.float32)", "acc = tl.zeros([BLOCK_M, D], q_ptr.dtype.element_ty)"),
      (ACC_UPDATE, f"acc = ({ACC_UPDATE[6:]}).to(q_ptr.dtype.element_ty)")],
     "values that cancel", "accumulator lost what 16 bits cannot hold"),
    ("causal mask off by one (the diagonal left out)",
     [("keep = keep & (ks[None, :] <= qs[:, None])", "keep = keep & (ks[None, :] < qs[:, None])")],
     "causal, 2x2x50", "off by one"),
    ("causal mask off by one (one key too many)",
     [("keep = keep & (ks[None, :] <= qs[:, None])", "keep = keep & (ks[None, :] <= qs[:, None] + 1)")],
     "causal, 2x2x50", "off by one"),
    ("left padding ignored", [("keep = (ks[None, :] < S) & (ks[None, :] >= pad)", "keep = ks[None, :] < S")],
     "left padding [5, 0], not causal", "left padding ignored"),
    ("the pad read per (batch, head), not per batch",
     [("pad = tl.load(pad_ptr + bh // H)", "pad = tl.load(pad_ptr + bh)")],
     "two heads per sequence", "two heads per sequence"),
    ("rows stepped by D, not the row stride", [("(rows + ks)[:, None] * k_stride", "(rows + ks)[:, None] * D"),
                                               ("(rows + ks)[:, None] * v_stride", "(rows + ks)[:, None] * D")],
     "packed qkv", "as if each tensor were contiguous"),
]


WALK_1 = '''    for start in range(0, end, BLOCK_N):  # a first walk: the final max of every query
        ks = start + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + (rows + ks)[:, None] * k_stride + d[None, :], mask=ks[:, None] < S, other=0.0)
        s = tl.dot(q, tl.trans(k.to(tl.float32))) * scale
        keep = (ks[None, :] < S) & (ks[None, :] >= pad)
        if CAUSAL:
            keep = keep & (ks[None, :] <= qs[:, None])
        m = tl.maximum(m, tl.max(tl.where(keep, s, -float("inf")), axis=1))
'''
LOOP = "    for start in range(0, end, BLOCK_N):\n"


def mutate(edits) -> str:
    source = exercise_source(EX)
    for old, new in edits:
        assert old in source, f"the solution of {EX} no longer holds {old!r}: update this test"
        source = source.replace(old, new)
    return source


def check_lines(module, monkeypatch) -> tuple[bool, list[str]]:
    """The check's verdict and its FAIL lines, one per failing case (not grouped by reason)."""
    monkeypatch.setattr(common.Report, "grouped_lines", lambda self: list(self.lines))
    ok, text = run_check(EX, module.attention)
    return ok, [line for line in text.splitlines() if line.startswith("FAIL")]


def test_solution_passes(exercise_module, monkeypatch):
    ok, fails = check_lines(exercise_module(EX), monkeypatch)
    assert ok and not fails, fails


@pytest.mark.parametrize("mutant,edits,case,words", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_mutant_fails_naming_its_mistake(mutant, edits, case, words, exercise_module, monkeypatch):
    ok, fails = check_lines(exercise_module(EX, source=mutate(edits)), monkeypatch)
    assert not ok, mutant
    line = next((ln for ln in fails if case in ln), None)
    assert line is not None and words in line, f"{mutant}: {case!r} should fail saying {words!r}:\n" + "\n".join(fails)


def test_fully_masked_contract_matches_sdpa():
    """The contract (zeros for a query that sees no key) is what SDPA gives in float64 here, and the reference
    keeps it: a padding query's row is 0, the others match a plain softmax over their visible keys."""
    q, k, v = cases.case_tensors("random", (2, 1, 20, 16), seed=1)
    ref = cases.attention_ref(q, k, v, causal=True, left_pad=[20, 3])
    assert torch.equal(ref[0], torch.zeros_like(ref[0]))  # every query of sequence 0 sees nothing
    assert torch.equal(ref[1, :, :3], torch.zeros_like(ref[1, :, :3]))
    s = (q[1, 0] @ k[1, 0].T) / 4.0
    s[:, :3] = float("-inf")
    s = s.masked_fill(torch.ones(20, 20, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(ref[1, 0, 3:], torch.softmax(s[3:], dim=-1) @ v[1, 0], atol=1e-12)


def test_bf16_dots_in_the_interpreter_are_named(exercise_module, monkeypatch):
    """A kernel that hands bf16 tiles to tl.dot is right on a GPU; on the CPU the interpreter multiplies their raw
    bits, and the check says so instead of calling the learner's kernel wrong."""
    if softmax_lab.ON_GPU:
        pytest.skip("the interpreter's bf16 dots only")
    source = mutate([("s = tl.dot(q, tl.trans(k.to(tl.float32))) * scale",
                      "s = tl.dot(q.to(k.dtype), tl.trans(k)).to(tl.float32) * scale")])
    ok, fails = check_lines(exercise_module(EX, source=source), monkeypatch)
    assert not ok and fails and all("bf16" in ln for ln in fails), fails
    assert any("raw 16-bit integers" in ln for ln in fails), fails


# ============================================================================ the grader's judge, fresh values

def _judge(sources, seed):
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    return judge.run("", {EX: sources}, Limits(cell_timeout=60), seed=seed)[EX]


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap")
def test_judge_passes_the_solution_and_fails_the_mutants():
    """The grader's launches (fresh values, its sandbox): the solution passes every case; the classic mistakes
    (no rescale, no -inf guard, mask after the max, fp16 accumulator, causal off by one) fail the case built for
    each, which names the trap it sets."""
    good = _judge(exercise_source(EX), seed=5)
    # on a GPU with the memory the judge adds one case of rows 2**30 elements apart (64-bit offsets)
    from softmax_lab.checks import judging

    assert good.ok and good.total == len(cases.ATTENTION_CASES) + int(judging.gpu_scale()), good.text(EX)
    for mutant, edits, case, words in MUTANTS[:1] + MUTANTS[2:3] + MUTANTS[4:7]:
        bad = _judge(mutate(edits), seed=5)
        assert not bad.ok, mutant
        assert any(case in ln and "the trap this case sets" in ln and words in ln for ln in bad.lines), \
            f"{mutant}:\n{bad.text(EX)}"


def test_no_rescale_is_named_wherever_it_shows(exercise_module, monkeypatch):
    """The mistake is recognised by its output (the no-rescale attention, tile by tile), not by the case it
    fails: no case's own trap is blamed for it."""
    ok, fails = check_lines(exercise_module(EX, source=mutate(MUTANTS[0][1])), monkeypatch)
    assert not ok and fails
    assert all("stayed weighted by the old max" in ln for ln in fails), "\n".join(fails)


def test_two_walks_are_caught_by_the_traffic(exercise_module, monkeypatch):
    """A kernel that walks the keys once for the max and again for the output gives the right values (its
    accumulator never needs a rescale): only memcount's count of its key reads tells it from the real thing."""
    ok, fails = check_lines(exercise_module(EX, source=mutate([(LOOP, WALK_1 + LOOP)])), monkeypatch)
    assert not ok and len(fails) == 1, fails
    assert "one walk?" in fails[0] and "every key was read 2 times per block of queries" in fails[0], fails
