"""``softmax-lab bench --scorecard``: the performance goal, line by line, from a saved run (no GPU); and
``--rounds``: every implementation of a shape timed in turn, several times (``bench._measure_all``)."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT

from softmax_lab import bench, scorecard

US = 1e-3  # ms


def rec(kind, rows, cols, dtype, impl, ms=None, eager=None, error=None, rounds=None):
    r = dict(kind=kind, rows=rows, cols=cols, dtype=dtype, impl=impl)
    if error:
        r["error"] = error
        return r
    r["ms"] = ms
    if eager is not None:
        r["eager_ms"] = eager
    if rounds:
        r["ms_rounds"] = rounds
    return r


def shape(kind, rows, cols, dtype, copy, ours, torch_, quack=None, eager=None, quack_rounds=None,
          ours_rounds=None):
    """Records of one shape; times in ms; eager: (ours, torch's) per call."""
    recs = [rec(kind, rows, cols, dtype, "copy", copy),
            rec(kind, rows, cols, dtype, "torch.softmax", torch_, eager and eager[1]),
            rec(kind, rows, cols, dtype, "softmax_lab.softmax", ours, eager and eager[0], rounds=ours_rounds)]
    if isinstance(quack, str):
        recs.append(rec(kind, rows, cols, dtype, "quack", error=quack))
    elif quack is not None:
        recs.append(rec(kind, rows, cols, dtype, "quack", quack, rounds=quack_rounds))
    for r in recs:
        if r.get("ms"):
            r["pct_copy"] = 100 * copy / r["ms"]
    return recs


def run(*shapes, **meta):
    return dict(meta=dict(device="test GPU", torch="t", triton="x", date="2026-12-04", command="bench", **meta),
                records=[r for s in shapes for r in s])


def lines(goal_lines):
    """{the line's name: (met, misses)}; met is None where the line had nothing to judge."""
    return {what.split(":")[0].split(" (")[0]: (met, misses) for what, met, misses in goal_lines}


def test_each_goal_line_names_the_shapes_that_miss_it_with_their_numbers():
    now = run(
        # 64 MB of fp32: 50% of copy (a miss of the 90% line), faster than torch, QuACK refuses
        shape("forward", 16, 1048576, "float32", copy=0.030, ours=0.060, torch_=0.400,
              quack="AssertionError: Input N 1048577 is not divisible by vector size 4"),
        # 16 MB, 95% of copy but 0.95x QuACK
        shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.010, torch_=0.012, quack=0.0095,
              eager=(0.0101, 0.0120)),
        # tiny: faster than QuACK, but its eager call costs more than torch's (the GPU + 3 µs bound does not count)
        shape("forward", 1, 128, "float32", copy=0.0012, ours=0.0012, torch_=0.0015, quack=0.0013,
              eager=(9.3 * US, 6.8 * US)),
        # a long backward row: slower than torch (a miss), eager within GPU time + 3 µs though above torch's
        shape("backward", 512, 151936, "float32", copy=0.200, ours=0.250, torch_=0.245, eager=(0.252, 0.248)),
    )
    earlier = run(shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.0096, torch_=0.012),
                  shape("backward", 512, 151936, "float32", copy=0.2, ours=0.2, torch_=0.5))
    got = lines(scorecard.goal(now, earlier))
    big = got["≥ 90% of copy on every shape of ≥ 16 MB"]
    assert big == (False, ["16×1048576 fp32 50.0%", "backward 512×151936 fp32 80.0%"])  # (1×128: too small)
    assert got["≥ 1.0× QuACK where it runs"] == (False, ["4096×1024 fp32 0.950×"])
    assert got["≥ 1.0× torch on every shape"] == (False, ["backward 512×151936 fp32 0.980×"])
    eager = got["eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's"]
    assert eager == (False, ["1×128 fp32 9.3 µs against 6.8 (torch's)"])
    keep = got["≥ 95% kept where the earlier run had it"]
    assert keep == (False, ["backward 512×151936 fp32 80.0% (was 100.0)"])  # (4096×1024: 99.0, now 95.0)
    assert len(scorecard.goal(now)) == 4  # no earlier run: no line for what was kept


def test_a_shape_that_meets_every_line_is_counted_as_met():
    now = run(shape("forward", 1024, 65536, "bfloat16", copy=0.060, ours=0.062, torch_=0.12, quack=0.063,
                    eager=(0.064, 0.13)))
    for what, met, misses in scorecard.goal(now, now):
        assert met and not misses, what
    text = scorecard.report(now, now)
    row = "| forward | 1024×65536 | bf16 | 50.0 | – | 95.2 | **96.8** | 96.8 | 1.94× | 1.02× | 64.0 (130.0, –; 62.0) |"
    assert row in text
    assert "- met: ≥ 90% of copy on every shape of ≥ 16 MB: 1 of 1" in text


def test_rounds_give_a_ratio_round_by_round_and_its_range():
    # QuACK's clock moved between rounds: the median of the rounds' ratios, with their range
    now = run(shape("forward", 2048, 32768, "bfloat16", copy=0.060, ours=0.062, torch_=0.12, quack=0.061,
                    ours_rounds=[0.062, 0.062, 0.062], quack_rounds=[0.060, 0.0635, 0.061]), rounds=3)
    ratio, spread = scorecard.speedup(*[next(r for r in now["records"] if r["impl"] == i)
                                        for i in ("quack", "softmax_lab.softmax")])
    assert ratio == pytest.approx(0.061 / 0.062) and spread == pytest.approx((0.060 / 0.062, 0.0635 / 0.062))
    text = scorecard.report(now)
    assert "0.98× (0.97-1.02)" in text and "3 rounds" in text
    assert "2048×32768 bf16 0.984× (0.968-1.024)" in text


def test_the_saved_round_17_run_reads_as_its_note_says():
    got = lines(scorecard.goal(scorecard.load(str(ROOT / "benchmarks/records/h200-bench-round17.json"))))
    assert got["≥ 90% of copy on every shape of ≥ 16 MB"] == (False, ["16×1048576 fp32 66.7%"])
    assert got["eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's"][1] == [
        "1×128 fp32 9.3 µs against 6.8 (torch's)", "32×1024 fp32 9.2 µs against 6.2 (torch's)"]


def _bench(*args):
    return subprocess.run([sys.executable, "-m", "softmax_lab.bench", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_command_prints_the_scorecard_and_refuses_what_it_cannot_read(tmp_path):
    now, old = tmp_path / "now.json", tmp_path / "old.json"
    now.write_text(json.dumps(run(shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.010, torch_=0.012))))
    old.write_text(json.dumps(run(shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.0095, torch_=0.012))))
    proc = _bench("--scorecard", str(now), "--since", str(old))
    assert proc.returncode == 0, proc.stderr
    assert "| pass | shape | dtype | torch | Liger | QuACK | softmax_lab | old | vs torch |" in proc.stdout
    assert "| forward | 4096×1024 | fp32 | 79.2 | – | – | **95.0** | 100.0 | 1.20× | – | – |" in proc.stdout
    assert "- met: ≥ 95% kept where the earlier run had it: 1 of 1" in proc.stdout
    assert "- NOT JUDGED: ≥ 1.0× QuACK where it runs (QuACK ran no shape of this run)" in proc.stdout
    assert "- NOT JUDGED: eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's (no eager times" in proc.stdout
    bad = {"bad.json": '{"meta": {}}', "list.json": "[1, 2]", "meta.json": '{"meta": [], "records": []}',
           "text.json": "not json", "fields.json": '{"records": [{"impl": "copy"}]}'}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
    for name, why in [("bad.json", "holds no 'records' list"), ("list.json", "holds no 'records' list"),
                      ("meta.json", "its 'meta' is not an object"), ("text.json", "JSONDecodeError"),
                      ("fields.json", "record 0 lacks kind, rows, cols, dtype"), ("missing.json", "FileNotFoundError")]:
        proc = _bench("--scorecard", str(now), "--since", str(tmp_path / name))
        assert proc.returncode == 2 and why in proc.stderr and name in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr and "cannot read" in proc.stderr
    proc = _bench("--scorecard", str(tmp_path))
    assert proc.returncode == 2 and "IsADirectoryError" in proc.stderr
    proc = _bench("--since", str(old))
    assert proc.returncode == 2 and "--since goes with --scorecard" in proc.stderr
    proc = _bench("--scorecard", str(now), "--history", str(old))
    assert proc.returncode == 2 and "ask for one at a time" in proc.stderr


def test_a_shape_our_kernel_fails_or_gets_wrong_misses_every_line_it_belongs_to():
    failed = shape("forward", 1024, 65536, "bfloat16", copy=0.060, ours=0.062, torch_=0.12, quack=0.063,
                   eager=(0.064, 0.13))
    wrong = shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.009, torch_=0.012, quack=0.0095,
                  eager=(0.0101, 0.0120))
    ours = failed[2]
    for key in ("ms", "eager_ms", "pct_copy"):
        del ours[key]
    ours["error"] = "RuntimeError: an illegal memory access"
    wrong[2]["checked"] = "wrong result: 3 rows differ"
    earlier = run(shape("forward", 1024, 65536, "bfloat16", copy=0.06, ours=0.06, torch_=0.12),
                  shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.0095, torch_=0.012),
                  shape("forward", 2048, 32768, "bfloat16", copy=0.06, ours=0.06, torch_=0.12))
    got = lines(scorecard.goal(run(failed, wrong), earlier))
    fails = "1024×65536 bf16 fails (RuntimeError: an illegal memory access)"
    is_wrong = "4096×1024 fp32 wrong result: 3 rows differ"
    for line in ("≥ 90% of copy on every shape of ≥ 16 MB", "≥ 1.0× QuACK where it runs", "≥ 1.0× torch on every shape",
                 "eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's"):
        assert got[line] == (False, [fails, is_wrong]), line
    assert got["≥ 95% kept where the earlier run had it"] == (False, [fails, is_wrong,
                                                                     "2048×32768 bf16 not in this run"])
    text = scorecard.report(run(failed, wrong))
    assert "**fails**" in text and "**105.6 (wrong result)**" in text


def test_a_number_that_misses_is_never_printed_as_its_bound():
    now = run(shape("forward", 1024, 65536, "bfloat16", copy=0.059976, ours=0.06667, torch_=0.12, quack=0.0666699),
              shape("forward", 8192, 8200, "bfloat16", copy=0.06, ours=0.062, torch_=0.12, eager=(0.065002, 0.064)))
    got = lines(scorecard.goal(now))
    assert got["≥ 90% of copy on every shape of ≥ 16 MB"] == (False, ["1024×65536 bf16 89.96%"])
    assert got["≥ 1.0× QuACK where it runs"] == (False, ["1024×65536 bf16 0.999999×"])
    assert got["eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's"] == (
        False, ["8192×8200 bf16 65.002 µs against 65.0 (GPU time + 3)"])  # (not "65.0 against 65.0")
    assert "| **89.96** |" in scorecard.table(now) and "| 0.999999× |" in scorecard.table(now)
    zero = run(shape("forward", 1, 128, "float32", copy=0.001, ours=0.0, torch_=0.002))
    assert lines(scorecard.goal(zero))["≥ 1.0× torch on every shape"] == (False, ["1×128 fp32 not timed"])


def test_rounds_time_every_implementation_in_turn_and_keep_each_rounds_time(monkeypatch):
    order = []
    clock = {"a": iter([1.0, 3.0, 2.0, 2.5]), "b": iter([5.0, 4.0, 6.0, 5.5]), "c": iter([7.0, 7.0, 7.0, 7.0]),
             "refuses later": iter([1.0])}

    def fake_time(fn, n_buffers, rep_ms, timer="graph"):
        name = fn()
        order.append(name)
        return next(clock[name])

    monkeypatch.setattr(bench, "_time", fake_time)
    monkeypatch.setattr(bench, "_time_eager", lambda fn, n, gpu_ms: gpu_ms + 0.01)
    checks = []

    def verdict(name, wrong=False):
        return lambda i: checks.append((name, i)) or ("wrong result" if wrong and i else "")

    entries = [(dict(impl="a", bytes=2e6), lambda: "a", verdict("a")),
               (dict(impl="b", bytes=2e6), lambda: "b", verdict("b", wrong=True)),
               (dict(impl="c", bytes=2e6), lambda: "c", None),
               (dict(impl="refuses later", bytes=2e6), lambda: "refuses later", None),
               (dict(impl="does not compile", bytes=2e6), None, lambda i: 1 / 0)]
    a, b, c, late, broken = bench._measure_all(entries, 4, 10, eager=True, rounds=4)
    assert order[:4] == ["a", "b", "c", "refuses later"]  # the first round in the list's order
    # "refuses later" fails in round 2 and is not timed again: 4 + 1 + 3 x 3 timings
    assert order.count("refuses later") == 2 and len(order) == 14
    later = [o for o in order[4:] if o != "refuses later"]
    assert sorted(later) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3
    assert len({tuple(later[i:i + 3]) for i in (0, 3, 6)}) > 1  # the later rounds are not all in one order
    assert a["ms_rounds"] == [1.0, 3.0, 2.0, 2.5] and a["ms"] == 2.25 and a["gbps"] == pytest.approx(2e6 / 2.25e6)
    assert a["eager_ms_rounds"] == [1.01, 3.01, 2.01, 2.51] and a["eager_ms"] == pytest.approx(2.26)
    assert a["checked"] == "ok" and b["checked"] == "wrong result" and b["ms"] == 5.25
    assert c["checked"] == "not checked"
    assert ("a", 0) in checks and ("a", 3) in checks  # the first buffer before, the last after
    assert late["error"].startswith("StopIteration") and "ms" not in late and "checked" not in late
    assert late["ms_rounds"] == [1.0]  # the round it was timed in before it failed
    assert broken["error"] == "ZeroDivisionError: division by zero" and "ms" not in broken
    clock["a"] = iter([7.0])
    one, = bench._measure_all([(dict(impl="a", bytes=7e6), lambda: "a", None)], 2, 10)
    assert one == dict(impl="a", bytes=7e6, ms=7.0, gbps=pytest.approx(1.0), checked="not checked")


def test_the_copy_and_torch_ratios_are_taken_round_by_round():
    # copy 1, 2, 3 and ours 1, 4, 3: 100, 50 and 100% round by round (median 100), where the medians give 66.7
    recs = [dict(kind="forward", rows=1, cols=8, dtype="float32", impl="copy", ms=2.0, ms_rounds=[1.0, 2.0, 3.0]),
            dict(kind="forward", rows=1, cols=8, dtype="float32", impl="torch.softmax", ms=4.0,
                 ms_rounds=[2.0, 4.0, 6.0]),
            dict(kind="forward", rows=1, cols=8, dtype="float32", impl="softmax_lab.softmax", ms=3.0,
                 ms_rounds=[1.0, 4.0, 3.0])]
    bench._relative(recs)
    assert recs[2]["pct_copy"] == pytest.approx(100.0) and recs[2]["vs_torch"] == pytest.approx(2.0)
    assert recs[1]["pct_copy"] == pytest.approx(50.0)
    del recs[2]["ms_rounds"]  # timed once: the ratio of the times
    bench._relative(recs)
    assert recs[2]["pct_copy"] == pytest.approx(100 * 2 / 3)


def test_history_gives_each_lines_ratio_to_quack_in_each_run(tmp_path):
    paths = []
    for i, quack in enumerate([0.0610, 0.0625, 0.06249]):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(run(
            shape("forward", 2048, 32768, "bfloat16", copy=0.060, ours=0.0625, torch_=0.12, quack=quack),
            shape("forward", 100000, 77, "float32", copy=0.024, ours=0.017, torch_=0.021, quack="refuses"))))
        paths.append(str(path))
    proc = _bench("--history", *paths)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "| shape | run0 | run1 | run2 | lowest-highest |"
    assert "| 2048×32768 bf16 | 0.976× | 1.000× | 0.9998× | 0.976-1.000 |" in proc.stdout  # (not "1.000")
    assert "100000×77" not in proc.stdout  # QuACK ran it in none of the runs
    proc = _bench("--history", paths[0], str(tmp_path / "gone.json"))
    assert proc.returncode == 2 and "gone.json" in proc.stderr
    assert "softmax-lab bench --history: cannot read" in proc.stderr


def test_chapter_7s_question_quotes_the_table_its_cell_prints():
    """ch07-q-drift quotes four rows of the runs' table, so that it can be answered where the records are not (a
    hosted notebook); the rows must be what the cell before it prints (nbval checks that output against a run)."""
    nb = json.loads((ROOT / "solutions" / "07_performance.ipynb").read_text())
    cells = {c.get("id"): c for c in nb["cells"]}
    printed = "".join(cells["ch07-q3-runs"]["outputs"][0]["text"])
    assert "nbval-check-output" in cells["ch07-q3-runs"]["metadata"]["tags"]
    quoted = [line for line in "".join(cells["ch07-q3"]["source"]).splitlines() if line.startswith("|")]
    assert len(quoted) == 6 and all(line in printed.splitlines() for line in quoted), quoted
    files = ["h200-bench-round13.json", "h200-bench-round14.json", "h200-bench-round15.json",
             "h200-bench-round16.json", "h200-bench-round16-direct.json", "h200-bench-round17.json"]
    runs = [(f[len("h200-bench-"):-len(".json")], scorecard.load(str(ROOT / "benchmarks" / "records" / f)))
            for f in files]
    assert printed.strip() == scorecard.history(runs)


def test_a_run_cut_short_says_so_and_its_file_is_whole(tmp_path):
    path = str(tmp_path / "cut.json")
    records = shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.010, torch_=0.012)
    why = "cut short: the shapes measured so far (3 records)"
    bench.save_run(path, {"device": "test GPU", "rounds": 1}, records, why)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.json"]  # (written beside, then renamed over)
    saved = scorecard.load(path)
    assert saved["meta"]["partial"].startswith("cut short") and saved["records"] == records
    assert "PARTIAL RUN (cut short: the shapes measured so far (3 records))" in scorecard.report(saved)
    assert "| shape | cut (partial) | lowest-highest |" in scorecard.history([("cut", saved)])
    bench.save_run(path, {"device": "test GPU"}, records)  # the last save: whole
    assert "partial" not in scorecard.load(path)["meta"] and "PARTIAL" not in scorecard.report(scorecard.load(path))


def test_a_shape_with_no_copy_beside_it_is_not_judged_on_the_copy_line():
    recs = shape("forward", 4096, 1024, "float32", copy=0.0095, ours=0.010, torch_=0.012)
    for r in recs:
        r.pop("pct_copy", None)
    got = lines(scorecard.goal(run(recs[1:])))  # (no copy record at all)
    assert got["≥ 90% of copy on every shape of ≥ 16 MB"] == (None, [])
