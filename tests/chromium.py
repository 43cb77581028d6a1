"""Debian's Chromium for the browser checks outside tests/ui (the web edition, the hub's screenshots).

Same way as tests/ui/conftest.py: /usr/bin/chromium, installed with apt-get when missing and we are root (Playwright's
own browser download is never used); one install at a time when pytest-xdist runs tests side by side.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def install() -> str:
    """'' when /usr/bin/chromium is there (installed now if need be), else why not."""
    if Path(CHROMIUM).exists():
        return ""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return f"{CHROMIUM} is missing: sudo apt-get install -y chromium"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open("/tmp/softmax-lab-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for first in ([], ["apt-get", "update"]):  # a bare CI image may need the package lists first
            if Path(CHROMIUM).exists():
                break
            if first:
                subprocess.run(first, env=env, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "chromium", "fonts-liberation"],
                           env=env, capture_output=True)
    return "" if Path(CHROMIUM).exists() else f"{CHROMIUM} is missing and apt-get could not install it"
