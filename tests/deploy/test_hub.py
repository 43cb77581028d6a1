"""The course on JupyterHub (deploy/): a real hub, two real learner accounts, each logs in, saves an answer and
runs `softmax-lab check` in their own server; neither can read the other's workspace; the limits hold.

Runs as root (it creates two accounts, `useradd`, and removes them after), with JupyterHub from the test extra and
configurable-http-proxy from npm (installed into .hub-proxy/ of this checkout when it is not on PATH). Screenshots
of both learners' JupyterLab go to test-output/hub/ when Chromium is there.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import jupyterhub  # noqa: F401 - the hub this test starts (python -m jupyterhub) must be installed
import pytest
import requests

from conftest import exercise_source

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OUT = ROOT / "test-output" / "hub"
PROXY_DIR = ROOT / ".hub-proxy"  # configurable-http-proxy from npm (ignored by git)
PROXY_VERSION = "5.3.0"
LEARNERS = ("sml-hub-ann", "sml-hub-bob")
MEM_LIMIT = 3 * 1024 ** 3

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("useradd"),
                                reason="the hub test creates two local accounts: it runs as root (as CI does)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proxy() -> str:
    found = shutil.which("configurable-http-proxy") or PROXY_DIR / "node_modules/.bin/configurable-http-proxy"
    if Path(found).exists():
        return str(found)
    if not shutil.which("npm"):
        pytest.skip("configurable-http-proxy is not on PATH and there is no npm to install it (apt install npm)")
    subprocess.run(["npm", "install", "--prefix", str(PROXY_DIR), "--no-audit", "--no-fund", "--loglevel=error",
                    f"configurable-http-proxy@{PROXY_VERSION}"], check=True, timeout=300)
    return str(PROXY_DIR / "node_modules/.bin/configurable-http-proxy")


def _closed_folders(*paths: Path) -> list[Path]:
    """Folders above ``paths`` that other accounts cannot enter (CI's Python lives under /root, mode 700)."""
    found = []
    for path in paths:
        for d in [path, *path.parents]:
            if d.is_dir() and not os.stat(d).st_mode & 0o001 and d not in found:
                found.append(d)
    return found


def _acl(entries: list[tuple[int, int, int]]) -> bytes:
    """A POSIX access ACL as the kernel stores it (version 2; tag, permissions, id per entry)."""
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


def _let_through(folders: list[Path], uids: list[int]) -> list[tuple[Path, int]]:
    """Let the test's learner accounts (only them) pass through ``folders``; returns what to restore.

    The learners' servers run the course's Python as their own accounts; where a folder above it is closed to other
    accounts, an ACL grants these two accounts search (x) permission for the test's duration, nothing else."""
    changed = []
    for d in folders:
        mode = os.stat(d).st_mode & 0o7777
        if "system.posix_acl_access" in os.listxattr(d):
            pytest.skip(f"{d} already has an ACL and other accounts cannot enter it: run the course from elsewhere")
        owner, group, other = (mode >> 6) & 7, (mode >> 3) & 7, mode & 7
        entries = [(0x01, owner, 0xFFFFFFFF)] + [(0x02, 1, uid) for uid in uids] + [
            (0x04, group, 0xFFFFFFFF), (0x10, group | 1, 0xFFFFFFFF), (0x20, other, 0xFFFFFFFF)]
        try:
            os.setxattr(d, "system.posix_acl_access", _acl(entries))
        except OSError as err:
            pytest.skip(f"{d} is closed to other accounts and takes no ACL ({err}): run the course from elsewhere")
        changed.append((d, mode))
    return changed


def _restore(changed: list[tuple[Path, int]]) -> None:
    for d, mode in changed:
        try:
            os.removexattr(d, "system.posix_acl_access")
        except OSError:
            pass
        os.chmod(d, mode)


def _groups(user: str) -> list[Path]:
    """The learner's cgroup folders (cgroup_spawner.py: v2, or v1's memory, cpu and pids hierarchies)."""
    top = Path("/sys/fs/cgroup")
    candidates = [top / "softmax-lab" / user] + [top / c / "softmax-lab" / user for c in ("memory", "cpu", "pids")]
    return [g for g in candidates if g.is_dir()]


def _remove_account(user: str) -> None:
    """Stop what the test started as ``user`` (the processes of its cgroups), then remove the account."""
    for group in _groups(user):
        for pid in (group / "cgroup.procs").read_text().split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
    time.sleep(0.5)
    subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)
    for group in _groups(user):
        try:
            group.rmdir()
        except OSError:
            pass


@pytest.fixture(scope="module")
def hub():
    venv = Path(sys.executable).parent.parent
    proxy = _proxy()
    with contextlib.ExitStack() as cleanup:
        base = Path(tempfile.mkdtemp(prefix="softmax-lab-hub-"))
        cleanup.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        (base / "home").mkdir(mode=0o755)
        tag = uuid.uuid4().hex[:6]
        users = [f"{name}{tag}"[:32] for name in LEARNERS]
        for user in users:
            subprocess.run(["useradd", "--create-home", "--home-dir", str(base / "home" / user), "--shell",
                            "/bin/bash", user], check=True)
            cleanup.callback(_remove_account, user)
        # The hub serves the class edition, as docs/hub.md installs it: no solutions/, no model answers.
        from softmax_lab.course.release import release

        course = base / "course"
        release(ROOT, course, allow_dirty=True, wheel=False, log=lambda *a: None)
        closed = _closed_folders(ROOT, venv.resolve(), Path(sys.executable).resolve(), Path(proxy).resolve())
        opened = []
        cleanup.callback(_restore, opened)
        opened += _let_through(closed, [pwd.getpwnam(u).pw_uid for u in users])

        port = _free_port()
        env = dict(os.environ, SOFTMAX_LAB_COURSE=str(course), SOFTMAX_LAB_VENV=str(venv),
                   SOFTMAX_LAB_HUB_STATE=str(base / "state"), SOFTMAX_LAB_MEM_LIMIT="3G",
                   SOFTMAX_LAB_CPU_LIMIT="1.5", SOFTMAX_LAB_ADMINS="",
                   PATH=f"{Path(proxy).parent}:{venv / 'bin'}:{os.environ['PATH']}")
        log = cleanup.enter_context(open(base / "hub.log", "w"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "jupyterhub", "-f", str(DEPLOY / "jupyterhub_config.py"), "--ip=127.0.0.1",
             f"--port={port}", f"--JupyterHub.hub_port={_free_port()}",
             f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{_free_port()}",
             f"--ConfigurableHTTPProxy.command={proxy}",
             "--JupyterHub.authenticator_class=dummy", "--DummyAuthenticator.password=class-of-2026"],
            cwd=base, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        cleanup.callback(_stop_hub, proc, base / "hub.log")
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/hub/api", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the hub did not start:\n{(base / 'hub.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield {"url": url, "users": users, "base": base, "log": base / "hub.log", "course": course}


def _stop_hub(proc, log: Path) -> None:
    proc.terminate()  # the hub stops the learners' servers as it exits
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(log, OUT / "hub.log")


class Learner:
    """One learner's browser-less session: log in through the hub, then its REST API and their Jupyter server's."""

    def __init__(self, hub, name):
        self.hub, self.name, self.url = hub, name, hub["url"]
        self.session = requests.Session()
        self.session.get(f"{self.url}/hub/login")
        r = self.session.post(f"{self.url}/hub/login?next=", data={
            "username": name, "password": "class-of-2026", "_xsrf": self.session.cookies.get("_xsrf")},
            allow_redirects=False)
        assert r.status_code == 302, f"login of {name}: {r.status_code} {r.text[:300]}"
        r = self.session.post(f"{self.url}/hub/api/users/{name}/tokens", json={"note": "hub test"},
                              headers={"X-XSRFToken": self.session.cookies.get("_xsrf")})
        assert r.status_code == 201, f"token for {name}: {r.status_code} {r.text[:300]}"
        self.token = r.json()["token"]
        self.api = requests.Session()
        self.api.headers["Authorization"] = f"token {self.token}"

    def start_server(self, timeout=120):
        self.request_server()
        return self.wait_for_server(timeout)

    def request_server(self):
        r = self.api.post(f"{self.url}/hub/api/users/{self.name}/server")
        assert r.status_code in (201, 202), f"start {self.name}: {r.status_code} {r.text[:300]}"

    def stop_server(self, timeout=60):
        r = self.api.delete(f"{self.url}/hub/api/users/{self.name}/server")
        assert r.status_code in (202, 204), f"stop {self.name}: {r.status_code} {r.text[:300]}"
        deadline = time.monotonic() + timeout
        while self.api.get(f"{self.url}/hub/api/users/{self.name}").json().get("servers"):
            assert time.monotonic() < deadline, f"{self.name}'s server did not stop in {timeout}s"
            time.sleep(0.5)

    def wait_for_server(self, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            model = self.api.get(f"{self.url}/hub/api/users/{self.name}").json()
            server = model.get("servers", {}).get("", {})
            if server.get("ready"):
                return server
            time.sleep(0.5)
        pytest.fail(f"{self.name}'s server did not start in {timeout}s:\n{self.hub['log'].read_text()[-3000:]}")

    def server(self, path):
        return f"{self.url}/user/{self.name}/api/{path}"

    def terminal(self, command: str, timeout=300):
        """Type ``command`` into a new JupyterLab terminal of this learner (awaitable: its status and output)."""
        name = self.api.post(self.server("terminals")).json()["name"]
        ws_url = f"{self.url}/user/{self.name}/terminals/websocket/{name}".replace("http", "ws", 1)
        return _terminal(ws_url, self.token, command, timeout)

    def run_in_terminal(self, command: str, timeout=300) -> tuple[int, str]:
        return asyncio.run(self.terminal(command, timeout))

    def run_in_kernel(self, code: str, timeout=120) -> str:
        """Run ``code`` in a new kernel (the one a notebook gets) of this learner; what it printed."""
        kernel = self.api.post(self.server("kernels"), json={}).json()
        ws_url = self.server(f"kernels/{kernel['id']}/channels").replace("http", "ws", 1)
        try:
            return asyncio.run(_kernel(ws_url, self.token, code, timeout)), kernel["name"]
        finally:
            self.api.delete(self.server(f"kernels/{kernel['id']}"))


async def _terminal(ws_url, token, command, timeout):
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))
    marker = uuid.uuid4().hex[:8]
    await ws.write_message(json.dumps(["stdin", f"{command}; echo END-{marker}-$?\r"]))
    text, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = await asyncio.wait_for(ws.read_message(), deadline - time.monotonic())
        if msg is None:
            break
        kind, *data = json.loads(msg)
        if kind == "stdout":
            text += data[0]
            done = [line for line in text.replace("\r", "").split("\n") if line.startswith(f"END-{marker}-")]
            if done and done[-1].split("-")[-1].strip().isdigit():
                ws.close()
                return int(done[-1].split("-")[-1]), text
    ws.close()
    pytest.fail(f"the terminal command did not finish in {timeout}s: {command}\n{text[-3000:]}")


async def _kernel(ws_url, token, code, timeout):
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    ws = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}))
    msg_id = uuid.uuid4().hex
    await ws.write_message(json.dumps({
        "header": {"msg_id": msg_id, "username": "", "session": uuid.uuid4().hex, "msg_type": "execute_request",
                   "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    text, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = json.loads(await asyncio.wait_for(ws.read_message(), deadline - time.monotonic()))
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text += msg["content"]["text"]
        elif msg["msg_type"] == "error":
            text += "\n".join(msg["content"]["traceback"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            ws.close()
            return text
    ws.close()
    pytest.fail(f"the kernel did not finish in {timeout}s: {code}\n{text}")


def _answer(notebook: dict) -> dict:
    """Chapter 0 with its exercise answered (the solution's cell), as a learner would save it."""
    for cell in notebook["cells"]:
        if "exercise:ch00-double" in cell["metadata"].get("tags", []):
            cell["source"] = exercise_source("ch00-double")
            return notebook
    raise AssertionError("chapter 0 has no exercise cell ch00-double")


def test_two_learners_work_and_check_in_their_own_workspaces(hub):
    ann, bob = (Learner(hub, name) for name in hub["users"])
    t0 = time.monotonic()
    for learner in (ann, bob):  # both at once, as a class logs in
        learner.request_server()
    for learner in (ann, bob):
        assert learner.wait_for_server()["url"] == f"/user/{learner.name}/"
    started = time.monotonic() - t0

    # The workspace: every chapter, filled on first login; chapter 0 is what JupyterLab opens first.
    listing = ann.api.get(ann.server("contents")).json()
    names = sorted(item["name"] for item in listing["content"])
    assert names == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")), names
    model = ann.api.get(f"{hub['url']}/hub/api/users/{ann.name}").json()
    location = ann.api.get(f"{hub['url']}/user/{ann.name}/", allow_redirects=False).headers["Location"]
    assert location.split("?")[0].endswith("/lab/tree/00_setup.ipynb"), model
    specs = ann.api.get(ann.server("kernelspecs")).json()
    assert specs["default"] == "softmax-lab" and list(specs["kernelspecs"]) == ["softmax-lab"]

    # Ann saves an answer through the contents API; Bob leaves his notebook blank.
    nb = ann.api.get(ann.server("contents/00_setup.ipynb")).json()["content"]
    r = ann.api.put(ann.server("contents/00_setup.ipynb"), json={"type": "notebook", "content": _answer(nb)})
    assert r.status_code == 200, r.text[:300]

    # The learner tools: the course's python and softmax-lab in the terminal and the notebook's kernel.
    venv_bin = str(Path(sys.executable).parent)
    rc, shown = ann.run_in_terminal("command -v softmax-lab python; pwd; cat /proc/self/cgroup")
    assert rc == 0 and f"{venv_bin}/softmax-lab" in shown and f"{venv_bin}/python" in shown, shown
    assert "softmax-lab/workspace" in shown and f"softmax-lab/{ann.name}" in shown, shown
    printed, kernel = ann.run_in_kernel("import shutil, sys; print(shutil.which('softmax-lab')); print(sys.prefix)")
    assert kernel == "softmax-lab" and f"{venv_bin}/softmax-lab" in printed, printed

    # The limits: ann's server (and what it starts) sits in her own cgroup(s) with the hub's memory and CPU caps.
    limits = {}
    for group in _groups(ann.name):
        for name in ("memory.max", "memory.limit_in_bytes", "cpu.max", "cpu.cfs_quota_us", "pids.max"):
            if (group / name).exists():
                limits[name] = (group / name).read_text().split()[0]
    assert int(limits.get("memory.max", limits.get("memory.limit_in_bytes", 0))) == MEM_LIMIT, limits
    assert int(limits.get("cpu.max", limits.get("cpu.cfs_quota_us", 0))) == 150_000, limits  # 1.5 CPUs of 100 ms
    assert int(limits["pids.max"]) > 0, limits

    # `softmax-lab check` in each learner's terminal: Ann's answer passes, Bob's blank exercise does not.
    t1 = time.monotonic()

    async def both():  # at the same time, as a class would
        return await asyncio.gather(ann.terminal("softmax-lab check 00_setup.ipynb"),
                                    bob.terminal("softmax-lab check 00_setup.ipynb"))

    (rc_ann, shown_ann), (rc_bob, shown_bob) = asyncio.run(both())
    checked = time.monotonic() - t1
    assert rc_ann == 0 and "ch00-double     1/1" in shown_ann, shown_ann[-3000:]
    assert rc_bob != 0 and "not implemented yet" in shown_bob, shown_bob[-3000:]

    # Neither can read the other's workspace: not through the hub, not from a terminal on the machine.
    assert ann.api.get(bob.server("contents/00_setup.ipynb")).status_code in (403, 404)
    bob_nb = hub["base"] / "home" / bob.name / "softmax-lab" / "workspace" / "00_setup.ipynb"
    assert bob_nb.exists()
    rc, shown = ann.run_in_terminal(f"cat {bob_nb} | head -c 100; ls {bob_nb.parent}")
    assert "Permission denied" in shown and '"cells"' not in shown, shown
    assert pwd.getpwuid(bob_nb.stat().st_uid).pw_name == bob.name

    # The instructor collects chapter 0 from the hub's workspaces into the layout `softmax-lab grade` reads.
    out = hub["base"] / "collected"
    r = subprocess.run([sys.executable, "-m", "softmax_lab.cli", "collect", "--out", str(out), "--chapter", "00",
                        "--workspaces", str(hub["base"] / "home" / "{learner}" / "softmax-lab" / "workspace"),
                        "--course", str(hub["course"])], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "collected 2 notebooks of 2 learners" in r.stdout, r.stdout + r.stderr
    assert "tl.store(out_ptr" in (out / ann.name / "00_setup.ipynb").read_text()
    assert (out / bob.name / "00_setup.ipynb").read_bytes() == bob_nb.read_bytes()

    print(f"\nhub: two servers started in {started:.1f}s; chapter 0 checked in {checked:.1f}s")
    _screenshots(hub, (ann, bob))


def _readable_by(user: str, top: Path) -> list[Path]:
    """Every file under ``top`` (links followed, as a learner's `grep -r` would) that ``user`` can open."""
    found = []
    for p in sorted(top.rglob("*")):
        if p.is_file() and subprocess.run(["runuser", "-u", user, "--", "test", "-r", str(p)]).returncode == 0:
            found.append(p)
    return found


def test_no_learner_can_read_a_model_answer(hub):
    """The reviewer's repro (grep ~/softmax-lab/solutions/01_* for the answer's `tl.store` line) and its general
    form: no file a learner can read in ~/softmax-lab or in the course the hub serves holds a line of a solution
    region, model answer or rubric (the search of tests/course/test_release.py), yet `softmax-lab check` works."""
    from softmax_lab.course import registry
    from softmax_lab.course.release import _normalised, answer_material, hint_text, package_text, texts

    ann = Learner(hub, hub["users"][0])
    if not ann.api.get(f"{hub['url']}/hub/api/users/{ann.name}").json().get("servers"):
        ann.start_server()
    rc, shown = ann.run_in_terminal("ls ~/softmax-lab/; ls ~/softmax-lab/solutions/01_*.ipynb")
    assert rc != 0 and "No such file or directory" in shown and "check-notebooks" in shown, shown
    assert "benchmarks" in shown, shown  # chapter 7's recorded runs (its load_record looks above the notebook)
    course = hub["course"]
    assert not (course / "solutions").exists()
    material = answer_material(ROOT / "solutions")
    given = package_text(course) + "\n" + hint_text(registry.load())
    searched = [m for m in material if m.line not in given]
    assert len(searched) > 100, "the search has too few answer lines to mean anything"
    home = hub["base"] / "home" / ann.name / "softmax-lab"
    tops = (course, home / "notebooks", home / "check-notebooks")
    readable = [p for top in tops for p in _readable_by(ann.name, top)]
    assert any(p.parent.name == "check-notebooks" for p in readable)
    found = []
    for path in readable:
        blob = "\n".join(_normalised(text) for _, text in texts(path.name, path.read_bytes()))
        for m in searched:  # a later chapter's notebook may show an earlier answer as given code (release's note)
            later = path.parent.name in ("notebooks", "check-notebooks") and path.name != m.notebook
            if m.line in blob and not later:
                found.append((str(path), m.source, m.line))
    assert not found, found[:10]


def test_a_second_login_never_overwrites_and_a_deleted_workspace_is_refilled(hub):
    ann, bob = (Learner(hub, name) for name in hub["users"])  # the first test left both servers running
    saved = ann.api.get(ann.server("contents/00_setup.ipynb")).json()["content"]
    assert any("tl.store(out_ptr" in "".join(c["source"]) for c in saved["cells"]), "ann's answer is not there"
    for learner in (ann, bob):
        learner.stop_server()
    shutil.rmtree(hub["base"] / "home" / bob.name / "softmax-lab" / "workspace")  # bob deletes his workspace
    for learner in (ann, bob):
        learner.request_server()
    for learner in (ann, bob):
        learner.wait_for_server()
    assert ann.api.get(ann.server("contents/00_setup.ipynb")).json()["content"] == saved, \
        "logging in again changed the learner's notebook"
    fresh = bob.api.get(bob.server("contents/00_setup.ipynb")).json()["content"]
    blank = json.loads((ROOT / "notebooks/00_setup.ipynb").read_text())
    assert [c["source"] for c in fresh["cells"]] == ["".join(c["source"]) for c in blank["cells"]]
    assert f"{bob.name}/softmax-lab/workspace was deleted: filling a fresh one" in hub["log"].read_text()


def test_the_kubernetes_values_make_the_same_choices_as_the_config():
    """values.yaml (Zero to JupyterHub) cannot run here; it must at least say what jupyterhub_config.py says."""
    import yaml

    values = yaml.safe_load((DEPLOY / "values.yaml").read_text())
    single = values["singleuser"]
    config = (DEPLOY / "jupyterhub_config.py").read_text()
    course = single["extraEnv"]["SOFTMAX_LAB_COURSE"]
    assert single["cmd"] == f"{course}/deploy/start-learner" and (DEPLOY / "start-learner").exists()
    assert f'c.Spawner.default_url = "{single["defaultUrl"]}"' in config
    assert single["cpu"]["limit"] and single["memory"]["limit"].endswith("G")
    assert single["storage"]["type"] == "dynamic"  # a volume per learner: nobody else mounts it
    assert f"ENV HOME=/home/jovyan SOFTMAX_LAB_COURSE={course}" in (DEPLOY / "Dockerfile").read_text()
    assert single["storage"]["homeMountPath"] == "/home/jovyan"


def _screenshots(hub, learners):
    """Each learner's JupyterLab after logging in through the hub's login page, and the hub's page with their name
    (test-output/hub/learner-N-lab.png, learner-N-hub.png)."""
    import chromium

    if chromium.install():
        return  # no browser here: the screenshots are a record, not a check
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium.CHROMIUM, args=chromium.ARGS)
        for n, learner in enumerate(learners):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{hub['url']}/hub/login")
            page.fill("#username_input", learner.name)
            page.fill("#password_input", "class-of-2026")
            page.click("#login_submit")
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_timeout(1500)
            page.screenshot(path=str(OUT / f"learner-{n + 1}-lab.png"))
            page.goto(f"{hub['url']}/hub/home")  # the hub's page, with the learner's name
            page.screenshot(path=str(OUT / f"learner-{n + 1}-hub.png"))
            page.close()
        browser.close()


def test_start_learner_refuses_the_source_edition(tmp_path):
    """The source edition (this checkout, with solutions/) would let every learner read the model answers: the
    learner's server does not start on it, and says what to serve instead."""
    env = dict(os.environ, HOME=str(tmp_path), SOFTMAX_LAB_COURSE=str(ROOT),
               SOFTMAX_LAB_VENV=str(Path(sys.executable).parent.parent))
    r = subprocess.run([str(DEPLOY / "start-learner")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "source edition" in r.stderr and "softmax-lab release" in r.stderr, r.stderr
    assert not (tmp_path / "softmax-lab").exists()


def test_start_learner_says_when_the_venvs_python_cannot_run_as_the_learner(tmp_path):
    """A class edition's venv made from a pyenv Python in root's home: its bin/python exists but no learner can run
    it; start-learner said "is missing" and the hub waited 120 s (helper-74). It names the link and the fix."""
    course, venv, home = tmp_path / "course", tmp_path / "venv", tmp_path / "home"
    for d in (course / "notebooks", course / "check-notebooks", venv / "bin", home):
        d.mkdir(parents=True)
    target = tmp_path / "root-only" / "python3"
    target.parent.mkdir()
    target.write_text("not a program\n")  # (no execute bit: as unrunnable for root as a mode-700 home for a learner)
    (venv / "bin" / "python").symlink_to(target)
    (venv / "pyvenv.cfg").write_text(f"home = {target.parent}\ninclude-system-site-packages = false\n")
    env = dict(os.environ, HOME=str(home), SOFTMAX_LAB_COURSE=str(course), SOFTMAX_LAB_VENV=str(venv))
    r = subprocess.run([str(DEPLOY / "start-learner")], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot run as" in r.stderr and f"made from {target.parent})" in r.stderr, r.stderr
    assert "PYTHON=/usr/bin/python3" in r.stderr, r.stderr
    assert "missing" not in r.stderr
