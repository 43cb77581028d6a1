"""`softmax-lab grade` from the built wheel, as an instructor who ran ``pip install softmax_lab-*.whl`` runs it: the
package then lies in the venv's site-packages, beside nbval, torch and numpy, and the sandbox must still see those
(it hid the whole folder once, and every notebook came back ``error``: "No module named 'nbval'")."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_grade import SOLUTIONS, blank, ensure_bwrap, paste_solutions, save, solution
from test_wheel import _clean_env, installed  # noqa: F401 - a fixture this file's test asks for

from softmax_lab.grading import cgroup

NAME = "00_setup.ipynb"


def test_the_wheel_grades_a_class(installed, tmp_path):  # noqa: F811 - the fixture
    ensure_bwrap()
    subs = tmp_path / "submissions"
    save(paste_solutions(blank(SOLUTIONS / NAME), solution(SOLUTIONS / NAME)), subs / "honest" / NAME)
    save(blank(SOLUTIONS / NAME), subs / "blank" / NAME)
    out = tmp_path / "grades" / "gradebook.csv"
    no_cgroup = ["--unsafe-no-cgroup"] if cgroup.why_unavailable() else []
    proc = subprocess.run([str(installed.parent / "softmax-lab"), "grade", str(subs), "--out", str(out), "--solutions",
                           str(SOLUTIONS), "--chapter", "00", "--jobs", "2", *no_cgroup], capture_output=True,
                          text=True, cwd=tmp_path, env=_clean_env(), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as f:
        rows = {(r["submission"].split("/")[0], r["exercise"]): r for r in csv.DictReader(f)}
    assert rows and {k[0] for k in rows} == {"honest", "blank"}
    for (who, _), row in rows.items():
        if who == "honest":
            assert row["status"] == "passed" and row["points"] == row["max_points"], row
        else:
            assert row["status"] == "failed" and "not implemented" in row["message"], row


def test_the_wheel_sandbox_sees_python_and_one_package(installed, tmp_path):  # noqa: F811 - the fixture
    """A notebook run imports softmax_lab from the sandbox's /opt/softmax-lab only; a judge run has none of it (the
    wheel's copy in site-packages lies under an empty tmpfs there: at most an empty namespace package)."""
    ensure_bwrap()
    (tmp_path / "grader").mkdir()
    script = tmp_path / "probe.py"
    script.write_text(
        "import subprocess, sys\nfrom pathlib import Path\nfrom softmax_lab.grading import sandbox\n"
        "probe = 'import nbval, numpy, torch\\ntry:\\n    import softmax_lab.checks as c\\nexcept ImportError:\\n"
        "    print(\"no softmax_lab\")\\nelse:\\n    print(c.__file__)'\n"
        "for package in (True, False):\n"
        "    cmd = sandbox.command([sys.executable, '-c', probe], grader_dir=Path(sys.argv[1]),\n"
        "                          env=sandbox.base_env(), package=package)\n"
        "    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)\n"
        "    print(done.stdout.strip() or done.stderr.strip()[-1500:])\n")
    proc = subprocess.run([str(installed), str(script), str(tmp_path / "grader")], capture_output=True, text=True,
                          cwd=tmp_path, env=_clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    inside = "/opt/softmax-lab/softmax_lab/checks/__init__.py"
    assert proc.stdout.splitlines() == [inside, "no softmax_lab"], proc.stdout


def test_a_system_wide_install_is_hidden_too(monkeypatch, tmp_path):
    """Installed into /usr/local (pip as root, no venv): /usr is bound whole, so the package there is covered."""
    from softmax_lab.grading import sandbox

    ensure_bwrap()
    where = Path("/usr/local/lib/python3.11/site-packages/softmax_lab")
    monkeypatch.setattr(sandbox, "PACKAGE", where)
    cmd = sandbox.command(["true"], grader_dir=tmp_path, env={}, package=False)
    at = [k for k, a in enumerate(cmd) if a == "--tmpfs" and cmd[k + 1] == str(where)]
    assert at and at[0] > cmd.index("/usr"), "the tmpfs comes after /usr's bind, over the package"


def test_copies_brought_in_by_any_bind_are_hidden_after_it(monkeypatch, tmp_path):
    """A checkout under /usr (/usr/src/app), and a driver folder on LD_LIBRARY_PATH that holds the wheel's venv
    (conda's $CONDA_PREFIX/lib): each is covered after the bind that brings it in."""
    from softmax_lab.grading import sandbox

    ensure_bwrap()
    venv_lib = tmp_path / "venv" / "lib"
    monkeypatch.setattr(sandbox, "PACKAGE", venv_lib / "python3.11" / "site-packages" / "softmax_lab")
    monkeypatch.setattr(sandbox, "_checkout", lambda: Path("/usr/src/app"))
    monkeypatch.setattr(sandbox, "_gpu_binds", lambda: ["--ro-bind", str(venv_lib), str(venv_lib)])
    cmd = sandbox.command(["true"], grader_dir=tmp_path, env={}, package=False)
    covered = {cmd[k + 1]: k for k, a in enumerate(cmd) if a == "--tmpfs"}
    assert covered.get("/usr/src/app", -1) > cmd.index("/usr")
    assert covered.get(str(sandbox.PACKAGE), -1) > cmd.index(str(venv_lib))
    assert all(cmd[k - 2:k] == ["--size", "4096"] and cmd[k + 2:k + 4] == ["--remount-ro", cmd[k + 1]]
               for k in covered.values() if cmd[k + 1] not in ("/tmp", "/dev/shm"))
