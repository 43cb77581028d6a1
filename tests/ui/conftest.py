"""Fixtures for the browser test: Chromium, a JupyterLab server on a loopback port, and a page driver.

JupyterLab runs from this project's .venv in a temporary copy of solutions/, notebooks/ and the UI fixtures, so
running cells never writes outputs into the repository. The browser is Debian's /usr/bin/chromium (installed with
apt-get when missing and we are root; Playwright's own browser download is never used). Every request the page
makes to a host other than 127.0.0.1/localhost is blocked and recorded, so widgets must render offline.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from jlab import FIXTURES, OUT, ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}
KERNEL = "softmax-lab"

# JupyterLab user settings for the test server: every cell attached to the DOM (the default windowing can leave
# off-screen cells out), no news or update checks (they would reach the internet).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
    # what `make lab` sets (softmax_lab.lab.WIDGET_SETTINGS): widget state saved, so pictures survive a reopen
    "@jupyter-widgets/jupyterlab-manager/plugin.jupyterlab-settings": {"saveState": True},
}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


# ---------------------------------------------------------------------------------------------- chromium


def _install_chromium() -> str:
    """Returns '' when /usr/bin/chromium is there (installing it as root if needed), else why not."""
    if Path(CHROMIUM).exists():
        return ""
    if os.geteuid() != 0:
        return f"{CHROMIUM} is missing and we are not root: run `sudo apt-get install -y chromium`"
    if not shutil.which("apt-get"):
        return f"{CHROMIUM} is missing and there is no apt-get to install it"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "fonts-liberation"]
    log = []
    for attempt in ([], ["apt-get", "update"]):  # a bare CI image may need the package lists first
        if attempt:
            r = subprocess.run(attempt, env=env, capture_output=True, text=True)
            log.append(r.stdout[-2000:] + r.stderr[-2000:])
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        log.append(r.stdout[-2000:] + r.stderr[-2000:])
        if r.returncode == 0 and Path(CHROMIUM).exists():
            return ""
    pytest.fail(f"could not install chromium with apt-get:\n{''.join(log)[-3000:]}", pytrace=False)


@pytest.fixture(scope="session")
def chromium() -> str:
    reason = _install_chromium()
    if reason:
        pytest.skip(reason)
    return CHROMIUM


@pytest.fixture(scope="session")
def browser(chromium):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# ---------------------------------------------------------------------------------------------- JupyterLab


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """A running JupyterLab: base URL, token, the folder it serves, and a small REST helper."""

    def __init__(self, root: Path, port: int, token: str, proc: subprocess.Popen, log: Path):
        self.root, self.port, self.token, self.proc, self.log = root, port, token, proc, log
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base}{path}{sep}token={self.token}"

    def api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
            return json.loads(body) if body else None

    def wait_serving(self, timeout: float) -> bool:
        """True once the server answers; False when it exits or the timeout passes first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                self.api("GET", "/api/status")
                return True
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.3)
        return False

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def shutdown_kernels(self) -> None:
        """Stop every kernel so the next notebook gets the CPU (2 cores on CI)."""
        try:
            for s in self.api("GET", "/api/sessions") or []:
                self.api("DELETE", f"/api/sessions/{s['id']}")
        except (urllib.error.URLError, OSError):
            pass


def _copy_tree(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))


def _ensure_kernelspec(venv_python: Path) -> None:
    """The notebooks ask for the 'softmax-lab' kernel; `make` registers it, but be sure (else a dialog pops up)."""
    r = subprocess.run([str(venv_python), "-m", "jupyter", "kernelspec", "list", "--json"],
                       capture_output=True, text=True)
    try:
        if KERNEL in json.loads(r.stdout)["kernelspecs"]:
            return
    except (ValueError, KeyError):
        pass
    subprocess.run([str(venv_python), "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL,
                    "--display-name", "Softmax Lab (Python 3)"], check=True, capture_output=True)


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> LabServer:
    venv = ROOT / ".venv" / "bin"
    python = venv / "python" if (venv / "python").exists() else Path(sys.executable)
    jupyter_bin = python.parent
    _ensure_kernelspec(python)

    root = tmp_path_factory.mktemp("lab")
    for name in ("solutions", "notebooks"):
        _copy_tree(ROOT / name, root / name)
    _copy_tree(FIXTURES, root / "fixtures")
    home = tmp_path_factory.mktemp("jupyter-home")
    settings = home / "lab-settings"
    for rel, value in LAB_SETTINGS.items():
        path = settings / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))

    env = dict(os.environ,
               JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               PYTHONUNBUFFERED="1")
    env["PATH"] = f"{jupyter_bin}{os.pathsep}{env.get('PATH', '')}"
    token = secrets.token_hex(16)
    OUT.mkdir(parents=True, exist_ok=True)
    for old in [*OUT.glob("*.png"), OUT / "timings.log"]:  # this run's files only
        old.unlink(missing_ok=True)
    log = OUT / "jupyterlab.log"

    last_error = ""
    for _ in range(3):  # the free port could be taken between asking and binding: try another
        port = _free_port()
        cmd = [str(python), "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly",
               "--ServerApp.terminals_enabled=False"]
        if os.geteuid() == 0:
            cmd.append("--allow-root")
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        server = LabServer(root, port, token, proc, log)
        if server.wait_serving(90):
            break
        last_error = server.log_tail()
        _stop(proc)
    else:
        pytest.fail(f"JupyterLab did not start; log {log}:\n{last_error}", pytrace=False)

    try:
        yield server
    finally:
        try:
            server.api("POST", "/api/shutdown")  # also stops the kernels
            proc.wait(timeout=15)
        except (urllib.error.URLError, OSError, subprocess.TimeoutExpired):
            pass
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------------- page driver


@pytest.fixture
def page(browser, lab, request):
    """A fresh browser context and page; non-loopback requests are blocked and listed in page.external."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, service_workers="block")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=lab.base)
    external: list[str] = []

    def route(r):
        host = urlsplit(r.request.url).hostname or ""
        if r.request.url.startswith(("data:", "blob:")) or host in LOOPBACK:
            r.continue_()
        else:
            external.append(r.request.url)
            r.abort("internetdisconnected")

    context.route("**/*", route)
    pg = context.new_page()

    def on_ws(ws):
        if (urlsplit(ws.url).hostname or "") not in LOOPBACK:
            external.append(ws.url)

    pg.on("websocket", on_ws)
    pg.external = external
    pg.console_errors = []
    pg.on("console", lambda m: pg.console_errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.console_errors.append(f"pageerror: {e}"))
    try:
        yield pg
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed and "screenshot:" not in str(rep.longrepr):
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            try:
                pg.screenshot(path=str(OUT / f"FAILED-{name}.png"))
            except Exception:
                pass
        context.close()
        lab.shutdown_kernels()
