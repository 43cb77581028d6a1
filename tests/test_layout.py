"""The package's layout: course tools and the grader import no torch, every command has --help,
package data is declared and shipped in the wheel."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from conftest import ROOT
from softmax_lab import cli

PACKAGE = ROOT / "code" / "softmax_lab"
# Run inside sandboxes, not imported by the grader: the judge's harness launches kernels, so it needs torch.
SANDBOX_SCRIPTS = {"softmax_lab.grading.judge_harness"}


def test_course_grading_and_the_command_import_no_torch():
    modules = sorted(
        "softmax_lab." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
        for folder in ("course", "grading") for p in (PACKAGE / folder).rglob("*.py"))
    modules = [m for m in modules if m not in SANDBOX_SCRIPTS] + ["softmax_lab.cli", "softmax_lab.lab",
                                                                  "softmax_lab.web"]
    script = ("import importlib, sys\n"
              f"for m in {modules!r}:\n"
              "    importlib.import_module(m)\n"
              "from softmax_lab import cli\n"
              "for name in cli.COMMANDS:\n"
              "    if name != 'doctor':\n"
              "        cli.parser(name)\n"
              "print(sorted(m for m in ('torch', 'triton', 'numpy') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "torch" not in proc.stdout and "triton" not in proc.stdout, proc.stdout
    assert len(modules) > 15


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as done:
        cli.main([name, "--help"])
    assert done.value.code == 0
    assert f"softmax-lab {name}" in capsys.readouterr().out


def test_top_level_help_lists_every_command(capsys):
    assert cli.main([]) == 0 and cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)


def test_doctor_stays_callable_after_its_module_is_imported():
    import softmax_lab
    import softmax_lab.doctor

    assert callable(softmax_lab.doctor) and softmax_lab.doctor.run_doctor is not None


def test_sanitize_config_is_package_data_and_tests_use_the_same_file():
    from softmax_lab import course

    assert (ROOT / "tests" / "nbval_sanitize.cfg").resolve() == course.data_file("nbval_sanitize.cfg").resolve()
    assert "[timestamps]" in course.sanitize_config()


def test_declared_package_data_exists_and_ships_in_the_wheel(tmp_path):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = pyproject["tool"]["setuptools"]["package-data"]["softmax_lab"]
    declared = {p.relative_to(PACKAGE).as_posix() for pattern in patterns for p in PACKAGE.glob(pattern)}
    for pattern in patterns:
        assert list(PACKAGE.glob(pattern)), f"package-data declares {pattern}, which matches nothing"
    assert {f"course/exercises/{p.name}" for p in (PACKAGE / "course" / "exercises").glob("*.toml")} <= declared
    # Every file the package reads at run time (everything but Python source) is declared, so the wheel has it.
    shipped = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*") if p.is_file()
               and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts}
    assert shipped <= declared, f"package files no package-data pattern declares: {sorted(shipped - declared)}"
    assert {p.parent.relative_to(PACKAGE).parts[0] for p in map(PACKAGE.joinpath, shipped)
            if "exercises" not in p.parts} == {"data"}, "the package data lives in one folder, softmax_lab/data/"
    # Built from a copy of what the wheel needs, so that setuptools' build/ folder does not land in the checkout.
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "code" / "softmax_lab", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "--disable-pip-version-check", "-w", str(tmp_path), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("softmax_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(f"softmax_lab/{d}" for d in declared if f"softmax_lab/{d}" not in names)
    assert not missing, f"not in the wheel: {missing}"


def test_conftest_helpers_load_an_exercise_and_run_its_check(tmp_path):
    from conftest import exercise_source, load_exercise, run_check

    solved = load_exercise("ch00-double", exercise_source("ch00-double"), tmp_path)
    ok, text = run_check("ch00-double", solved.double)
    assert ok and text.strip().splitlines()[-1].startswith("ch00-double: PASSED"), text
    blank = load_exercise("ch00-double", exercise_source("ch00-double", learner=True), tmp_path)
    ok, text = run_check("ch00-double", blank.double)
    assert not ok and "not implemented yet" in text, text
