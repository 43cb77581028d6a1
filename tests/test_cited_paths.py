"""Every recorded run the course cites exists, and the lab notebook it replaced is cited nowhere.

Citations are ``benchmarks/...`` paths in the package's code, the docs, the README, DEVELOPERS.md, the
benchmarks' own notes and scripts, the tests, and the cells (not the stored outputs) of the solution and learner
notebooks. ``{a,b}`` and ``*`` in a citation must each name at least one file. ``benchmarks/README.md``'s record
table must be what ``softmax-lab bench --record`` prints for the runs it names, and its scorecard what
``softmax-lab bench --scorecard`` prints.
"""
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NOTEBOOKS, ROOT, SOLUTIONS

CITED = re.compile(r"benchmarks/[\w.{},*/-]*[\w}*/]")
BARE = re.compile(r"(?<![\w/.-])h200-[\w.{},*-]*\.(?:json|png|log|md|txt)\b")
OLD_FOLDER = "results" + "/"  # (spelled apart, so that this file does not cite it)
OLD = re.compile(r"(?<![\w./-])" + re.escape(OLD_FOLDER))
HISTORY = re.compile(r"git (log|show)[^`\n]*" + re.escape(OLD_FOLDER))  # how to find it in git history: allowed
TEXT_ROOTS = ["code/softmax_lab", "docs", "tests", "tools", "benchmarks", ".ci", "deploy"]
TEXT_FILES = ["README.md", "DEVELOPERS.md", "Makefile", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".sh", ".toml", ".cfg", ".txt", ".yml", ".yaml", ""}


def _sources():
    """(name, text) of every file and notebook cell that may cite a path."""
    files = [ROOT / f for f in TEXT_FILES]
    for top in TEXT_ROOTS:
        files += [p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in SUFFIXES
                  and "__pycache__" not in p.parts and "records" not in p.relative_to(ROOT).parts[:2]
                  and "fixtures" not in p.parts]
    files += [ROOT / "benchmarks" / "records" / p.name for p in (ROOT / "benchmarks" / "records").glob("*.md")]
    for path in files:
        if path.resolve() != Path(__file__).resolve():
            yield path.relative_to(ROOT).as_posix(), path.read_text(errors="replace")
    for folder in (SOLUTIONS, NOTEBOOKS):
        for path in sorted(folder.glob("*.ipynb")):
            for i, cell in enumerate(json.loads(path.read_text())["cells"]):
                src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                yield f"{path.relative_to(ROOT).as_posix()} cell {i}", src


def _expand(path):
    """``a/{b,c}.json`` -> ``a/b.json``, ``a/c.json``."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [q for alt in m.group(1).split(",") for q in _expand(path[:m.start()] + alt + path[m.end():])]


def _missing(path):
    path = path.rstrip(".")
    out = []
    for p in _expand(path):
        if "*" in p:
            if not list(ROOT.glob(p)):
                out.append(p)
        elif not (ROOT / p).exists():
            out.append(p)
    return out


SOURCES = list(_sources())


def test_the_sources_are_found():
    names = {name.split(" cell ")[0] for name, _ in SOURCES}
    for must in ("README.md", "docs/performance.md", "benchmarks/README.md", "code/softmax_lab/bench.py",
                 "solutions/10_long_rows.ipynb", "notebooks/07_performance.ipynb"):
        assert must in names, must


def test_every_cited_benchmarks_path_exists():
    bad = sorted({f"{name}: {p}" for name, text in SOURCES for cited in CITED.findall(text)
                  for p in _missing(cited)})
    assert not bad, "cited but not in the tree:\n" + "\n".join(bad)


def test_every_record_named_alone_exists():
    """A record's file name without its folder (``h200-vectors.json``, as the chapters' loaders and prose name
    them) is one of benchmarks/records/."""
    have = {p.name for p in (ROOT / "benchmarks" / "records").iterdir()}
    bad = sorted({f"{name}: {n}" for name, text in SOURCES for n in BARE.findall(text)
                  if not all(any(fnmatch.fnmatch(h, q) for h in have) for q in _expand(n))})
    assert not bad, "named but not in benchmarks/records/:\n" + "\n".join(bad)


def test_the_old_results_folder_is_gone_and_cited_nowhere():
    assert not (ROOT / OLD_FOLDER).exists()
    bad = [f"{name}: {line.strip()[:120]}" for name, text in SOURCES for line in text.splitlines()
           if OLD.search(HISTORY.sub("", line))]
    assert not bad, f"still cites {OLD_FOLDER}:\n" + "\n".join(bad)


def test_the_checker_sees_a_missing_citation():
    assert _missing("benchmarks/records/no-such-run.json") == ["benchmarks/records/no-such-run.json"]
    assert _missing("benchmarks/records/h200-odd-widths-probe-{a,c}.json") == [
        "benchmarks/records/h200-odd-widths-probe-c.json"]
    assert _missing("benchmarks/records/h200-padding*.json") == []
    assert CITED.findall("(`benchmarks/records/h200-vectors.json`).") == ["benchmarks/records/h200-vectors.json"]
    assert BARE.findall("(`h200-padding-c.json`), load(\"h200-once.json\"), cuda_layer_h200.json") == [
        "h200-padding-c.json", "h200-once.json"]
    assert OLD.search("see " + OLD_FOLDER + "x.json") and not OLD.search(HISTORY.sub("", "`git log -- " + OLD_FOLDER
                                                                                      + "`"))


def test_the_record_table_is_what_bench_record_prints():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    m = re.search(r"python -m softmax_lab\.bench --record ((?:\S+\.json\s*(?:\\\n\s*)?)+)", readme)
    assert m, "benchmarks/README.md names no --record command"
    runs = re.findall(r"\S+\.json", m.group(1))
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.bench", "--record", *runs], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.strip()
    assert table.count("\n") > 10
    assert table in readme, "benchmarks/README.md's table differs from `softmax-lab bench --record`:\n" + table


def test_the_scorecard_is_what_bench_scorecard_prints():
    readme = (ROOT / "benchmarks" / "README.md").read_text()
    m = re.search(r"python -m softmax_lab\.bench --scorecard (\S+\.json)\s*\\\n\s*--since (\S+\.json)", readme)
    assert m, "benchmarks/README.md names no --scorecard command"
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.bench", "--scorecard", m.group(1), "--since", m.group(2)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    card = proc.stdout.strip()
    assert "The goal, line by line:" in card and card.count("\n| ") > 10
    assert card in readme, "benchmarks/README.md's scorecard differs from `softmax-lab bench --scorecard`:\n" + card


@pytest.mark.parametrize("bad", [["--record", "benchmarks/records/no-such-run.json"],
                                 ["--scorecard", "benchmarks/records/no-such-run.json"]])
def test_bench_record_names_a_missing_file(bad):
    proc = subprocess.run([sys.executable, "-m", "softmax_lab.bench", *bad], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert "no-such-run.json" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
