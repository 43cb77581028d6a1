"""One case table per exercise: the notebook check and the grader's judge of chapters 5 and 8 run the same cases.

Each exercise's module holds one table (``UPDATE_CASES``, ``COMBINE_CASES``, ``LONG_CASES``, ``BACKWARD_CASES``);
the check runs every row of it (values from a fixed seed) and the judge every row too (values from the grader's
seed), plus its fresh cases. A case added to one side only, renamed, or dropped fails here.
"""
import numpy as np
import pytest

from softmax_lab.checks import ch08, common
from softmax_lab.checks.ch05 import combine, long_row, online_update


def check_case_names(check, *args, monkeypatch):
    """The case names a check reports, in order (whatever their verdicts)."""
    names = []
    add = common.Report.add

    def recording(self, name, problem):
        names.append(name)
        return add(self, name, problem)

    monkeypatch.setattr(common.Report, "add", recording)
    check(*args)
    return names


def never(*args, **kwargs):
    raise NotImplementedError


def judge_names(judge, seed=1):
    rng = np.random.default_rng(seed)
    items = judge.calls(rng) if judge.kind == "python" else judge.cases(rng)
    return [item.name for item in items]


@pytest.mark.parametrize("module, ident, table, check", [
    (online_update, "ch05-online-update", online_update.UPDATE_CASES, online_update.check_online_update),
    (long_row, "ch05-long-row", long_row.LONG_CASES, long_row.check_long_row),
    (ch08, "ch08-backward", ch08.BACKWARD_CASES, ch08.check_softmax_backward),
], ids=["online-update", "long-row", "backward"])
def test_check_and_judge_run_the_table(module, ident, table, check, monkeypatch, capsys):
    names = [row[0] for row in table]
    checked = check_case_names(check, never, monkeypatch=monkeypatch)
    assert checked[:len(names)] == names, checked
    judged = judge_names(module.JUDGES[ident])
    assert judged[:len(names)] == names, judged
    assert len(judged) > len(names)  # and fresh cases from the grader's seed besides


def test_combine_check_and_judge_run_the_table(monkeypatch, capsys):
    names = [row[0] for row in combine.COMBINE_CASES]
    assert check_case_names(combine.check_combine, never, monkeypatch=monkeypatch) == names
    judged = judge_names(combine.JUDGES["ch05-combine"])
    # every row of the table, in order: a swap is two calls, the orders one call per merge of the fold
    firsts = [next(i for i, j in enumerate(judged) if j == n or j.startswith(n + ": ")) for n in names]
    assert firsts == sorted(firsts), judged
    assert sum(j.startswith("fresh random chunks") for j in judged) == combine.JUDGE_FRESH


def test_the_tables_draw_the_same_kinds_of_values():
    """The check's values (fixed seed) and the judge's (grader's seed) come from one drawing function per table:
    same shapes and the same literal rows."""
    a, b = np.random.default_rng(1), np.random.default_rng(2)
    for _, values, _, _ in online_update.UPDATE_CASES:
        r1, r2 = online_update.case_row(values, a), online_update.case_row(values, b)
        assert len(r1) == len(r2)
        if values.startswith("["):
            assert r1 == r2
    for _, n, programs, block, kind, _, _ in long_row.LONG_CASES:
        assert long_row.case_row(n, programs, block, kind, a).shape == (n,)
    for _, shape, y_kind, dy_kind, dtype, _, _ in ch08.BACKWARD_CASES:
        y, dy = ch08.case_arrays(a, shape, y_kind, dy_kind, dtype)
        assert y.shape == dy.shape == shape and np.allclose(y.sum(axis=1), 1, atol=1e-2)
