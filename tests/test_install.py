"""The install (`make lab` / `make test` through tools/install.sh): pins that agree everywhere, a lock that PyPI
alone satisfies, CI with the local pip configuration off, one clear line for each bad input, and the bootstrap cell
that installs the course on a hosted notebook service."""
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from softmax_lab.course import build

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "tools" / "install.sh"
LOCKS = {"lab": ROOT / "requirements" / "lab.txt", "test": ROOT / "requirements" / "test.txt"}


def _name(req: str) -> str:
    return re.split(r"[=<>;\[ ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def pyproject_pins(extra: str | None = None) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + (project["optional-dependencies"][extra] if extra else [])
    pins = {}
    for r in reqs:
        assert "==" in r, f"pyproject.toml: {r!r} is not pinned with =="
        pins[_name(r)] = r.split("==")[1].split(";")[0].strip()
    return pins


def lock_pins(path: Path) -> dict[str, str]:
    return {m[0].lower(): m[1] for m in re.findall(r"^([A-Za-z0-9_.\-]+)==([^\s\\]+)", path.read_text(), re.M)}


def environment_yml_pins() -> dict[str, str]:
    text = (ROOT / "environment.yml").read_text()
    return {_name(m[0]): m[1] for m in re.findall(r"^\s*-\s*([A-Za-z0-9_.\-]+)==([^\s#]+)\s*$", text, re.M)}


# --- pins and the lock -------------------------------------------------------------------------------

def test_pyproject_environment_yml_and_locks_agree():
    runtime, everything = pyproject_pins(), pyproject_pins("test")
    lab, test = lock_pins(LOCKS["lab"]), lock_pins(LOCKS["test"])
    assert environment_yml_pins() == everything, "environment.yml and pyproject.toml pin different versions"
    for name, version in runtime.items():
        assert lab.get(name) == version, \
            f"requirements/lab.txt has {name}=={lab.get(name)}, pyproject {version}: make lock"
    for name, version in everything.items():
        assert test.get(name) == version, \
            f"requirements/test.txt has {name}=={test.get(name)}, pyproject {version}: make lock"
    # The course's runtime is the same in both locks; the test lock only adds the test tools.
    assert {n: v for n, v in test.items() if n in lab} == lab
    # `softmax-lab check` runs notebooks under pytest + nbval: the learner's install has them.
    for tool in ("pytest", "nbval"):
        assert lab.get(tool) == runtime[tool], f"`softmax-lab check` needs {tool}: requirements/lab.txt lacks it"
    for tool in ("playwright", "hypothesis", "pytest-xdist"):
        assert tool not in lab, f"{tool} is a test tool: learners' requirements/lab.txt should not install it"


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_locked_package_has_hashes(lock):
    text = LOCKS[lock].read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9_.\-]+==)", text.split("\n", 2)[2])
    assert len(entries) > 50
    for entry in entries:
        assert "--hash=sha256:" in entry, f"{lock} lock entry without a hash: {entry.splitlines()[0]}"


def test_torch_and_triton_are_a_pair_pypi_allows():
    # torch's own metadata names the triton it was built for: the lock must pin exactly that one.
    lab = lock_pins(LOCKS["lab"])
    assert metadata.version("torch").split("+")[0] == lab["torch"], "the venv's torch is not the locked one"
    wanted = [r for r in metadata.requires("torch") or [] if _name(r) == "triton"]
    assert wanted, "torch from PyPI declares its triton; is this the locked torch?"
    assert f"triton=={lab['triton']}" in wanted[0].replace(" ", ""), (wanted, lab["triton"])


def test_ci_sees_pypi_alone_and_runs_exactly_make_test():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "export PIP_CONFIG_FILE=/dev/null" in ci and re.search(r"unset [^\n]*PIP_FIND_LINKS", ci)
    assert ci.strip().splitlines()[-1] == "make test"
    make = (ROOT / "Makefile").read_text()
    assert "tools/install.sh $(VENV) requirements/lab.txt" in make
    assert "tools/install.sh $(VENV) requirements/test.txt" in make
    assert "--require-hashes -r" in INSTALL.read_text()


# --- bad input: one clear line, nothing else touched ----------------------------------------------------

def run_install(tmp_path: Path, venv: Path, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    full.update(PIP_CONFIG_FILE="/dev/null", **env)
    return subprocess.run(["bash", str(INSTALL), str(venv), str(LOCKS["lab"])], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=300)


def fake_command(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(script))
    path.chmod(0o755)
    return path


def one_line_fix(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("softmax-lab install:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_missing_python(tmp_path):
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", PYTHON="no-such-python3"))
    assert "no 'no-such-python3' on PATH" in line and "PYTHON=" in line
    assert not (tmp_path / "venv").exists()


def test_old_python(tmp_path):
    old = fake_command(tmp_path / "bin", "python3.9", """\
        case "$1" in -V) echo "Python 3.9.18";; *) exit 1;; esac
    """)
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", PYTHON=str(old)))
    assert "Python 3.9.18" in line and "3.11 or newer" in line


def test_python_without_venv_module(tmp_path):
    # Debian's python3 without python3-venv: `-m venv` fails with "ensurepip is not available".
    broken = fake_command(tmp_path / "bin", "python3", f"""\
        if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
            mkdir -p "$3/bin"; echo "Error: ensurepip is not available" >&2; exit 1
        fi
        exec {sys.executable} "$@"
    """)
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", PYTHON=str(broken)))
    assert "apt install python3-venv" in line and "ensurepip is not available" in line
    assert not (tmp_path / "venv").exists(), "the half-made venv is removed (it was made just now)"


def test_broken_venv_is_reported_not_deleted(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "learner-note.txt").write_text("mine")
    line = one_line_fix(run_install(tmp_path, venv))
    assert "is broken" in line and "make clean" in line and "workspace/ are kept" in line
    assert (venv / "learner-note.txt").read_text() == "mine"


def test_not_enough_disk(tmp_path):
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", SOFTMAX_LAB_NEED_GB="1000000"))
    assert "GB free" in line and "free some space" in line


def test_no_network(tmp_path):
    # PyPI replaced by a closed local port: what a machine without network sees. The disk check is set aside
    # (SOFTMAX_LAB_NEED_GB=0) so that a full test machine still reaches pip.
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", PIP_INDEX_URL="http://127.0.0.1:9/simple",
                                    PIP_RETRIES="0", PIP_TIMEOUT="2", PIP_NO_CACHE_DIR="1",
                                    SOFTMAX_LAB_NEED_GB="0"))
    assert "could not reach PyPI" in line


def test_other_platforms_get_the_route(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_command(fake_bin, "uname", """\
        case "$1" in -s) echo Darwin;; -m) echo arm64;; esac
    """)
    line = one_line_fix(run_install(tmp_path, tmp_path / "venv", PATH=f"{fake_bin}:{os.environ['PATH']}"))
    assert "Darwin arm64" in line and "Linux x86-64 only" in line and "WSL2" in line
    assert not (tmp_path / "venv").exists()


# --- hosted notebooks: the bootstrap cell -----------------------------------------------------------

def test_bootstrap_cell_pins_match_pyproject():
    pins = build.hosted_pins()
    assert "triton==3.6.0" in pins and "numpy==2.3.5" in pins
    assert not any(_name(p) in ("torch", "jupyterlab") for p in pins), "a hosted service keeps its own torch"
    cell = build.bootstrap_cell()
    compile(cell.source, "bootstrap", "exec")
    for pin in pins:
        assert repr(pin) in cell.source


def test_bootstrap_cell_installs_the_course_in_a_clean_environment(tmp_path):
    """What a hosted notebook does: torch and Jupyter present, softmax_lab missing. The cell installs the course
    (from this checkout, via SOFTMAX_LAB_SOURCE), after which `import softmax_lab` works and runs a kernel."""
    venv = tmp_path / "hosted"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The service's preinstalled packages: ours, but not our editable softmax_lab (its .pth is not processed
    # from a path added this way).
    ours = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site / "hosted-service.pth").write_text(str(ours) + "\n")
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env["SOFTMAX_LAB_SOURCE"] = str(ROOT)
    probe = "import importlib.util; print(importlib.util.find_spec('softmax_lab') is None)"
    before = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=env)
    assert before.stdout.strip() == "True", before.stderr
    cell = tmp_path / "bootstrap.py"
    cell.write_text(build.bootstrap_cell().source)
    run = subprocess.run([str(python), str(cell)], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    after = subprocess.run([str(python), "-c", textwrap.dedent("""\
        import softmax_lab, torch
        from softmax_lab.kernels import fused_softmax
        y = fused_softmax(torch.tensor([[2.0, 1.0, 0.0]], device=softmax_lab.DEVICE))
        print(softmax_lab.__file__)
        print(round(y.sum().item(), 4))
    """)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert after.returncode == 0, after.stderr
    where, total = after.stdout.split()
    assert str(site) in where and total == "1.0"
    # Run again: softmax_lab is there now, so the cell does nothing (a pip call would fail on this source).
    env["SOFTMAX_LAB_SOURCE"] = str(tmp_path / "no-such-source")
    again = subprocess.run([str(python), str(cell)], capture_output=True, text=True, env=env, timeout=60)
    assert again.returncode == 0, again.stderr
