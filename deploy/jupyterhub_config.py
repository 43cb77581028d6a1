"""JupyterHub for a class taking Softmax Lab, on one machine (`jupyterhub -f deploy/jupyterhub_config.py`, as root).

Each learner logs in with their own account and gets ~/softmax-lab/workspace, filled from the class edition on their
first login and never overwritten later (start-learner runs `softmax-lab workspace`), JupyterLab opened on chapter 0
with the course kernel only, the course's tools (python, softmax-lab) first on PATH in notebooks and terminals, and
a CPU and memory limit (a cgroup per learner: cgroup_spawner.py). docs/hub.md is the instructor's guide; the
Zero-to-JupyterHub (Kubernetes) version of the same choices is values.yaml beside this file.

Settings come from the environment, so this file stays as it is:
  SOFTMAX_LAB_COURSE     the class edition: a course checkout with its .venv (default /opt/softmax-lab)
  SOFTMAX_LAB_VENV       the course's environment (default $SOFTMAX_LAB_COURSE/.venv)
  SOFTMAX_LAB_MEM_LIMIT  memory per learner (default 4G)      SOFTMAX_LAB_CPU_LIMIT  CPUs per learner (default 2)
  SOFTMAX_LAB_ADMINS     instructors' accounts, comma-separated (they may open learners' servers)
  SOFTMAX_LAB_HUB_STATE  the hub's database and cookie secret (default /var/lib/softmax-lab-hub)
"""
import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - JupyterHub defines get_config() in the namespace it runs this file in

HERE = Path(__file__).resolve().parent
COURSE = Path(os.environ.get("SOFTMAX_LAB_COURSE", "/opt/softmax-lab"))
VENV = Path(os.environ.get("SOFTMAX_LAB_VENV", COURSE / ".venv"))

# Learners: the machine's own accounts (PAM). Each server runs as its learner, so the workspaces are separate
# home folders that no other learner can read (start-learner creates them private).
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allow_all = True  # every account of this machine; set c.Authenticator.allowed_users to narrow it
c.Authenticator.admin_users = {u.strip() for u in os.environ.get("SOFTMAX_LAB_ADMINS", "").split(",") if u.strip()}
c.LocalAuthenticator.create_system_users = False

# One server per learner, held to its limits.
sys.path.insert(0, str(HERE))
c.JupyterHub.spawner_class = "cgroup_spawner.CgroupSpawner"
c.Spawner.mem_limit = os.environ.get("SOFTMAX_LAB_MEM_LIMIT", "4G")
c.Spawner.cpu_limit = float(os.environ.get("SOFTMAX_LAB_CPU_LIMIT", "2"))
c.Spawner.cmd = [str(HERE / "start-learner")]
c.Spawner.default_url = "/lab/tree/00_setup.ipynb"  # chapter 0 first
c.Spawner.environment = {
    "SOFTMAX_LAB_COURSE": str(COURSE),
    "SOFTMAX_LAB_VENV": str(VENV),
    "PATH": f"{VENV / 'bin'}:/usr/local/bin:/usr/bin:/bin",  # the course's python and softmax-lab first
    "VIRTUAL_ENV": str(VENV),
}
c.Spawner.http_timeout = 120  # the first start of a server imports JupyterLab from a cold disk
c.Spawner.start_timeout = 120

# The hub keeps its database and cookie secret in its own folder, not in the course checkout.
state = Path(os.environ.get("SOFTMAX_LAB_HUB_STATE", "/var/lib/softmax-lab-hub"))
state.mkdir(mode=0o700, parents=True, exist_ok=True)
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
