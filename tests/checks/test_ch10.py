"""Chapter 10's case tables: the notebook checks and the grader's judges read the same named cases, and
ch10-cluster-size's recorded rows are the H200 sweep's numbers (benchmarks/records/h200-clustered-b.json)."""
import json

import numpy as np

from conftest import ROOT
from softmax_lab.checks import ch10


def _judge_names(ident, seed):
    from softmax_lab.grading import judge

    return [c.name for c in judge.judges()[ident].calls(np.random.default_rng(seed))]


def test_cluster_size_check_and_judge_read_one_case_table(capsys):
    def cluster_size(n_cols, element_size, per_sm, max_parts):
        return ch10.cluster_rule(n_cols, element_size, per_sm, max_parts)

    # The check unwrapped: the guard (on once any test reached it through softmax_lab.checks) refuses the
    # package's own rule, which is what a learner's cell gets; here the rule stands in for a correct answer.
    check = getattr(ch10.check_cluster_size, "__wrapped__", ch10.check_cluster_size)
    assert check(cluster_size, lambda n, size: cluster_size(n, size, 2, 16))
    printed = [ln[len("PASS  "):] for ln in capsys.readouterr().out.splitlines() if ln.startswith("PASS  ")]
    named = [c[0] for c in ch10.CLUSTER_CASES]
    runs = [f"recorded on the H200: {rows}x{n}x{dtype}".replace(f"x{dtype}", f" {dtype}")
            for rows, n, dtype, _, _ in ch10.CLUSTER_RUNS]
    assert printed == named + runs
    for seed in (0, 1):
        judged = _judge_names("ch10-cluster-size", seed)
        assert judged[:len(named)] == named
        fresh = ch10.JUDGE_FRESH_CLUSTERS
        assert judged[len(named) + fresh:len(named) + fresh + len(runs)] == runs
        assert len(judged) == len(named) + len(runs) + 2 * fresh


def test_schedule_check_and_judge_read_one_case_table():
    named = [c[0] for c in ch10.SCHEDULE_CASES]
    for seed in (0, 1):
        judged = _judge_names("ch10-schedule", seed)
        assert [n.split(": finishes(")[0] for n in judged[:len(named)]] == named


def test_the_recorded_rows_are_the_sweeps_numbers():
    record = json.loads((ROOT / "benchmarks" / "records" / "h200-clustered-b.json").read_text())
    runs: dict = {}
    for r in record["records"]:
        parts = {"resident": 1, "clustered": r.get("knobs", {}).get("parts")}.get(r["impl"])
        if parts and r.get("checked", "ok") == "ok":
            key = (r["rows"], r["cols"], r["dtype"])
            runs.setdefault(key, {})
            runs[key][parts] = max(runs[key].get(parts, 0), r["pct_copy"])
    sizes = {"float32": 4, "bfloat16": 2, "float16": 2}
    table = [(rows, n, dtype, sizes[dtype], {p: round(v, 1) for p, v in sorted(m.items())})
             for (rows, n, dtype), m in runs.items()]
    assert table == ch10.CLUSTER_RUNS
