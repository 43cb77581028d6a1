"""Seed 002's code-point split (issue 26, item 7): normal inputs, boundary inputs and a hand-graded explanation.

An exercise declares ``parts`` and its ``boundary`` case names in the registry; the grader's judge decides the
normal and the boundary part case by case, the explanation is a free-text item ``explain:<id>`` graded by hand
(the manual sheet, ``--merge``, the totals). Exercises without ``parts`` keep all-or-nothing points
(tests/grading/test_grade.py).

The end-to-end test grades a copy of the fixture chapter 90 whose fx-kernel (3 points) is split 1/1/1, with
"all-negative row of 1" as its boundary case, in one `grade` run (about 30 s on 2 cores).
"""
from __future__ import annotations

import csv
import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import test_grade as T
from conftest import GRADING_REGISTRY, ROOT
from softmax_lab.course import registry
from softmax_lab.grading.gradebook import default_feedback
from softmax_lab.course.notebook import tag_value, validate
from softmax_lab.grading.chapters import Exercise
from softmax_lab.grading.judge import Verdict
from softmax_lab.grading.scoring import PARTS_LINE, split_points

NB = "90_grading_fixture.ipynb"
PARTS_TOML = ('parts = { normal = 1, boundary = 1, explanation = 1 }\n'
              'boundary = ["all-negative row of 1"]\n')
# fx-kernel right on every row but a one-element one: fails only the boundary case
ONLY_BOUNDARY_WRONG = T.KERNEL_OK.replace(
    '    ### END SOLUTION\n', '    x = tl.where(n == 1, 0.0, x)\n    ### END SOLUTION\n')
assert ONLY_BOUNDARY_WRONG != T.KERNEL_OK


# ------------------------------------------------------------------------------------------------ registry


def _registry_with(tmp_path: Path, entry_extra: str, ident: str = "fx-kernel") -> Path:
    folder = tmp_path / "exercises"
    folder.mkdir(exist_ok=True)
    for p in GRADING_REGISTRY.glob("ch*.toml"):
        text = p.read_text(encoding="utf-8")
        if p.name == "ch90.toml":
            anchor = f'id = "{ident}"\n'
            at = text.index(anchor)
            check_line = text.index("\n", text.index("check = ", at)) + 1
            text = text[:check_line] + entry_extra + text[check_line:]
        (folder / p.name).write_text(text, encoding="utf-8")
    return folder


def test_registry_declares_parts_and_the_explanation_item(tmp_path):
    reg = registry.load(_registry_with(tmp_path, PARTS_TOML))
    ex = reg.exercise("fx-kernel")
    assert ex.points == 3 and ex.code_points == 2 and ex.part("normal") == 1 and ex.part("boundary") == 1
    assert ex.boundary == ("all-negative row of 1",) and ex.explain_id == "explain:fx-kernel"
    q = reg.question("explain:fx-kernel")
    assert q is not None and q.points == 1 and q.explains == "fx-kernel" and q.chapter == "90"
    assert [x.id for x in reg.questions("90")] == ["fx-why", "explain:fx-kernel"]
    assert reg.exercise("fx-double").parts == () and reg.exercise("fx-double").code_points == 2  # unchanged


@pytest.mark.parametrize("extra, words", [
    ('parts = { normal = 2, boundary = 1, explanation = 1 }\nboundary = ["x"]\n', "add up to 4"),
    ('parts = { normal = 1, edge = 1, explanation = 1 }\nboundary = ["x"]\n', "keys among"),
    ('boundary = ["x"]\n', "only for an exercise with parts"),
    ('parts = { normal = 1, boundary = 1, explanation = 1 }\n', "needs the boundary case names"),
    ('parts = { normal = 2, explanation = 1 }\nboundary = ["x"]\n', "need a boundary part"),
    ('parts = { boundary = 2, explanation = 1 }\nboundary = ["x"]\n', "needs a normal part"),
    ('parts = { normal = 1, boundary = 1, explanation = 1 }\nboundary = ["x", "x"]\n', "distinct"),
])
def test_registry_refuses_malformed_parts(tmp_path, extra, words):
    with pytest.raises(registry.RegistryError, match=words):
        registry.load(_registry_with(tmp_path, extra))


def test_a_question_may_not_take_an_explanation_id(tmp_path):
    folder = _registry_with(tmp_path, "")
    p = folder / "ch90.toml"
    p.write_text(p.read_text(encoding="utf-8") + '\n[[question]]\nid = "explain:fx-double"\npoints = 1\n',
                 encoding="utf-8")
    with pytest.raises(registry.RegistryError, match="explanation items"):
        registry.load(folder)


def with_explanation(nb, ident="fx-kernel", after_check=True):
    """The fixture solution with the explanation cells of ``ident`` (prompt, model answer, rubric) after its check."""
    cells = []
    for tag, text in ((f"explain:{ident}", "**Explain your implementation.** Why pad with -inf?"),
                      (f"answer:explain:{ident}", "### BEGIN SOLUTION\nA padding lane loaded as -inf can never win "
                                                  "the max of an all-negative row.\n### END SOLUTION"),
                      (f"rubric:explain:{ident}", "1 point: names why -inf lanes cannot win the max.")):
        cell = nbformat.v4.new_markdown_cell(text)
        cell.metadata["tags"] = [tag]
        cells.append(cell)
    at = T.index_of(nb, "check:", ident) + 1 if after_check else T.index_of(nb, "exercise:", ident)
    nb.cells[at:at] = cells
    return nb


def test_build_validation_wants_the_explanation_cell_after_the_check(tmp_path):
    reg = registry.load(_registry_with(tmp_path, PARTS_TOML))
    missing = validate(T.solution(), "90.ipynb", reg)
    assert any("explanation part of exercise fx-kernel" in p and "explain:fx-kernel" in p for p in missing), missing
    assert validate(with_explanation(T.solution()), "90.ipynb", reg) == []
    early = validate(with_explanation(T.solution(), after_check=False), "90.ipynb", reg)
    assert any("must come after the check cell of fx-kernel" in p for p in early), early


# ------------------------------------------------------------------------------------------------ scoring


def _split_exercise():
    return Exercise("fx-kernel", 2, 9, 10, "", normal=1, boundary=1, boundary_cases=("row of 1",),
                    check_boundary=("row of 1",), explain="explain:fx-kernel")


def _verdict(**cases):
    v = Verdict()
    for name, ok in cases.items():
        v.add(f"{name.replace('_', ' ')} (grader's launch)", "" if ok else "wrong", name.replace("_", " "))
    return v


def _check(*fails, cases=("row of 1", "row of 5", "reads each element once")):
    """A check's output: a PASS line per case not in ``fails``, then its verdict line."""
    lines = [f"FAIL  {c}: wrong" if c in fails else f"PASS  {c}" for c in cases]
    k = len(cases) - len(fails)
    return {"stdout": "\n".join(lines) + f"\nfx-kernel: FAILED ({k}/{len(cases)} checks passed)\n"}


def test_split_points_case_by_case():
    ex = _split_exercise()
    good = _verdict(row_of_1=True, row_of_5=True)
    assert split_points(ex, "passed", good, None)[0] == 2
    pts, words = split_points(ex, "failed", _verdict(row_of_1=False, row_of_5=True), _check("row of 1"))
    assert pts == 1 and "normal inputs 1/1; boundary inputs 0/1 (failed: row of 1)" in words, words
    pts, words = split_points(ex, "failed", _verdict(row_of_1=True, row_of_5=False), _check("row of 5"))
    assert pts == 1 and "normal inputs 0/1 (failed: row of 5)" in words and "boundary inputs 1/1" in words, words
    # the notebook's check failed a boundary case the grader's run passed: that part is not earned
    pts, words = split_points(ex, "failed", good, _check("row of 1"))
    assert pts == 1 and "boundary inputs 0/1 (a boundary case failed in the notebook's check)" in words, words
    # a grouped FAIL line (names cut short) for a normal and a boundary case: the PASS lines and k/n count
    grouped = {"stdout": "FAIL ×2 cases (row of 5; row of 1): wrong\nPASS  reads each element once\n"
                         "fx-kernel: FAILED (1/3 checks passed)\n"}
    assert split_points(ex, "failed", good, grouped)[0] == 0
    unreadable = {"stdout": "PASS  row of 1\nsomething else\n"}  # no verdict line last: nothing from the check
    assert split_points(ex, "failed", good, unreadable)[0] == 0
    # a property the check tests and the judge does not (no case name): the normal part
    pts, no_name = split_points(ex, "failed", good, _check("reads each element once"))
    assert pts == 1 and "normal inputs 0/1 (a case that is not a boundary case failed in the notebook's check)" \
        in no_name, no_name
    assert split_points(ex, "failed", None, _check("row of 1"))[0] == 0        # not judged: nothing
    assert split_points(ex, "error", good, None)[0] == 0
    assert words.startswith(PARTS_LINE) and "explain:fx-kernel" in words


# ------------------------------------------------------------------------------------------------ grading


@pytest.fixture(scope="module")
def split_class(tmp_path_factory):
    """A class of the split fixture chapter graded once: the solution, a kernel wrong only on the boundary case,
    the seed pitfall (padding with 0: wrong on normal rows only), and fx-kernel left blank."""
    T.ensure_bwrap()
    sys.path.insert(0, str(T.FIXTURES.parent))
    import judges as fixture_judges  # tests/fixtures/grading/judges.py

    from softmax_lab.grading import judge

    judge.REGISTRY.update(fixture_judges.JUDGES)
    tmp = tmp_path_factory.mktemp("parts")
    reg = _registry_with(tmp, PARTS_TOML)
    sols = tmp / "solutions"
    sols.mkdir()
    sol = with_explanation(T.solution())
    T.save(sol, sols / NB)
    shutil.copy(T.CH91, sols / T.CH91.name)
    from softmax_lab.course.build import learner_notebook

    def pasted():
        return T.paste_solutions(learner_notebook(T.solution(sols / NB)), T.solution(sols / NB))

    subs = tmp / "submissions"
    full = pasted()
    full.cells[T.index_of(full, "answer:", "explain:fx-kernel")].source = "Lanes loaded as -inf never win the max."
    T.save(full, subs / "sol" / NB)
    T.save(T.set_exercise(pasted(), "fx-kernel", ONLY_BOUNDARY_WRONG), subs / "edge" / NB)
    T.save(T.set_exercise(pasted(), "fx-kernel", T.PITFALL), subs / "pad0" / NB)
    blank = learner_notebook(T.solution(sols / NB))
    T.save(T.set_exercise(blank, "fx-double", T.DOUBLE_OK), subs / "blank" / NB)
    out = tmp / "grades" / "gradebook.csv"
    argv = [str(subs), "--out", str(out), "--jobs", "2", "--solutions", str(sols), "--registry", str(reg), *T.FAST]
    assert T.grade_main(argv) == 0
    return {"rows": T.by_key(T.read_rows(out)), "out": out, "argv": argv, "sols": sols, "reg": reg, "subs": subs}


def test_the_solution_earns_both_parts(split_class):
    r = split_class["rows"][("sol", "fx-kernel")]
    assert (r["status"], r["points"], r["max_points"]) == ("passed", "2", "2"), r
    assert "normal inputs 1/1; boundary inputs 1/1; the explanation (explain:fx-kernel) is graded by hand" in \
        r["message"]
    assert split_class["rows"][("sol", "fx-double")]["points"] == "2"  # an exercise without parts: as before


def test_a_kernel_failing_only_boundary_cases_gets_the_normal_part(split_class):
    r = split_class["rows"][("edge", "fx-kernel")]
    assert (r["status"], r["points"]) == ("failed", "1"), r
    assert "normal inputs 1/1; boundary inputs 0/1 (failed: all-negative row of 1)" in r["message"], r["message"]


def test_a_kernel_failing_normal_cases_keeps_only_the_boundary_part(split_class):
    r = split_class["rows"][("pad0", "fx-kernel")]
    assert (r["status"], r["points"]) == ("failed", "1"), r
    assert "normal inputs 0/1" in r["message"] and "boundary inputs 1/1" in r["message"], r["message"]
    assert "FAIL  all-negative row of 5" in r["message"]  # the check's own lines are still there


def test_blank_scores_zero(split_class):
    r = split_class["rows"][("blank", "fx-kernel")]
    assert (r["status"], r["points"]) == ("failed", "0") and "not implemented" in r["message"], r


def _manual(out: Path) -> list[dict]:
    with open(out.with_name("gradebook.manual.csv"), newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_the_explanation_is_in_the_manual_sheet_and_merges(split_class, tmp_path):
    out = split_class["out"]
    manual = _manual(out)
    mine = {(r["submission"].split("/")[0], r["question"]): r for r in manual}
    assert mine[("sol", "explain:fx-kernel")]["max_points"] == "1"
    assert mine[("sol", "explain:fx-kernel")]["answer"] == "Lanes loaded as -inf never win the max."
    assert mine[("blank", "explain:fx-kernel")]["answer"] == ""
    sheet = (out.with_name("gradebook.manual.md")).read_text(encoding="utf-8")
    assert "explain:fx-kernel" in sheet and "names why -inf lanes cannot win the max" in sheet  # rubric shown
    for r in manual:
        if r["submission"].startswith("sol/"):
            r["points"] = "1"
    filled = tmp_path / "filled.csv"
    with open(filled, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(manual[0]))
        w.writeheader()
        w.writerows(manual)
    assert T.grade_main(split_class["argv"] + ["--merge", str(filled)]) == 0
    with open(out.with_name("gradebook.learners.csv"), newline="", encoding="utf-8") as f:
        results = {r["learner"]: r for r in csv.DictReader(f)}
    assert (results["sol"]["points"], results["sol"]["max_points"], results["sol"]["result"]) == ("6", "6", "pass")
    assert results["edge"]["result"] == "fail" and "fx-kernel failed" in results["edge"]["reasons"]
    md = (default_feedback(out) / "sol.md").read_text(encoding="utf-8")
    assert "explain:fx-kernel" in md
    html = (default_feedback(out) / "sol.html").read_text(encoding="utf-8")
    assert "explain:fx-kernel" in html and "1 of 1" in html


def test_check_says_which_parts_passed(split_class, capsys):
    sub = split_class["subs"] / "edge" / NB
    rc = T.check_main([str(sub), "--solutions", str(split_class["sols"]), "--registry", str(split_class["reg"]),
                       *T.FAST])
    out = capsys.readouterr().out
    assert rc == 1 and "boundary inputs 0/1 (failed: all-negative row of 1)" in out, out
    assert "explain:fx-kernel" in out  # graded by the instructor
    rc = T.check_main([str(split_class["subs"] / "sol" / NB), "--solutions", str(split_class["sols"]),
                       "--registry", str(split_class["reg"]), *T.FAST])
    out = capsys.readouterr().out
    assert rc == 0 and re.search(r"fx-kernel\s+2/2\s+passed", out) and "normal inputs 1/1; boundary inputs 1/1" \
        in out, out


# ------------------------------------------------------------------------------------------------ the course


def test_every_declared_boundary_case_is_in_its_case_table():
    """Each boundary name of the course's registry is a case of the grader's judge (the same for any seed) or a
    case its notebook check passes in the stored solution (``PASS  <name>``; a Python exercise's check may word a
    case differently from its judge: both names are then declared), and both sides have boundary and normal cases:
    check, judge and registry agree."""
    import importlib

    import numpy as np

    from softmax_lab.course.registry import check_module

    declared = [ex for ex in registry.load().exercises() if ex.parts]
    assert declared, "no exercise declares seed 002's parts"
    for ex in declared:
        judge = importlib.import_module(check_module(ex.id)).JUDGES[ex.id]
        draw = judge.calls if judge.kind == "python" else judge.cases
        names = [{c.name for c in draw(np.random.default_rng(seed))} for seed in (1, 2)]
        nb = T.solution(next((ROOT / "solutions").glob(f"{ex.chapter}_*.ipynb")))
        check = nb.cells[T.index_of(nb, "check:", ex.id)]
        passed = {ln[len("PASS  "):].strip() for o in check.outputs for ln in o.get("text", "").splitlines()
                  if ln.startswith("PASS  ")}
        for name in ex.boundary:
            assert (name in names[0] and name in names[1]) or name in passed, \
                f"{ex.id}: boundary case {name!r} is neither a judge case nor in its notebook check's output"
        if ex.part("boundary"):
            assert set(ex.boundary) & names[0] and set(ex.boundary) & passed, \
                f"{ex.id}: its judge and its check each need a boundary case"
        assert names[0] - set(ex.boundary) and passed - set(ex.boundary), f"{ex.id}: no normal case left"
        assert ex.explain_id is None or any(tag_value(c, "explain:") == ex.id for c in nb.cells)
