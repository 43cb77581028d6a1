"""`softmax-lab collect`: the hub's learners' workspaces into the layout `softmax-lab grade` reads, run as an
instructor runs it (the CLI in a subprocess); every bad input is one line, and nothing is lost or graded twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from softmax_lab.grading.submissions import discover

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))


def collect(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"))
    r = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "collect", "--course", str(ROOT), *args],
                       capture_output=True, text=True, env=env, cwd=cwd, timeout=60)
    return r.returncode, r.stdout, r.stderr


def workspace(home: Path, learner: str, chapters=CHAPTERS[:2], edit="") -> Path:
    ws = home / learner / "softmax-lab" / "workspace"
    ws.mkdir(parents=True)
    for name in chapters:
        (ws / name).write_text((ROOT / "notebooks" / name).read_text() + edit)
    return ws


@pytest.fixture
def hub_homes(tmp_path):
    home = tmp_path / "home"
    workspace(home, "ann", edit="\n")  # an answer saved (any byte changed)
    workspace(home, "bob", chapters=CHAPTERS[:1])
    ws = home / "ann" / "softmax-lab" / "workspace"
    (ws / f"{Path(CHAPTERS[0]).stem}.new-1234abcd.ipynb").write_text("{}")  # a course update beside hers
    (ws / "scratch.ipynb").write_text("{}")  # her own notebook: not a submission
    return home, str(home / "{learner}" / "softmax-lab" / "workspace")


def test_collects_each_learners_chapters_into_the_graders_layout(hub_homes, tmp_path):
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern)
    assert rc == 0 and stderr == "", stderr
    assert "collected 3 notebooks of 2 learners" in stdout and f"softmax-lab grade {out}" in stdout
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.ipynb")) == \
        sorted([f"ann/{CHAPTERS[0]}", f"ann/{CHAPTERS[1]}", f"bob/{CHAPTERS[0]}"])
    assert (out / "ann" / CHAPTERS[0]).read_bytes() == (home / "ann/softmax-lab/workspace" / CHAPTERS[0]).read_bytes()
    subs, refused = discover([out], [])
    assert sorted((s.learner, Path(s.name).name) for s in subs) == \
        [("ann", CHAPTERS[0]), ("ann", CHAPTERS[1]), ("bob", CHAPTERS[0])] and refused == []

    rc, _, stderr = collect("--out", str(out), "--workspaces", pattern, "--chapter", "01")
    assert rc == 2 and stderr.count("\n") == 1 and "already holds a collection" in stderr and "--update" in stderr


def test_a_deleted_workspace_and_a_missing_learner_are_named(hub_homes, tmp_path):
    home, pattern = hub_homes
    (home / "carol" / "softmax-lab").mkdir(parents=True)  # carol deleted her workspace
    roster = tmp_path / "roster.csv"
    roster.write_text("learner\nann\nbob\ndave\n")
    rc, stdout, stderr = collect("--out", str(tmp_path / "a"), "--workspaces", pattern)
    assert rc == 1 and stderr.splitlines() == [
        f"softmax-lab collect: carol: no workspace at {home}/carol/softmax-lab/workspace (deleted, or never logged "
        "in): nothing collected"]
    assert "of 2 learners" in stdout
    rc, stdout, stderr = collect("--out", str(tmp_path / "b"), "--workspaces", pattern, "--roster", str(roster))
    assert rc == 1 and len(stderr.splitlines()) == 1 and "dave: no workspace" in stderr  # carol: not on the roster
    assert sorted(p.name for p in (tmp_path / "b").iterdir() if not p.name.startswith(".")) == ["ann", "bob"]


def test_update_replaces_only_what_changed_and_keeps_the_old_copy_out_of_grading(hub_homes, tmp_path):
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    assert collect("--out", str(out), "--workspaces", pattern)[0] == 0
    first = (out / "ann" / CHAPTERS[0]).read_bytes()
    mine = home / "ann/softmax-lab/workspace" / CHAPTERS[0]
    mine.write_text(mine.read_text() + "\n\n")  # ann works on
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern, "--update")
    assert rc == 0 and "1 changed, 2 unchanged" in stdout and ".replaced" in stdout, stdout + stderr
    assert (out / "ann" / CHAPTERS[0]).read_bytes() == mine.read_bytes()
    kept = list((out / ".replaced").rglob(CHAPTERS[0]))
    assert len(kept) == 1 and kept[0].read_bytes() == first  # nothing lost
    subs, _ = discover([out], [])
    assert len(subs) == 3  # the replaced copy is hidden from the grader: never graded twice
    manifest = json.loads((out / ".collected.json").read_text())
    assert len(manifest["collections"]) == 2 and manifest["files"][f"ann/{CHAPTERS[0]}"]["from"] == str(mine)


def test_name_clashes_are_refused_and_named(hub_homes, tmp_path):
    home, pattern = hub_homes
    other = tmp_path / "hub2"
    workspace(other, "ann")  # ann on a second hub too
    workspace(home, "Bob")  # Bob and bob: one folder on a case-insensitive file system
    rc, stdout, stderr = collect("--out", str(tmp_path / "s"), "--workspaces", pattern,
                                 "--workspaces", str(other / "{learner}" / "softmax-lab" / "workspace"))
    lines = stderr.splitlines()
    assert rc == 1 and len(lines) == 3, stderr
    assert any(line.startswith("softmax-lab collect: ann: two workspaces") for line in lines)
    assert any("Bob: same name as bob but for upper/lower case" in line for line in lines)
    assert any("bob: same name as Bob" in line for line in lines)
    assert not [p for p in (tmp_path / "s").iterdir() if not p.name.startswith(".")]  # nothing half-collected
    assert "collected 0 notebooks of 0 learners" in stdout


def test_links_are_refused_never_followed(hub_homes, tmp_path):
    home, pattern = hub_homes
    secret = tmp_path / "secret.ipynb"
    secret.write_text("not yours")
    os.symlink(secret, home / "bob/softmax-lab/workspace" / CHAPTERS[1])  # bob's chapter 1 points elsewhere
    eve = home / "eve" / "softmax-lab"
    eve.mkdir(parents=True)
    os.symlink(home / "ann/softmax-lab/workspace", eve / "workspace")  # eve's workspace is ann's
    out = tmp_path / "s"
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern)
    assert rc == 1
    assert f"bob/{CHAPTERS[1]}: not collected" in stderr and "a link: not followed" in stderr
    assert f"eve: {eve / 'workspace'} is a link: not followed" in stderr
    assert not (out / "eve").exists() and not (out / "bob" / CHAPTERS[1]).exists()
    assert "not yours" not in "".join(p.read_text() for p in out.rglob("*.ipynb"))


def test_two_collections_at_once_and_a_folder_of_other_files(hub_homes, tmp_path):
    home, pattern = hub_homes
    out = tmp_path / "s"
    out.mkdir()
    (out / ".collect.lock").write_text(f"{os.getpid()} {os.uname().nodename} 2026-01-01 10:00:00\n")
    rc, _, stderr = collect("--out", str(out), "--workspaces", pattern)
    assert rc == 2 and stderr.count("\n") == 1 and f"another collection (process {os.getpid()}" in stderr
    assert sorted(p.name for p in out.iterdir()) == [".collect.lock"]
    (out / ".collect.lock").write_text(f"999999999 {os.uname().nodename} 2026-01-01 10:00:00\n")  # it died
    assert collect("--out", str(out), "--workspaces", pattern)[0] == 0 and not (out / ".collect.lock").exists()

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the instructor's own file")
    rc, _, stderr = collect("--out", str(mine), "--workspaces", pattern)
    assert rc == 2 and "already holds files that no collection wrote" in stderr
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_pattern_without_the_learner_and_an_unknown_chapter(tmp_path):
    rc, _, stderr = collect("--out", str(tmp_path / "s"), "--workspaces", "/home/workspace")
    assert rc == 2 and "must contain {learner} once" in stderr
    rc, _, stderr = collect("--out", str(tmp_path / "s"), "--chapter", "42")
    assert rc == 2 and "no chapter 42" in stderr


def test_the_collection_is_private_to_the_collector_whatever_the_umask(hub_homes, tmp_path):
    """Learners' work must not become readable by classmates: collect runs as root, often under a folder every
    account can read (docs/hub.md), with umask 022. OUT and every folder in it are 700, every file 600, --update's
    kept copies too, and an OUT that already existed open to others is closed."""
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    old = os.umask(0o022)
    try:
        assert collect("--out", str(out), "--workspaces", pattern)[0] == 0
        (home / "ann/softmax-lab/workspace" / CHAPTERS[0]).write_text("{}\n")  # she changes her work
        assert collect("--out", str(out), "--workspaces", pattern, "--update")[0] == 0
    finally:
        os.umask(old)
    paths = [out, *out.rglob("*")]
    assert any(p.parent.name == "ann" and ".replaced" in p.parts for p in paths)  # --update's kept copy
    modes = {p.relative_to(tmp_path).as_posix(): oct(p.stat().st_mode & 0o777) for p in paths}
    assert all(m == ("0o700" if (tmp_path / p).is_dir() else "0o600") for p, m in modes.items()), modes


def _manifest_matches_out(out: Path) -> None:
    import hashlib

    manifest = json.loads((out / ".collected.json").read_text())
    on_disk = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in out.glob("*/*.ipynb")}
    assert {rel: f["sha256"] for rel, f in manifest["files"].items()} == on_disk


def test_a_stopped_collection_is_resumed_by_running_it_again(hub_homes, tmp_path, monkeypatch, capsys):
    """Ctrl-C, SIGTERM or SIGHUP mid-copy (they raise KeyboardInterrupt while the lock is held): before, OUT held
    copies and no manifest, and every rerun was refused ("files that no collection wrote"). Now the manifest names
    every copy made, the stop is one line, and the same command finishes the collection."""
    from softmax_lab.grading import collect as C

    home, pattern = hub_homes
    out = tmp_path / "submissions"
    write, done = C._write_atomically, []

    def stop_after_one(path, data):
        if path.name != C.MANIFEST and done:
            raise KeyboardInterrupt
        write(path, data)
        done.append(path) if path.name != C.MANIFEST else None

    monkeypatch.setattr(C, "_write_atomically", stop_after_one)
    args = argparse_namespace(out, pattern)
    assert C.run(args) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err and "again" in err, err
    manifest = json.loads((out / ".collected.json").read_text())
    assert manifest["collections"][-1]["finished"] is False and len(manifest["files"]) == 1
    _manifest_matches_out(out)
    monkeypatch.setattr(C, "_write_atomically", write)
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern)  # the same command, no --update
    assert rc == 0 and "finished the collection stopped since" in stderr, stdout + stderr
    assert "2 new, 0 changed, 1 unchanged" in stdout, stdout
    _manifest_matches_out(out)
    assert json.loads((out / ".collected.json").read_text())["collections"][-1]["finished"] is True


def test_copies_a_killed_run_made_after_its_last_save_are_recorded(hub_homes, tmp_path):
    """kill -9 between two saves of the manifest: copies on disk that it does not list (or lists with an older
    sha256, in --update). The rerun records them as they are, so the manifest matches OUT again."""
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    assert collect("--out", str(out), "--workspaces", pattern)[0] == 0
    path = out / ".collected.json"
    manifest = json.loads(path.read_text())
    manifest["files"].pop(f"bob/{CHAPTERS[0]}")
    manifest["files"][f"ann/{CHAPTERS[0]}"]["sha256"] = "0" * 64
    manifest["collections"][-1]["finished"] = False
    path.write_text(json.dumps(manifest))
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern)
    assert rc == 0 and "0 new, 0 changed, 3 unchanged" in stdout, stdout + stderr
    _manifest_matches_out(out)


def argparse_namespace(out, pattern):
    import argparse

    return argparse.Namespace(roster=None, course=ROOT, chapter=None, workspaces=[pattern], out=out, update=False)


def test_a_stop_mid_write_leaves_no_temporary_and_update_never_leaves_a_gap(tmp_path):
    """Found by re-trying the stops: a stop inside a write left `.NN_x.ipynb.<pid>.tmp` in OUT (never removed), and
    `--update` moved the old copy aside before writing the new one (OUT lacked the notebook in between)."""
    from softmax_lab.grading import collect as C

    path = tmp_path / "ann" / "01_x.ipynb"
    C._write_atomically(path, b"old")
    seen = []

    def aside():  # what --update does: runs once the new bytes are all written, before the rename
        seen.append(sorted(p.name for p in path.parent.iterdir()))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        C._write_atomically(path, b"new", before=aside)
    assert seen == [[f".01_x.ipynb.{os.getpid()}.tmp", "01_x.ipynb"]]
    assert [p.name for p in path.parent.iterdir()] == ["01_x.ipynb"] and path.read_bytes() == b"old"


def test_temporaries_of_a_killed_run_are_swept_by_the_next(hub_homes, tmp_path):
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    assert collect("--out", str(out), "--workspaces", pattern)[0] == 0
    stray = out / "ann" / f".{CHAPTERS[0]}.99999.tmp"  # kill -9 in the middle of a write
    stray.write_bytes(b"half a notebook")
    rc, stdout, stderr = collect("--out", str(out), "--workspaces", pattern, "--update")
    assert rc == 0 and not stray.exists(), stdout + stderr


def test_grading_the_folder_above_the_chapter_collections_is_refused(hub_homes, tmp_path):
    """hub.md collects each chapter into submissions/chNN/; `grade submissions/` took ch00 and ch02 for learners, with
    every learner's results on one page (helper-76): it is refused, naming the folder to grade."""
    home, pattern = hub_homes
    out = tmp_path / "submissions"
    for chapter in ("00", "01"):
        rc, stdout, stderr = collect("--out", str(out / f"ch{chapter}"), "--workspaces", pattern, "--chapter", chapter)
        assert rc == 0, stderr
        assert f"--out grades/ch{chapter}.csv --chapter {chapter}" in stdout  # the gradebook collect suggests
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"))
    r = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "grade", str(out), "--out", str(tmp_path / "g.csv"),
                        "--unsafe-no-sandbox"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "holds collections of `softmax-lab collect` (ch00, ch01)" in r.stderr, r.stderr
    assert f"softmax-lab grade {out / 'ch00'} --out grades/ch00.csv" in r.stderr and not (tmp_path / "g.csv").exists()
    r = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "grade", str(out / "ch00"), str(out / "ch01"), "--out",
                        str(tmp_path / "g.csv"), "--unsafe-no-sandbox"], capture_output=True, text=True, env=env,
                       timeout=120)  # (or submissions/*: each named relative to their parent, as learners)
    assert r.returncode == 2 and "these are collections of `softmax-lab collect` (ch00, ch01)" in r.stderr, r.stderr
