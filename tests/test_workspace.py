"""A learner's work is theirs: workspace/ (softmax_lab.lab) is filled from notebooks/, never overwritten, told
about course updates; `softmax-lab lab` refuses a busy port and serves workspace/ the way `make lab` does."""
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import softmax_lab
from softmax_lab import cli, doctor, lab
from softmax_lab.course import build

ROOT = Path(__file__).resolve().parents[1]


def course(tmp_path: Path) -> Path:
    """A small checkout: the real solutions of chapter 0 and 1, built into notebooks/ like `make notebooks`."""
    root = tmp_path / "course"
    (root / "solutions").mkdir(parents=True)
    (root / "Makefile").write_text("# a course checkout\n")
    for name in ("00_setup.ipynb", "01_scores_to_probabilities.ipynb"):
        (root / "solutions" / name).write_bytes((ROOT / "solutions" / name).read_bytes())
    build.build(root / "solutions", root / "notebooks", log=lambda *_: None)
    return root


def answer(path: Path) -> str:
    """Fill the first exercise the way a learner does in JupyterLab, and save."""
    nb = nbformat.read(str(path), as_version=4)
    k = next(i for i, c in enumerate(nb.cells) if "raise NotImplementedError" in c.source)
    nb.cells[k].source = nb.cells[k].source.replace("raise NotImplementedError", "pass  # my answer; was raise")
    nbformat.write(nb, str(path))
    return path.read_text()


def test_first_sync_copies_every_chapter_then_never_overwrites(tmp_path):
    root = course(tmp_path)
    logs = []
    assert lab.sync(root, log=logs.append) == ["00_setup.ipynb", "01_scores_to_probabilities.ipynb"]
    mine = answer(root / "workspace" / "01_scores_to_probabilities.ipynb")
    # the course changes chapter 1 and is rebuilt: `make notebooks`, then `make lab` again
    nb = nbformat.read(str(root / "solutions" / "01_scores_to_probabilities.ipynb"), as_version=4)
    nb.cells[0].source += "\n\nA sentence added by the course."
    nbformat.write(nb, str(root / "solutions" / "01_scores_to_probabilities.ipynb"))
    assert build.build(root / "solutions", root / "notebooks", log=lambda *_: None) == [
        "01_scores_to_probabilities.ipynb"]
    assert lab.sync(root, log=logs.append) == []
    assert (root / "workspace" / "01_scores_to_probabilities.ipynb").read_text() == mine
    # ... and the learner is told, by the workspace command and by the doctor
    assert lab.changed(root) == ["01_scores_to_probabilities.ipynb"]
    written = lab.update(root, log=logs.append)
    assert len(written) == 1 and written[0].startswith("01_scores_to_probabilities.new-")
    assert "A sentence added by the course." in (root / "workspace" / written[0]).read_text()
    assert (root / "workspace" / "01_scores_to_probabilities.ipynb").read_text() == mine
    assert lab.changed(root) == [], "once offered, an update is not reported again"
    # the course rolls the change back (helper-62's trial): the learner's copy is that version again, so nothing is
    # reported (it was: the state remembered the version offered last)
    shutil.copy(ROOT / "solutions" / "01_scores_to_probabilities.ipynb", root / "solutions")
    build.build(root / "solutions", root / "notebooks", log=lambda *_: None)
    (root / "workspace" / written[0]).unlink()
    assert lab.changed(root) == [] and lab.update(root, log=logs.append) == []


def test_new_chapters_are_added_and_hand_edited_notebooks_are_adopted(tmp_path):
    root = course(tmp_path)
    mine = answer(root / "notebooks" / "00_setup.ipynb")  # the old way: editing notebooks/ itself
    logs = []
    lab.sync(root, log=logs.append)
    assert (root / "workspace" / "00_setup.ipynb").read_text() == mine
    assert any("with the edits found in notebooks/" in line for line in logs)
    (root / "workspace" / "00_setup.ipynb").unlink()  # a learner deletes a chapter: it comes back blank
    (root / "notebooks" / "00_setup.ipynb").write_bytes(b"")
    build.build(root / "solutions", root / "notebooks", log=lambda *_: None, force=True)
    assert lab.sync(root, log=logs.append) == ["00_setup.ipynb"]


def test_workspace_command_and_doctor_report_updates(tmp_path, monkeypatch, capsys):
    root = course(tmp_path)
    assert cli.main(["workspace", "--root", str(root)]) == 0
    nb = nbformat.read(str(root / "solutions" / "00_setup.ipynb"), as_version=4)
    nb.cells[0].source += "\n\nUpdated."
    nbformat.write(nb, str(root / "solutions" / "00_setup.ipynb"))
    build.build(root / "solutions", root / "notebooks", log=lambda *_: None)
    capsys.readouterr()
    assert cli.main(["workspace", "--root", str(root)]) == 0
    assert "workspace/00_setup.ipynb: the course changed this chapter" in capsys.readouterr().err
    monkeypatch.chdir(root / "workspace")
    found = doctor.check_workspace()
    assert [f.level for f in found] == ["info"] and "00_setup.ipynb" in found[0].what
    assert "--update" in found[0].fix
    assert cli.main(["workspace", "--root", str(root), "--update"]) == 0
    assert [f.level for f in doctor.check_workspace()] == ["ok"]
    capsys.readouterr()
    assert cli.main(["workspace", "--root", str(root), "--update"]) == 0  # again: nothing to do, and it says so
    assert "nothing to update" in capsys.readouterr().out
    # a learner who deleted workspace/ is told so, and how to get the chapters back
    monkeypatch.chdir(root)
    shutil.rmtree(root / "workspace")
    found = doctor.check_workspace()
    assert [f.level for f in found] == ["info"] and "no workspace/" in found[0].what
    assert found[0].fix.startswith("softmax-lab workspace")


def test_lab_refuses_a_busy_port(tmp_path, capsys):
    root = course(tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert cli.main(["lab", "--root", str(root), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"port {port} is already in use" in err and f"make lab PORT={port + 1}" in err
    assert not (root / "workspace").exists(), "nothing is written before the refusal"
    assert cli.main(["lab", "--root", str(root), "--port", "70000"]) == 2


def test_jupyter_command_serves_workspace_on_chapter_0_with_the_course_kernel_only(tmp_path):
    cmd = lab.jupyter_command(tmp_path, 8899, open_browser=False)
    assert f"--ServerApp.root_dir={tmp_path / 'workspace'}" in cmd
    assert "--LabApp.default_url=/lab/tree/00_setup.ipynb" in cmd
    assert "--KernelSpecManager.allowed_kernelspecs=softmax-lab" in cmd and "--no-browser" in cmd
    env = lab.lab_environment()
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def test_lab_starts_jupyterlab_in_workspace_so_its_terminal_opens_there(tmp_path, monkeypatch):
    # JupyterLab's terminal opens in the folder the server runs in (also when the launcher asks for the root, "").
    root = course(tmp_path)
    monkeypatch.chdir(root)  # `make lab` runs from the checkout root; put back after the test
    started = {}
    monkeypatch.setattr(lab.os, "execvpe", lambda exe, cmd, env: started.update(cwd=Path.cwd(), env=env, cmd=cmd))
    monkeypatch.setattr(lab, "announce_when_serving", lambda url, port: started.update(url=url))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli.main(["lab", "--port", str(port), "--no-browser"]) == 0
    assert started["cwd"] == root / "workspace" and started["env"]["PWD"] == str(root / "workspace")
    assert f"--ServerApp.root_dir={root / 'workspace'}" in started["cmd"]
    assert started["url"] == f"http://localhost:{port}/lab/tree/00_setup.ipynb?token={started['env']['JUPYTER_TOKEN']}"


def test_the_address_is_printed_last_in_a_box():
    box = lab.address_box("http://localhost:8888/lab?token=abc").splitlines()
    assert box[0] == box[-1] and set(box[0]) == {"+", "-"}
    assert all(ln.startswith("| ") and ln.endswith(" |") and len(ln) == len(box[0]) for ln in box[1:-1])
    assert any("http://localhost:8888/lab?token=abc" in ln for ln in box)


def test_the_terminal_finds_the_course_command_first(tmp_path):
    cmd = lab.jupyter_command(Path("/tmp"), 8899, open_browser=False)
    setting = next(a for a in cmd if a.startswith("--ServerApp.terminado_settings="))
    shell = json.loads(setting.split("=", 1)[1])["shell_command"]
    # What JupyterLab's terminal runs, with a PATH that lacks the venv and a ~/.bashrc that puts others first.
    home = tmp_path
    (home / ".bashrc").write_text('export PATH="/opt/elsewhere/bin:$PATH"\n')
    proc = subprocess.run(shell + ["-c", "command -v softmax-lab; command -v python"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home)}, timeout=30)
    venv_bin = str(Path(sys.executable).parent)
    assert proc.stdout.split() == [f"{venv_bin}/softmax-lab", f"{venv_bin}/python"], proc.stdout + proc.stderr


def test_version_flag_and_python_check_api(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.startswith(f"softmax-lab {softmax_lab.__version__}")
    with pytest.raises(TypeError, match="name the notebook"):
        softmax_lab.check()


def test_softmax_lab_command_is_this_environments():
    # `make lab`'s PATH puts this venv first; the doctor says so (or names the fix when it is not).
    found = doctor.check_course_command()
    assert found[0].level in ("ok", "info") and ("this environment" in found[0].what or found[0].fix)
    proc = subprocess.run([str(Path(sys.executable).parent / "softmax-lab"), "--version"], capture_output=True,
                          text=True, env=lab.lab_environment())
    assert proc.returncode == 0 and proc.stdout.startswith("softmax-lab ")


def test_make_clean_and_gitignore_keep_the_workspace():
    assert "/workspace/" in (ROOT / ".gitignore").read_text().split()
    clean = [ln for ln in (ROOT / "Makefile").read_text().splitlines() if ln.startswith("\trm -rf")]
    assert clean and all("workspace" not in ln for ln in clean)
    assert lab.STATE == ".softmax-lab.json"  # docs/authoring.md names it


def test_workspace_from_a_deleted_folder_says_so_in_one_line(tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    code = ("import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]); "
            "from softmax_lab import cli; sys.exit(cli.main(['workspace']))")
    r = subprocess.run([sys.executable, "-c", code, str(gone)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "no longer exists" in r.stderr
