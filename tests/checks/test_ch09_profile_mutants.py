"""Exercise ch09-profile (reading Nsight Compute reports): the solution passes in the notebook and in the grader's
judge; answers that read the wrong column, count kernels instead of bytes, take the complement or repeat the H200's
answers fail, naming what they read."""
from __future__ import annotations

import shutil

import pytest

from softmax_lab import profiles
from softmax_lab.checks.ch09 import profile

from conftest import exercise_source, load_exercise

EX = "ch09-profile"
NAMES = ["dram_bound", "traffic_ratio", "reread_from_l2", "waits_on_memory"]


def functions(tmp_path, *edits):
    source = exercise_source(EX)
    for old, new in edits:
        assert old in source, f"the solution of {EX} no longer holds {old!r}: update this test"
        source = source.replace(old, new)
    module = load_exercise(EX, source, tmp_path)
    return [getattr(module, n) for n in NAMES], source


def run(fns, capsys):
    ok = profile.check_profile(*fns)
    out = capsys.readouterr().out
    return bool(ok), out, [ln for ln in out.splitlines() if ln.startswith("FAIL")]


def test_the_recorded_report_is_there_and_complete():
    report = profiles.report()
    assert set(report) == {"row_max", "exp_sum", "normalize", "fused", "online", "naive"}
    for k in report.values():
        assert {"dram_pct", "dram_read_bytes", "dram_write_bytes", "l2_hit_pct", "stalls", "input_bytes"} <= set(k)
    assert "H200" in profiles.label()


def test_the_solution_passes(tmp_path, capsys):
    ok, out, _ = run(functions(tmp_path)[0], capsys)
    assert ok, out
    assert out.strip().splitlines()[-1].startswith(f"{EX}: PASSED")


def test_a_blank_cell_scores_nothing(tmp_path, capsys):
    module = load_exercise(EX, exercise_source(EX, learner=True), tmp_path)
    ok, out, _ = run([getattr(module, n) for n in NAMES], capsys)
    assert not ok and f"{EX}: FAILED (0/" in out, out


@pytest.mark.parametrize("edits, words", [
    ([('return k["dram_pct"] >= 60', 'return k["l2_hit_pct"] >= 60')], "does not measure how busy the memory was"),
    ([('return k["dram_pct"] >= 60', 'return k["occupancy_pct"] >= 60')], "does not measure how busy the memory was"),
    ([('return three_kernels / dram_bytes("fused")', "return 3.0")], "leaves out what the kernels wrote to DRAM"),
    ([('return report[name]["dram_read_bytes"] + report[name]["dram_write_bytes"]',
       'return report[name]["dram_read_bytes"]')], "leaves out what the kernels wrote to DRAM"),
    ([('return report[name]["dram_read_bytes"] + report[name]["dram_write_bytes"]',
       'return report[name]["input_bytes"]')], "what the input's bytes alone give"),
    ([('return report[name]["dram_read_bytes"] + report[name]["dram_write_bytes"]',
       'return report[name]["dram_write_bytes"]')], "leaves out what the kernels read from DRAM"),
    ([('return (k["input_bytes"] - second_read_from_dram) / k["input_bytes"]',
       'return second_read_from_dram / k["input_bytes"]')], "came from DRAM, not from L2"),
    ([('return largest == "long_scoreboard"', 'return largest == "barrier"')], "waiting for a global load"),
    ([('return (k["input_bytes"] - second_read_from_dram) / k["input_bytes"]', 'return k["l2_hit_pct"] / 100')],
     "not the second read alone"),
    ([('return (k["input_bytes"] - second_read_from_dram) / k["input_bytes"]',
       'return 100 * (k["input_bytes"] - second_read_from_dram) / k["input_bytes"]')], "fraction between 0 and 1"),
], ids=["L2 hits", "occupancy", "counts kernels", "reads only", "input bytes", "writes only", "the complement",
        "barrier", "the L2 hit rate", "a percentage"])
def test_a_wrong_reading_is_named(edits, words, tmp_path, capsys):
    ok, out, fails = run(functions(tmp_path, *edits)[0], capsys)
    assert not ok, out
    assert any(words in ln for ln in fails), out


@pytest.mark.parametrize("column", ["dram_read_bytes", "input_bytes"])
def test_a_ratio_of_3_is_worded_for_every_way_to_get_it(column, tmp_path, capsys):
    """The review (issue 26): a ratio of the input's bytes (requested, not DRAM's) was told it 'compares the bytes
    read from DRAM alone'; the words now hold for both columns, and name the bytes written that it leaves out."""
    edit = ('return report[name]["dram_read_bytes"] + report[name]["dram_write_bytes"]',
            f'return report[name]["{column}"]')
    ok, out, fails = run(functions(tmp_path, edit)[0], capsys)
    ratio = [ln for ln in fails if "DRAM bytes / fused's" in ln]
    assert not ok and len(ratio) == 2, out  # the H200's report and the made-up one
    for ln in ratio:
        assert "what the input's bytes alone give" in ln and "leaves out what the kernels wrote to DRAM" in ln, ln
        assert "bytes read from DRAM alone" not in ln, ln


def test_a_writes_only_ratio_is_explained(tmp_path, capsys):
    """The review (issue 26): the writes-only ratio (2.02 on the H200) got no explanation."""
    edit = ('return report[name]["dram_read_bytes"] + report[name]["dram_write_bytes"]',
            'return report[name]["dram_write_bytes"]')
    ok, out, fails = run(functions(tmp_path, edit)[0], capsys)
    ratio = [ln for ln in fails if "DRAM bytes / fused's" in ln]
    assert not ok and len(ratio) == 2, out
    assert any("got 2.02" in ln for ln in ratio), out
    for ln in ratio:
        assert "bytes written to DRAM alone" in ln and "leaves out what the kernels read from DRAM" in ln, ln


def test_the_h200_answers_repeated_fail_on_a_made_up_report(tmp_path, capsys):
    """Answers that only know the recorded table (a lookup by kernel) pass the H200's cases and fail the rest."""
    report = profiles.report()
    known = {round(k["dram_pct"], 2): name for name, k in report.items()}
    table = {name: (profile._dram_bound(k), profile._waits_on_memory(k)) for name, k in report.items()}
    ratio, share = profile._traffic_ratio(report), profile._reread_from_l2(report["online"])

    def name_of(k):
        return known.get(round(k["dram_pct"], 2), "row_max")

    fns = [lambda k: table[name_of(k)][0], lambda r: ratio, lambda k: share, lambda k: table[name_of(k)][1]]
    ok, out, fails = run(fns, capsys)
    assert not ok, out
    assert all(ln.startswith("FAIL") and "made-up" in ln for ln in fails), out
    assert not any("H200" in ln for ln in fails), out


def test_the_judge_runs_the_learner_functions_on_fresh_reports(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("needs bubblewrap")
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    good = judge.run("", {EX: exercise_source(EX)}, Limits(cell_timeout=60), seed=5)[EX]
    assert good.ok, good.text(EX)
    _, wrong = functions(tmp_path, ('return k["dram_pct"] >= 60', 'return k["sm_pct"] >= 60'))
    bad = judge.run("", {EX: wrong}, Limits(cell_timeout=60), seed=5)[EX]
    assert not bad.ok, bad.text(EX)
