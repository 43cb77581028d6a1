"""`make lab` for learners: your own workspace, and JupyterLab opened on chapter 0.

    softmax-lab workspace            # copy the chapters you do not have yet into workspace/ (never overwrites)
    softmax-lab workspace --update   # a chapter changed since you copied it: put the new version beside yours
    softmax-lab lab [--port 8888]    # the above, then JupyterLab on workspace/ (what `make lab` runs)

You work in ``workspace/``, which git does not track: nothing (``make notebooks``, ``softmax-lab build``,
``make test``, ``git pull``) ever writes over a notebook there. ``notebooks/`` holds the course's blank copies.
``workspace/.softmax-lab.json`` remembers which version of each chapter you were given, so that
``softmax-lab doctor`` can tell you when the course has changed one since.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shlex
import shutil
import socket
import sys
import time
from pathlib import Path

STATE = ".softmax-lab.json"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _state(workspace: Path) -> dict:
    try:
        return json.loads((workspace / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _save_state(workspace: Path, state: dict) -> None:
    tmp = workspace / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(workspace / STATE)


def sync(root: Path, log=print) -> list[str]:
    """Copy each chapter of ``root/notebooks`` that ``root/workspace`` lacks. Returns the names copied.

    A chapter in notebooks/ that somebody edited by hand (the old way of working) is copied as it is, edits
    included, so moving to workspace/ loses nothing."""
    from .course.notebook import edited_by_hand

    notebooks, workspace = root / "notebooks", root / "workspace"
    workspace.mkdir(exist_ok=True)
    state = _state(workspace)
    copied = []
    for src in sorted(notebooks.glob("*.ipynb")):
        dst = workspace / src.name
        if dst.exists():
            continue
        data = src.read_bytes()
        dst.write_bytes(data)
        edited = edited_by_hand(data.decode("utf-8", errors="surrogateescape"))
        state[src.name] = {"sha": _sha(src)}
        copied.append(src.name)
        log(f"workspace/{src.name}: copied" + (" (with the edits found in notebooks/)" if edited else ""))
    _save_state(workspace, state)
    return copied


def changed(root: Path) -> list[str]:
    """Chapters whose course version changed since they were copied into (or last offered to) workspace/, and
    that the learner's copy is not already a version of (a change rolled back: its build fingerprint matches)."""
    workspace = root / "workspace"
    if not workspace.is_dir():
        return []
    state = _state(workspace)
    out = []
    for src in sorted((root / "notebooks").glob("*.ipynb")):
        given = state.get(src.name, {}).get("sha")
        mine = workspace / src.name
        if mine.exists() and given is not None and given != _sha(src) and not _same_build(mine, src):
            out.append(src.name)
    return out


def _same_build(mine: Path, src: Path) -> bool:
    """Whether the learner's copy came from the build ``src`` is (``softmax_lab.learner_sha``, which their edits
    leave alone); False when either does not say."""
    def fingerprint(path):
        try:
            return json.loads(path.read_text(encoding="utf-8"))["metadata"]["softmax_lab"]["learner_sha"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    theirs = fingerprint(mine)
    return theirs is not None and theirs == fingerprint(src)


def update(root: Path, log=print) -> list[str]:
    """Write each changed chapter's new version beside the learner's copy (``NAME.new.ipynb``); the learner's own
    file stays as it is. Returns the paths written."""
    workspace = root / "workspace"
    state = _state(workspace)
    written = []
    for name in changed(root):
        src = root / "notebooks" / name
        sha = _sha(src)
        dst = workspace / f"{Path(name).stem}.new-{sha[:8]}.ipynb"
        if not dst.exists():
            dst.write_bytes(src.read_bytes())
        state[name] = {"sha": sha}
        written.append(dst.name)
        log(f"workspace/{dst.name}: the new version of {name} (yours is unchanged)")
    _save_state(workspace, state)
    return written


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def terminal_rc() -> Path:
    """The start-up file of JupyterLab's terminal: the learner's usual bash setup, then this venv first on PATH
    (a login shell or ~/.bashrc would otherwise put another python, pip and softmax-lab first)."""
    venv = Path(sys.executable).parent.parent
    rc = venv / "etc" / "softmax-lab" / "terminal-bashrc"
    rc.parent.mkdir(parents=True, exist_ok=True)
    rc.write_text("# Written by `softmax-lab lab`: JupyterLab's terminal runs bash with this file.\n"
                  "[ -f /etc/bash.bashrc ] && . /etc/bash.bashrc\n"
                  "[ -f ~/.bashrc ] && . ~/.bashrc\n"
                  f"export VIRTUAL_ENV={shlex.quote(str(venv))}\n"
                  'export PATH="$VIRTUAL_ENV/bin:$PATH"\n', encoding="utf-8")
    return rc


# Widget state saved in the notebook (JupyterLab's ipywidgets manager): a reopened notebook shows each picture of
# its steppers and explorers instead of "Error displaying widget: model not found".
WIDGET_SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}


def widget_settings() -> Path:
    """Write WIDGET_SETTINGS as this environment's JupyterLab default (``overrides.d``, beside JupyterLab's own
    settings; a learner's own choice in Settings still wins). Returns the file."""
    app_dir = Path(os.environ.get("JUPYTERLAB_DIR") or Path(sys.prefix) / "share" / "jupyter" / "lab")
    path = app_dir / "settings" / "overrides.d" / "softmax-lab.json"
    text = json.dumps(WIDGET_SETTINGS, indent=1) + "\n"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return path


def jupyter_command(root: Path, port: int, open_browser: bool) -> list[str]:
    """The JupyterLab command `make lab` runs: workspace/ as the root, chapter 0 open, the course kernel only."""
    bash = shutil.which("bash")
    shell = {"shell_command": [bash, "--rcfile", str(terminal_rc()), "-i"]}
    terminal = [f"--ServerApp.terminado_settings={json.dumps(shell)}"] if bash else []
    cmd = [sys.executable, "-m", "jupyterlab", *terminal, f"--ServerApp.root_dir={root / 'workspace'}",
           "--LabApp.default_url=/lab/tree/00_setup.ipynb", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0",
           "--ServerApp.log_level=WARN", "--LabApp.log_level=WARN",  # quiet: the address, boxed, comes last
           "--KernelSpecManager.ensure_native_kernel=False", "--KernelSpecManager.allowed_kernelspecs=softmax-lab",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           # every save keeps the hint levels a learner has seen in the notebook's metadata (softmax_lab.hints)
           "--ContentsManager.pre_save_hook=softmax_lab.hints.save_hook"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    if not open_browser:
        cmd.append("--no-browser")
    return cmd


def lab_environment(workspace: Path | None = None) -> dict:
    """The server's environment: this venv's commands first on PATH, so `!softmax-lab`, `!pip` and the
    JupyterLab terminal use the course's environment; ``PWD``: the folder the server starts in (``workspace``);
    ``JUPYTER_TOKEN``: the learner's own, else a new one (the address `make lab` prints carries it)."""
    env = dict(os.environ)
    env.setdefault("JUPYTER_TOKEN", secrets.token_hex(24))
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(Path(sys.executable).parent.parent)
    if workspace is not None:
        env["PWD"] = str(workspace)
    return env


def address_box(url: str) -> str:
    """The address, boxed, with what to do with it: the last thing `make lab` prints."""
    lines = ["Softmax Lab is ready. Open this address in your browser:", "", url, "",
             "Your notebooks are in workspace/. Ctrl+C here stops JupyterLab (your saved work stays)."]
    width = max(map(len, lines))
    return "\n".join(["+" + "-" * (width + 2) + "+", *(f"| {ln:<{width}} |" for ln in lines),
                      "+" + "-" * (width + 2) + "+"])


def announce_when_serving(url: str, port: int, timeout: float = 300) -> None:
    """Print ``address_box(url)`` once the server on ``port`` answers, from a detached process, so that this one
    can become JupyterLab itself (Ctrl+C and signals then reach it directly). Quiet if the server never answers
    or this process ends first."""
    server = os.getpid()
    if os.fork():
        os.wait()  # the first child only forks the announcer and exits: nothing is left to reap later
        return
    if os.fork():
        os._exit(0)
    try:
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(server, 0)
            except OSError:  # JupyterLab exited (a port taken after all, a bad option): it said why
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api", timeout=2):
                    pass
            except OSError:
                time.sleep(0.3)
                continue
            print("\n" + address_box(url), flush=True)
            break
    finally:
        os._exit(0)


def has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform == "darwin"


def _root(given: Path | None, command: str) -> Path | None:
    """The checkout (given, or found from cwd); None after printing why not."""
    from .course.notebook import BuildError, repo_root

    try:
        return given or repo_root(learner=True)
    except BuildError as err:
        print(f"softmax-lab {command}: {err}", file=sys.stderr)
        return None
    except FileNotFoundError:  # the current folder was deleted (a workspace removed while its terminal was open)
        print(f"softmax-lab {command}: the folder you are in no longer exists: `cd` to the course folder and run it "
              "again", file=sys.stderr)
        return None


def _tell_changed(root: Path) -> None:
    for name in changed(root):
        print(f"workspace/{name}: the course changed this chapter since you copied it; "
              "`softmax-lab workspace --update` puts the new version beside yours", file=sys.stderr)


def add_workspace_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--update", action="store_true",
                    help="for chapters the course changed since you copied them, put the new version beside yours")
    ap.add_argument("--root", type=Path, default=None, help="the course checkout (default: found from cwd)")


def run_workspace(args: argparse.Namespace) -> int:
    root = _root(args.root, "workspace")
    if root is None:
        return 2
    sync(root)
    if args.update:
        if not update(root):
            print("softmax-lab workspace: no chapter changed since you copied it: nothing to update")
    else:
        _tell_changed(root)
    return 0


def add_lab_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--port", type=int, default=8888)
    ap.add_argument("--root", type=Path, default=None, help="the course checkout (default: found from cwd)")
    ap.add_argument("--no-browser", action="store_true", help="only print the address (default without a display)")
    ap.add_argument("jupyter_args", nargs=argparse.REMAINDER,
                    help="after --: more JupyterLab options, e.g. -- --ServerApp.ip=0.0.0.0")


def run_lab(args: argparse.Namespace) -> int:
    root = _root(args.root, "lab")
    if root is None:
        return 2
    if not 0 < args.port < 65536:
        print(f"softmax-lab lab: port {args.port} is not a TCP port (1-65535)", file=sys.stderr)
        return 2
    if not port_free(args.port):
        print(f"softmax-lab lab: port {args.port} is already in use (another JupyterLab?): "
              f"make lab PORT={args.port + 1}", file=sys.stderr)
        return 1
    sync(root)
    _tell_changed(root)
    try:
        widget_settings()
    except OSError as err:  # a read-only environment: pictures then come back only where a widget state was saved
        print(f"softmax-lab lab: could not write the widget setting ({err}); pictures may not survive a reopen",
              file=sys.stderr)
    cmd = jupyter_command(root, args.port, open_browser=has_display() and not args.no_browser)
    cmd += [a for a in args.jupyter_args if a != "--"]
    env = lab_environment(root / "workspace")
    print(f"softmax-lab lab: starting JupyterLab on port {args.port} (the address follows in a box) ...", flush=True)
    first = "/tree/00_setup.ipynb" if (root / "workspace" / "00_setup.ipynb").is_file() else ""  # chapter 0 first
    announce_when_serving(f"http://localhost:{args.port}/lab{first}?token={env['JUPYTER_TOKEN']}", args.port)
    # The server starts in workspace/: a new JupyterLab terminal opens where the server runs, so
    # `softmax-lab check 02_masks_and_padding.ipynb` there finds the notebook the file browser shows.
    os.chdir(root / "workspace")
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached
