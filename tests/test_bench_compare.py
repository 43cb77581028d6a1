"""``softmax_lab.bench``'s shared loop for the sweeps (``compare``: check, time, check again) and the record table
(``--record``: the newest run of each shape)."""
import json
import subprocess
import sys

import pytest
from conftest import ROOT


def _run(kind, rows, cols, dtype, impls, date):
    recs = []
    for impl, ms in impls.items():
        recs.append(dict(kind=kind, rows=rows, cols=cols, dtype=dtype, impl=impl, ms=ms, pct_copy=100 * 0.01 / ms,
                         vs_torch=0.02 / ms, checked="ok", **({"choice": "fused"} if impl != "copy" else {})))
    return dict(meta=dict(date=date, device="test"), records=recs)


def test_record_table_takes_each_shape_from_the_newest_run(tmp_path):
    old = tmp_path / "old.json"
    new = tmp_path / "new.json"
    old.write_text(json.dumps(dict(meta=dict(date="2026-01-01"), records=_run(
        "forward", 4096, 1024, "float32", {"copy": 0.01, "torch.softmax": 0.02, "softmax_lab.softmax": 0.0125},
        "")["records"] + _run("forward", 16, 1048576, "float32", {"softmax_lab.softmax": 0.02}, "")["records"])))
    new.write_text(json.dumps(_run("forward", 4096, 1024, "float32",
                                   {"copy": 0.01, "torch.softmax": 0.02, "softmax_lab.softmax": 0.01}, "2026-02-01")))
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.bench", "--record", str(old), str(new)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| forward")]
    assert len(rows) == 2
    assert "| forward | 4096×1024 | fp32 | fused | 100.0 | 50.0 | 2.00× | – | `new.json` |" in rows
    assert any("16×1048576" in r and "`old.json`" in r and "| 50.0 |" in r for r in rows)


@pytest.mark.gpu
def test_compare_checks_times_and_records_what_fails():
    import torch

    from softmax_lab import bench
    from softmax_lab.kernels import fused_softmax

    def refuses(x, out):
        raise ValueError("this setting does not fit")

    candidates = [("fused", lambda x, out: fused_softmax(x, out=out, num_warps=4), dict(num_warps=4)),
                  ("wrong", lambda x, out: x, None), ("refuses", refuses, None)]
    recs = {r["impl"]: r for r in bench.compare(256, 1000, torch.float32, candidates, rep_ms=5)}
    assert list(recs) == ["copy", "torch.softmax", "softmax_lab.softmax", "fused", "wrong", "refuses"]
    assert recs["copy"]["checked"] == "not checked" and recs["copy"]["pct_copy"] == pytest.approx(100)
    assert recs["fused"]["checked"] == "ok" and recs["fused"]["pct_copy"] > 0 and "vs_torch" in recs["fused"]
    assert recs["softmax_lab.softmax"]["choice"]
    assert recs["wrong"]["checked"].startswith("wrong result")
    assert recs["refuses"]["error"] == "ValueError: this setting does not fit" and "ms" not in recs["refuses"]
    back = bench.compare(64, 4096, torch.bfloat16, [], kind="backward", rep_ms=5)
    assert [r["impl"] for r in back] == ["copy", "torch.softmax", "softmax_lab.softmax"]
    assert back[2]["checked"] == "ok"


def test_the_sweeps_time_a_peer_that_imports_and_say_why_one_does_not(monkeypatch, capsys):
    from softmax_lab import bench

    monkeypatch.setattr(bench, "peers", lambda: ({"quack": (lambda x: x * 2, None)}, {"liger": "ImportError: no"}))
    (name, fn, knobs), = bench.peer_candidates(("quack", "liger"))
    assert (name, fn(3, None), knobs) == ("quack", 6, None)
    assert capsys.readouterr().out == "liger not importable: ImportError: no\n"


@pytest.mark.gpu
def test_bench_rounds_keep_every_rounds_times_and_the_scorecard_reads_the_run(tmp_path, capsys):
    from softmax_lab import bench

    assert bench.main(["--quick", "--no-kernels", "--no-backward", "--no-eager", "--rep", "5", "--rounds", "2",
                       "--out", str(tmp_path), "--name", "t"]) == 0
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["meta"]["rounds"] == 2 and "partial" not in data["meta"]
    ours = [r for r in data["records"] if r["impl"] == "softmax_lab.softmax"]
    assert len(ours) == len(bench.QUICK_SHAPES)
    for r in ours:
        copy = next(c for c in data["records"] if c["impl"] == "copy" and c["cols"] == r["cols"])
        assert len(r["ms_rounds"]) == 2 and r["checked"] == "ok"
        per_round = [100 * c / o for c, o in zip(copy["ms_rounds"], r["ms_rounds"])]
        assert r["pct_copy"] == pytest.approx(sum(per_round) / 2)  # (the median of two)
    capsys.readouterr()
    assert bench.main(["--scorecard", str(tmp_path / "t.json")]) == 0
    assert "(2 rounds; each ratio the median of the rounds' ratios" in capsys.readouterr().out
