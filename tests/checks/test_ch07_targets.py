"""ch07-targets: knob sets judged on the H200's recorded runs, and a proxy whose rules agree with every record.

The proxy decides the knob sets no H200 run recorded, so its rules must be right where the record can say: every
recorded run of these shapes below its target breaks a rule, every one at or above it keeps them all. The notebook
check and the grader's judge read one decision (``targets.decide``); the grader fails ``ROWS = 1``.
"""
import json
import shutil

import pytest

from conftest import ROOT
from check_helpers import notebook_cell
from softmax_lab.checks.ch07 import targets

SWEEP = ROOT / "benchmarks" / "records" / "h200-sweep.json"
GOOD = {"multirow": {"ROWS": 8, "num_warps": 4},
        "persistent": {"programs_per_sm": 8, "num_warps": 4, "num_stages": 2}}


def recorded_points():
    """(target, knobs, % of copy) of every H200 run of the two targets' shapes: the package's record of this
    exercise, and chapter 7's sweep (its multirow settings at 65536x128 fp32, and the fused kernel there: one
    program per row with its default 4 warps, the same launch as ROWS = 1)."""
    points = [(r["kernel"], {k: v for k, v in r.items() if k not in ("kernel", "shape", "pct_copy", "median_us")},
               r["pct_copy"]) for r in targets.recorded_runs()]
    for r in json.loads(SWEEP.read_text())["records"]:
        if (r.get("kind"), r.get("rows"), r.get("cols"), r.get("dtype")) != ("forward", 65536, 128, "float32"):
            continue
        if r.get("impl") == "sweep:multirow":
            points.append(("multirow", {"ROWS": r["knobs"]["ROWS"], "num_warps": r["knobs"]["num_warps"]},
                           r["pct_copy"]))
        elif r.get("impl") == "fused":
            points.append(("multirow", {"ROWS": 1, "num_warps": 4}, r["pct_copy"]))
    return points


def test_the_package_ships_the_record():
    runs = targets.recorded_runs()
    assert targets.RECORD.is_file() and len(runs) >= 6
    assert {r["kernel"] for r in runs} == {"multirow", "persistent"}
    meta = json.loads(targets.RECORD.read_text())["meta"]
    assert meta["device"] == "NVIDIA H200" and meta["sms"] == targets.H200_SMS


def test_the_rules_agree_with_every_recorded_run():
    points = recorded_points()
    assert len(points) >= 25 and any(k == {"ROWS": 1, "num_warps": 4} and pct < 50 for _, k, pct in points)
    goal = {key: t for key, _, _, _, t, _ in targets.TARGETS}
    wrong = [(key, knobs, round(pct, 1), targets.rules_problem(key, knobs)) for key, knobs, pct in points
             if (not targets.rules_problem(key, knobs)) != (pct >= goal[key])]
    assert not wrong, wrong
    # both sides are represented: the rules are tested on misses and on hits of each target
    for key in goal:
        assert {pct >= goal[key] for k, _, pct in points if k == key} == {True, False}


@pytest.mark.parametrize("warps", [1, 2, 4, 8, 16])
def test_rows_one_fails_whatever_the_warps(warps):
    how, problem = targets.decide("multirow", {"ROWS": 1, "num_warps": warps})
    assert problem and "in flight" in problem, (how, problem)


def test_decide_reads_the_record_first_and_marks_the_rest():
    assert targets.decide("multirow", {"ROWS": 8, "num_warps": 4}) == ("recorded on the H200 at 98% of copy", "")
    how, problem = targets.decide("persistent", {"programs_per_sm": 4, "num_warps": 8, "num_stages": 2})
    assert how.startswith("recorded on the H200 at 66%") and "below the target of 80%" in problem
    how, problem = targets.decide("multirow", {"ROWS": 2, "num_warps": 2})  # never ran; the rules pass it
    assert problem == "" and "graded on a GPU" in how
    assert "spills" in targets.decide("multirow", {"ROWS": 256, "num_warps": 4})[1]
    assert "fit one SM" in targets.decide("persistent", {"programs_per_sm": 64, "num_warps": 4, "num_stages": 2})[1]
    assert "power of two" in targets.decide("multirow", {"ROWS": 3, "num_warps": 4})[1]


def test_check_and_judge_read_one_decision(capsys):
    """Every knob set the exercise allows, judged by the grader's expectation and by the notebook check's first
    line of each target: the same verdict (the check's kernels are left out: they are checked elsewhere)."""
    calls = targets.JUDGES["ch07-targets"].calls(None)
    assert [c.fn for c in calls] == ["target_knobs", "target_knobs"]
    for rows in (1, 2, 4, 8, 16, 32, 64, 128, 3):
        for warps in (1, 2, 4, 8, 16, 3):
            for per_sm, stages in ((2, 2), (4, 3), (8, 2), (8, 1), (16, 4)):
                knobs = {"multirow": {"ROWS": rows, "num_warps": warps},
                         "persistent": {"programs_per_sm": per_sm, "num_warps": warps, "num_stages": stages}}
                for i, (key, *_rest) in enumerate(targets.TARGETS):
                    assert calls[i].expect(knobs) == targets.decide(key, knobs[key])[1]
    assert all("must be a dict" in c.expect("<dict>") for c in calls)
    assert "must be an int" in calls[0].expect({"multirow": {"ROWS": 8.0, "num_warps": 4}})


def test_check_fails_rows_one_and_a_recorded_miss(capsys):
    from softmax_lab.checks.ch07 import check_targets
    from softmax_lab.checks.ch07.multirow import NOT_IMPLEMENTED

    def never(*a, **k):
        raise NotImplementedError

    ok = check_targets({**GOOD, "multirow": {"ROWS": 1, "num_warps": 4}}, never, never)
    out = capsys.readouterr().out
    assert not ok and "FAIL  target 1: multi-row kernel at 65536x128 fp32" in out and "8 KiB" in out, out
    assert NOT_IMPLEMENTED in out
    ok = check_targets({**GOOD, "persistent": {"programs_per_sm": 4, "num_warps": 4, "num_stages": 2}}, never, never)
    out = capsys.readouterr().out
    assert not ok and "(recorded on the H200 at 68% of copy): 68% is below the target of 80%" in out, out


@pytest.mark.skipif(not shutil.which("bwrap"), reason="needs bubblewrap")
def test_grader_judges_target_knobs():
    """The grader calls the learner's target_knobs() in its sandbox: the solution passes, the blank cell and
    ROWS = 1 (42% of copy on the H200) fail, and so does a persistent grid the H200 ran below its target."""
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    ex = "ch07-targets"
    solution = notebook_cell("solutions", "07_performance.ipynb", ex)
    assert '"ROWS": 8' in solution and '"programs_per_sm": 8' in solution
    rows_one = solution.replace('"ROWS": 8', '"ROWS": 1')
    quarter = solution.replace('"programs_per_sm": 8', '"programs_per_sm": 4')
    got = {name: judge.run("", {ex: src}, Limits(cell_timeout=60), seed=5)[ex]
           for name, src in [("solution", solution), ("blank", notebook_cell("notebooks", "07_performance.ipynb", ex)),
                             ("rows one", rows_one), ("quarter", quarter)]}
    assert got["solution"].ok and got["solution"].passed == 2, got["solution"].text(ex)
    assert got["blank"].passed == 0, got["blank"].text(ex)
    assert got["rows one"].passed == 1 and "in flight" in got["rows one"].lines[0], got["rows one"].text(ex)
    assert got["quarter"].passed == 1 and "below the target of 80%" in got["quarter"].lines[0], got["quarter"].text(ex)
