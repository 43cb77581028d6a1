"""What the mutant tests of every chapter share: run a check, and assert it passes or fails naming the mistake."""
import triton

from softmax_lab.checks import ch04
from softmax_lab.checks._pitfalls import softmax_problem


def run(check, *args, capsys):
    ok = check(*args)
    return bool(ok), capsys.readouterr().out


def fails_naming(check, args, exercise, words, capsys):
    ok, out = run(check, *args, capsys=capsys)
    assert not ok, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: FAILED"), out
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL ")]
    for w in words:
        assert any(w in ln for ln in fails), f"no FAIL line mentions {w!r}:\n{out}"
    return out


def passes(check, args, exercise, capsys):
    ok, out = run(check, *args, capsys=capsys)
    assert ok and "FAIL " not in out, out
    assert out.strip().splitlines()[-1].startswith(f"{exercise}: PASSED"), out


def values_only(launch) -> list[str]:
    """What the chapter's kernel checks verified before: output values on contiguous boundary shapes
    (chapter 4's cases), output poisoned first. A mutant of the property passes this."""
    return [p for _, v, step in ch04.FUSED_CASES if step is None
            if (p := softmax_problem(launch, v, triton.next_power_of_2))]
