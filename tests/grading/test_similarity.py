"""Copy detection (`softmax-lab similarity`, grading/similarity.py): a package kernel pasted and renamed is flagged,
classmates' copies are flagged, independent honest code is not, and the false-positive rate over the course's own
different exercises stays low."""
from __future__ import annotations

import csv
import io
import itertools
import keyword
import subprocess
import sys
import tokenize
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, SOLUTIONS
from softmax_lab.course import notebook
from softmax_lab.grading import similarity as sim

FUSED = Path(sim.PACKAGE) / "kernels" / "fused.py"
MULTIROW = Path(sim.PACKAGE) / "kernels" / "multirow.py"
LAUNCHER = '''

def my_fused_softmax(x, out):
    """Softmax over the last dim of a 2-D float32 tensor whose rows are contiguous (any row stride)."""
    n_rows, n_cols = x.shape
    BLOCK = triton.next_power_of_2(n_cols)
    my_fused_kernel[(n_rows,)](out, x, x.stride(0), out.stride(0), n_cols, BLOCK=BLOCK,
                               num_warps=4 if BLOCK <= 1024 else 8)  # simpler than default_num_warps
    return out
'''
HEADER = ("@triton.jit\n"
          "def my_fused_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):\n")
# Two learners' own ch04-fused bodies, written independently and each its own way.
ALICE = '''\
    pid = tl.program_id(0)
    start_in = in_ptr + pid.to(tl.int64) * in_row_stride
    start_out = out_ptr + pid.to(tl.int64) * out_row_stride
    offsets = tl.arange(0, BLOCK)
    inside = offsets < n_cols
    vals = tl.load(start_in + offsets, mask=inside, other=-float("inf"))
    biggest = tl.max(vals, axis=0)
    shifted = vals - biggest
    expd = tl.exp(shifted)
    denom = tl.sum(expd, axis=0)
    tl.store(start_out + offsets, expd / denom, mask=inside)
'''
CAROL = '''\
    r = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK)
    ok = c < n_cols
    v = tl.load(in_ptr + r * in_row_stride + c, mask=ok, other=float("-inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + r * out_row_stride + c, e / tl.sum(e, axis=0), mask=ok)
'''
DAN = '''\
    row_id = tl.program_id(axis=0)
    base = row_id.to(tl.int64)
    lanes = tl.arange(0, BLOCK)
    keep = lanes < n_cols
    src = in_ptr + base * in_row_stride
    row = tl.load(src + lanes, mask=keep, other=float("-inf"))
    row_max = tl.max(row, axis=0)
    numerator = tl.exp(row - row_max)
    total = tl.sum(numerator, axis=0)
    result = numerator * (1.0 / total)
    dst = out_ptr + base * out_row_stride
    tl.store(dst + lanes, result, mask=keep)
'''


def renamed(source: str, keep=("tl", "triton", "torch", "float", "range", "min", "max")) -> str:
    """Every name a learner could rename (not keywords, attributes, keyword arguments or `keep`) replaced by a new
    one, comments dropped: a paste dressed up."""
    names: dict[str, str] = {}
    out, previous, depth = [], "", 0
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type != tokenize.COMMENT]
    for k, tok in enumerate(tokens):
        text = tok.string
        depth += text in "([{" and tok.type == tokenize.OP
        depth -= text in ")]}" and tok.type == tokenize.OP
        keyword_argument = depth and k + 1 < len(tokens) and tokens[k + 1].string == "=" and previous in "(,"
        if (tok.type == tokenize.NAME and not keyword.iskeyword(text) and previous != "." and text not in keep
                and not keyword_argument):  # f(mask=...) cannot be renamed
            text = names.setdefault(text, f"v{len(names)}_{text[::-1]}")
        out.append((tok.type, text))
        previous = tok.string
    return tokenize.untokenize(out)


def package_function(path: Path, name: str) -> str:
    import ast

    source = path.read_text()
    node = next(n for n in ast.parse(source).body if getattr(n, "name", None) == name)
    lines = source.split("\n")[node.decorator_list[0].lineno - 1:node.end_lineno]
    return "\n".join(lines) + "\n"


def learner_notebook(folder: Path, name: str, cells: dict[str, str]) -> Path:
    """A learner's notebook: the class's blank chapter with these exercise cells filled in."""
    chapter = {"ch04": "04_three_kernels_to_one.ipynb", "ch07": "07_performance.ipynb"}
    first = next(iter(cells))[:4]
    nb = notebook.read(NOTEBOOKS / chapter[first])
    for cell in nb.cells:
        ident = notebook.tag_value(cell, notebook.EXERCISE)
        if ident in cells:
            cell.source = cells[ident]
    path = folder / name / chapter[first]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


@pytest.fixture(scope="module")
def course():
    return sim.load_course(SOLUTIONS)


@pytest.fixture(scope="module")
def pasted_fused():
    kernel = package_function(FUSED, "fused_softmax_kernel").replace("fast_exp(x)", "tl.exp(x)")
    return renamed(kernel.replace("fused_softmax_kernel", "my_fused_kernel"),
                   keep=("tl", "triton", "float", "my_fused_kernel")) + LAUNCHER


def rows_for(course, tmp_path, learners: dict[str, dict[str, str]]) -> list[dict]:
    subs = [(name, learner_notebook(tmp_path, name, cells)) for name, cells in learners.items()]
    return sim.similarity_rows(subs, course=course)


def flagged(rows, learner, kind) -> list[dict]:
    return [r for r in rows if r["learner"] == learner and r["kind"] == kind and r["flagged"]]


def test_normalising_removes_names_literals_comments_and_layout():
    a = "def f(x, n):\n    '''doc'''\n    y = x * 2  # double\n    return y[: n]\n"
    b = "def g(  q,m ):\n    z = q*7\n\n    return z[:m]\n"
    assert [t for t, _ in sim.normalised_tokens(a)] == [t for t, _ in sim.normalised_tokens(b)]
    c = "def f(x, n):\n    return x.load(n)\n"
    d = "def f(x, n):\n    return x.store(n)\n"  # an API call cannot be renamed: attributes are kept
    assert sim.fingerprints(sim.normalised_tokens(c), k=4) != sim.fingerprints(sim.normalised_tokens(d), k=4)
    assert sim.normalised_tokens("def broken(:\n") == []


def test_winnowing_finds_every_long_enough_common_run():
    tokens = [(f"t{i}", i) for i in range(60)]
    whole = sim.fingerprints(tokens)
    part = sim.fingerprints(tokens[20:20 + sim.K + sim.WINDOW - 1])
    assert part and set(part) <= set(whole)


def test_a_pasted_and_renamed_package_kernel_is_flagged(course, tmp_path, pasted_fused):
    rows = rows_for(course, tmp_path, {"mallory": {"ch04-fused": pasted_fused}})
    (row,) = flagged(rows, "mallory", "package")
    assert row["match"] == "softmax_lab/kernels/fused.py:fused_softmax_kernel" and row["function"] == "my_fused_kernel"
    assert row["similarity"] >= 0.8 and row["lines"] and row["match_lines"]
    column = sim.flags(rows)
    assert list(column) == [("mallory", "04_three_kernels_to_one.ipynb", "ch04-fused")]
    assert "package softmax_lab/kernels/fused.py:fused_softmax_kernel" in column[list(column)[0]]


def test_a_pasted_multirow_kernel_is_flagged(course, tmp_path):
    blank = next(c for c in notebook.read(NOTEBOOKS / "07_performance.ipynb").cells
                 if notebook.tag_value(c, notebook.EXERCISE) == "ch07-multirow").source
    kernel = renamed(package_function(MULTIROW, "multirow_softmax_kernel").replace("fast_exp(x)", "tl.exp(x)"),
                     keep=("tl", "triton", "float"))
    launcher = blank[blank.index("def my_multirow_softmax"):]
    rows = rows_for(course, tmp_path, {"mallory": {"ch07-multirow": kernel + "\n\n" + launcher}})
    assert [r["match"] for r in flagged(rows, "mallory", "package")] == [
        "softmax_lab/kernels/multirow.py:multirow_softmax_kernel"]


def test_classmates_copies_are_flagged_and_independent_work_is_not(course, tmp_path):
    bob = renamed(HEADER + ALICE, keep=("tl", "triton", "float", "my_fused_kernel")) + "\n# my own work\n" + LAUNCHER
    learners = {"alice": {"ch04-fused": HEADER + ALICE + LAUNCHER}, "bob": {"ch04-fused": bob},
                "carol": {"ch04-fused": HEADER + CAROL + LAUNCHER}, "dan": {"ch04-fused": HEADER + DAN + LAUNCHER}}
    rows = rows_for(course, tmp_path, learners)
    assert [r["match"] for r in flagged(rows, "bob", "submission")] == ["alice:ch04-fused:my_fused_kernel"]
    assert [r["match"] for r in flagged(rows, "alice", "submission")] == ["bob:ch04-fused:my_fused_kernel"]
    row = flagged(rows, "bob", "submission")[0]
    assert row["similarity"] == 1.0 and row["lines"]
    for honest in ("carol", "dan"):
        assert not [r for r in rows if r["learner"] == honest and r["flagged"] and r["kind"] != "solution"], honest
    assert not [r for r in rows if r["learner"] in ("alice", "bob") and r["kind"] == "package" and r["flagged"]]


def test_a_pasted_solution_is_flagged_not_zeroed(course, tmp_path):
    solution = next(c for c in notebook.read(SOLUTIONS / "07_performance.ipynb").cells
                    if notebook.tag_value(c, notebook.EXERCISE) == "ch07-multirow").source
    rows = rows_for(course, tmp_path, {"sam": {"ch07-multirow": solution}})
    kernel = [r for r in flagged(rows, "sam", "solution") if r["function"] == "my_multirow_kernel"]
    assert kernel and kernel[0]["match"] == "solution of ch07-multirow:my_multirow_kernel"
    assert kernel[0]["similarity"] == 1.0
    assert set(sim.COLUMNS) == set(rows[0])


def test_false_positives_over_the_course_own_different_exercises(course):
    """Every pair of solution functions of different exercises is independent code, except where the course's
    exercises repeat one another (the same kernel grown by one step: listed). None of the others may be flagged."""
    repeats = {frozenset(p) for p in [("ch02-masked-load-store", "ch04-fused"), ("ch05-online-kernel", "ch05-long-row"),
                                       ("ch01-stable-row", "ch04-fused")]}
    units = [u for u in course.solutions if len(u.own) >= sim.MIN_MATCH]
    pairs, flagged_pairs = 0, []
    for a, b in itertools.combinations(units, 2):
        if a.exercise == b.exercise or frozenset((a.exercise, b.exercise)) in repeats:
            continue
        pairs += 1
        m = sim.Match(a, b, a.own & b.own, min(len(a.own), len(b.own)))
        if m.flagged:
            flagged_pairs.append((a.label, b.label, round(m.similarity, 2)))
    assert pairs > 400
    assert len(flagged_pairs) / pairs <= 0.01, flagged_pairs


def test_the_command_writes_a_csv_and_a_report(course, tmp_path, pasted_fused):
    learner_notebook(tmp_path / "class", "mallory", {"ch04-fused": pasted_fused})
    learner_notebook(tmp_path / "class", "carol", {"ch04-fused": HEADER + CAROL + LAUNCHER})
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "similarity", str(tmp_path / "class"),
                           "--out", str(tmp_path / "out"), "--solutions", str(SOLUTIONS)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "out" / "similarity.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(sim.COLUMNS)
    assert [r["learner"] for r in rows if r["flagged"] == "True" and r["kind"] == "package"] == ["mallory"]
    text = (tmp_path / "out" / "similarity.txt").read_text()
    assert "mallory:ch04-fused:my_fused_kernel" in text and "softmax_lab/kernels/fused.py:fused_softmax_kernel" in text
    assert "VEC" in text  # the package's side of the matching lines
    bad = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "similarity", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no such file or folder" in bad.stderr


def test_a_lost_tag_a_blank_notebook_and_a_broken_file_each_get_a_clear_row(course, tmp_path, pasted_fused):
    path = learner_notebook(tmp_path, "mallory", {"ch04-fused": pasted_fused})
    nb = nbformat.read(str(path), as_version=4)
    for c in nb.cells:
        c.metadata["tags"] = [t for t in c.metadata.get("tags", []) if not t.startswith("exercise:")]
    nbformat.write(nb, str(path))
    blank = NOTEBOOKS / "04_three_kernels_to_one.ipynb"
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    rows, (_, notes) = sim._analyse([("mallory", path), ("blank", blank), ("eve", broken)], None, sim.THRESHOLD,
                                    sim.COMMON, course)
    assert [r["match"] for r in flagged(rows, "mallory", "package")] == [
        "softmax_lab/kernels/fused.py:fused_softmax_kernel"]
    blank_rows = [r for r in rows if r["learner"] == "blank"]
    assert blank_rows and not any(r["flagged"] for r in blank_rows)
    assert all("too little code to judge" in r["note"] for r in blank_rows if r["function"] == "my_fused_kernel")
    assert any("broken.ipynb" in n and "not a readable notebook" in n for n in notes)
