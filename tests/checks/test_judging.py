"""What the grader launches (the judges): only the learner's Triton code is defined, every solution kernel is
accepted, big buffers reach the kernels through windows, and solutions pass while mutants fail on fresh inputs."""
from pathlib import Path

import nbformat
import numpy as np
import pytest

from check_helpers import exercise_source, notebook_cell
from mutant_helpers import mutate
from softmax_lab.course import notebook

CH05 = "05_online_softmax.ipynb"


@pytest.mark.parametrize("source,words", [
    ("@triton.jit\ndef k(x):\n    import os\n", "Import"),
    ("@triton.jit\ndef k(x):\n    open('/grader-out/results.json', 'w')\n", "calls `open`"),
    ("@triton.jit\ndef k(x):\n    y = x.__class__\n", "__class__"),
    ("@triton.jit\ndef k(x):\n    tl.store(x, HELPER)\n", "defined outside"),
    ("@my_decorator\n@triton.jit\ndef k(x):\n    pass\n", "only @triton.jit"),
    ("@triton.jit\ndef k(x, y=print('hi')):\n    pass\n", "constants"),
    ("@triton.jit\ndef k(x: print('hi')):\n    pass\n", "annotations other than"),
    ("@triton.jit\ndef k(x: tl.tensor):\n    pass\n", "annotations other than"),
])
def test_judge_defines_only_triton_code(source, words):
    """The judge defines the learner's kernels alone, after checking they are Triton code (on the CPU the
    interpreter runs a kernel as Python: the allow-list keeps other Python out)."""
    from softmax_lab.grading import judge_harness

    with pytest.raises(judge_harness.SourceRejected, match=words.replace("(", r"\(")):
        judge_harness.define_kernels(source)


def test_judge_accepts_every_solution_kernel():
    from softmax_lab.grading import judge, judge_harness

    seen = 0
    for path in sorted((Path(__file__).parents[2] / "solutions").glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        for cell in nb.cells:
            ident = notebook.tag_value(cell, "exercise:")
            j = judge.judges().get(ident)
            if j is not None and j.kind == "kernel":
                assert j.kernel in judge_harness.define_kernels(cell.source), ident
                seen += 1
    assert seen >= 7


@pytest.mark.parametrize("name", ["04_three_kernels_to_one.ipynb", "06_half_precision_and_attention.ipynb",
                                  "08_backward.ipynb"])
def test_judge_big_buffers_plumbing(name, monkeypatch):
    """On a GPU the judge launches kernels on buffers past 2**31 elements, shipping only windows of them; here the
    same path runs with rows 4096 apart (no overflow: this checks the windows, pointers and strides)."""
    from softmax_lab.checks import judging
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    pytest.importorskip("shutil").which("bwrap") or pytest.skip("needs bubblewrap")
    monkeypatch.setattr(judging, "gpu_scale", lambda: True)
    monkeypatch.setattr(judging, "BIG_STEP", 4096)
    nb = nbformat.read(str(Path(__file__).parents[2] / "solutions" / name), as_version=4)
    kernels = {notebook.tag_value(c, "exercise:"): c.source for c in nb.cells
               if judge.judges().get(notebook.tag_value(c, "exercise:")) is not None
               and judge.judges()[notebook.tag_value(c, "exercise:")].kind == "kernel"}
    verdicts = judge.run("", kernels, Limits(cell_timeout=60), seed=7)
    for ident, v in verdicts.items():
        assert v.ok and any("2**30 apart" in c.name for c in judge.judges()[ident].cases(np.random.default_rng(7))), \
            v.text(ident)
    # A store that steps rows with the input's stride writes into the output's guard margins.
    src = kernels.get("ch04-fused")
    if src:
        bad = src.replace("out_ptr + row * out_row_stride", "out_ptr + row * (out_row_stride + 1)")
        v = judge.run("", {"ch04-fused": bad}, Limits(cell_timeout=60), seed=7)["ch04-fused"]
        assert not v.ok and any("2**30 apart" in ln and "64-bit" in ln for ln in v.lines), v.text("ch04-fused")


JUDGED = {  # exercise -> a mutant the grader's own judge (fresh inputs, outside the notebook) must fail
    "ch01-shift-trace": [("return [True, False, False, False, False]", "return [True, True, True, True, True]")],
    "ch01-count-nonfinite": [('"wide": [[1, 0], [3, 0], [3, 0]]', '"wide": [[3, 0], [3, 0], [3, 0]]')],
    "ch02-padding-self-test": [("[[-3002.0, -3001.0, -3000.0],", "[[-1002.0, -1001.0, -1000.0],")],
    "ch02-masked-load-store": [("scores = tl.where(mask, x, 0.0)", "scores = x")],
    "ch03-naive-normalize": [("return rows * cols * (2 * cols + 1)", "return rows * cols * (2 * cols + 2)")],
    "ch04-traffic": [("loads = rows * cols + (rows * cols + rows) + (rows * cols + rows)", "loads = 3 * rows * cols")],
}


def test_grader_judges_the_new_exercises():
    """The grader calls the learner's functions itself (judges): solutions pass, mutants fail, and the traffic
    judge's feedback holds no expected total."""
    import shutil

    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    good = judge.run("", {ex: exercise_source(ex) for ex in JUDGED}, Limits(cell_timeout=60), seed=3)
    assert all(good[ex].ok for ex in JUDGED), {ex: good[ex].text(ex) for ex in JUDGED}
    bad = judge.run("", {ex: mutate(ex, edits) for ex, edits in JUDGED.items()}, Limits(cell_timeout=60), seed=3)
    for ex in JUDGED:
        assert not bad[ex].ok, bad[ex].text(ex)
    assert all(ln.endswith("loads too low") for ln in bad["ch04-traffic"].lines if "three_pass" in ln), \
        bad["ch04-traffic"].lines


def test_judges_of_the_new_cases(tmp_path):
    """The grader's own launches: solutions pass; a chunk mask that ignores the chunk's end, an fp16 dot product
    and a merge without the -inf guard fail."""
    pytest.importorskip("shutil").which("bwrap") or pytest.skip("needs bubblewrap")
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    src = {"ch05-combine": notebook_cell("solutions", CH05, "ch05-combine"),
           "ch05-long-row": notebook_cell("solutions", CH05, "ch05-long-row"),
           "ch08-backward": notebook_cell("solutions", "08_backward.ipynb", "ch08-backward")}
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


def test_a_hint_called_in_the_exercise_cell_does_not_break_the_judge():
    """The judge runs the cell alone, without the package: a ``softmax_lab.hint(...)`` line in it is left out there
    (the hints shown are read from the notebook's outputs), so a right answer still passes."""
    import shutil

    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    from conftest import exercise_source as cell_of

    ex = "ch07-bandwidth"
    source = 'softmax_lab.hint("ch07-bandwidth", 1)\n' + cell_of(ex)
    v = judge.run("", {ex: source}, Limits(cell_timeout=60), seed=3)[ex]
    assert v.ok, v.text(ex)


def test_the_grader_refuses_predictions_computed_by_code():
    """ch01's predict-then-run exercises: the judge reads the cell's source as the notebook check does, so a trace
    or counts computed with torch fail under grading even when the values are right (and the solutions pass)."""
    import shutil

    from softmax_lab.checks import ch01
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    trace = ('    if row == "zeros":\n        return [0.0,',
             '    x = torch.tensor({"zeros": [0.0] * 3, "thousands": [1000.0] * 3, '
             '"tie": [1000.0, -1000.0, 1000.0]}[row])\n'
             '    m, p = x.max(), torch.exp(x - x.max())\n'
             '    return [float(m), (x - m).tolist(), p.tolist(), float(p.sum()), (p / p.sum()).tolist()]\n'
             '    if row == "zeros":\n        return [0.0,')
    counts = ('    return {\n        "chapter": [[0, 0], [4, 0], [4, 0]],',
              '    import numpy as np\n    return np.zeros((3, 2), int).tolist()\n'
              '    return {\n        "chapter": [[0, 0], [4, 0], [4, 0]],')
    exs = ("ch01-shift-trace", "ch01-count-nonfinite")
    good = judge.run("", {ex: exercise_source(ex) for ex in exs}, Limits(cell_timeout=60), seed=5)
    assert all(good[ex].ok for ex in exs), {ex: good[ex].text(ex) for ex in exs}
    bad = judge.run("", {"ch01-shift-trace": mutate("ch01-shift-trace", [trace]),
                         "ch01-count-nonfinite": mutate("ch01-count-nonfinite", [counts])},
                    Limits(cell_timeout=60), seed=5)
    for ex, words in (("ch01-shift-trace", "predicted_trace runs `torch.tensor("),
                      ("ch01-count-nonfinite", "predicted_counts runs `")):
        assert not bad[ex].ok
        assert any(ch01.NUMBERS_CASE in ln and words in ln for ln in bad[ex].lines), bad[ex].text(ex)
