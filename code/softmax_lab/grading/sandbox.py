"""The sandbox every submission runs in: Debian's bubblewrap (`bwrap`), one fresh sandbox per run.

    bwrap --die-with-parent --new-session --unshare-user --uid 1000 --unshare-pid --unshare-net --unshare-ipc \\
          --ro-bind /usr /usr ... --ro-bind ETC /etc --size N --tmpfs /tmp --ro-bind SCRATCH/in /grader ... \\
          -- sh -c 'ulimit -d ...' python ...

Inside it the learner's code sees:

* read-only: the system (``/usr``), a synthetic ``/etc`` (a user ``learner``, localhost, the loader's cache:
  nothing of the host's own, no keys, no password hashes), Python and the virtual environment, and a copy of
  the ``softmax_lab`` package (only the package: not the course checkout, not ``solutions/``);
* read-only ``/grader``: what the grader put there for this run (the notebook to run, nbval's config);
* writable: a private ``/tmp`` and ``/dev/shm`` (tmpfs, each size-capped; the kernel's working directory and
  ``HOME``). Nothing writable is a host folder: results come back on pipes the grader reads with caps;
* no network (only its own loopback), its own user (uid 1000, no capabilities), PID, IPC and hostname
  namespaces (``--die-with-parent``: when the run ends or the grader dies, every process in it dies), and a
  minimal environment (no instructor variables);
* on a GPU machine: the ``/dev/nvidia*`` device nodes, ``/sys`` read-only, and the driver's library folders
  read-only (wherever ``LD_LIBRARY_PATH``, ``TRITON_LIBCUDA_PATH`` or the loader's cache find ``libcuda``).

Memory, tasks and CPU are capped by the kernel through a cgroup per run (``cgroup.py``). What the sandbox does
not stop is written in docs/grading.md ("Threat model").
"""
from __future__ import annotations

import os
import atexit
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # .../softmax_lab
INSIDE_PACKAGE_ROOT = "/opt/softmax-lab"        # the package appears as /opt/softmax-lab/softmax_lab
APT_PACKAGE = "bubblewrap"
SCRATCH_PREFIX = "softmax-lab-grade-"
UID = 1000  # the learner's user inside (root outside when the grader runs as root, without its capabilities)


class SandboxMissing(RuntimeError):
    """bwrap is not installed (or does not work here)."""


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def missing_message() -> str:
    return (f"the grader runs every submission in a bubblewrap sandbox, but `bwrap` is not installed: install "
            f"Debian's package `{APT_PACKAGE}` (apt-get install -y {APT_PACKAGE}; Fedora/Arch: the same name), "
            "or pass --unsafe-no-sandbox to grade without isolation (only for notebooks you trust; the gradebook "
            "records it)")


_WORKS: dict[str, str] = {}
USERNS: dict[str, bool] = {}  # bwrap -> whether it can give the sandbox a user namespace (a non-root uid)


def _try(exe: str, extra: list[str]) -> str:
    cmd = [exe, "--die-with-parent", *extra, "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/",
           "--proc", "/proc", "true"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return "" if p.returncode == 0 else (p.stderr.strip() or f"exit status {p.returncode}")
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)


def check_works() -> None:
    """Raise SandboxMissing when bwrap is missing or cannot create its namespaces here (checked once)."""
    exe = bwrap_path()
    if exe is None:
        raise SandboxMissing(missing_message())
    if exe not in _WORKS:
        USERNS[exe] = not _try(exe, ["--unshare-user", "--uid", str(UID), "--gid", str(UID)])
        _WORKS[exe] = "" if USERNS[exe] else _try(exe, [])
    if _WORKS[exe]:
        raise SandboxMissing(f"bwrap is installed but cannot create a sandbox here ({_WORKS[exe][:300]}); it needs "
                             "user namespaces or root. Pass --unsafe-no-sandbox to grade without isolation.")


def _checkout() -> Path | None:
    """The course checkout the package runs from (editable install: CHECKOUT/code/softmax_lab), else None."""
    return PACKAGE.parents[1] if PACKAGE.parent.name == "code" else None


def python() -> str:
    """This Python, as a path that means the same inside the sandbox: ``sys.executable`` without ``..`` or ``.``
    (``../.venv/bin/python`` started from a folder the sandbox does not bind would not be found there); symlinks
    are kept, so a venv's python stays the venv's."""
    return os.path.abspath(sys.executable)


def _python_dirs() -> list[str]:
    """Directories Python needs (interpreter, standard library, site-packages), never the course checkout:
    sys.path entries inside it (code/, tests/ ...) are left out; a venv inside it (.venv) is bound alone."""
    checkout = _checkout()
    pythons = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.realpath(sys.exec_prefix),
               os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    dirs = set(pythons)
    for p in sys.path:
        if p and os.path.isdir(p):
            dirs.add(os.path.realpath(p))
    out = []
    for d in sorted(dirs):
        if d in ("/", "/usr", "/tmp") or d.startswith(("/usr/", "/proc", "/dev")):
            continue
        real = Path(d)
        if (real == PACKAGE or PACKAGE in real.parents
                or (real in PACKAGE.parents and not _python_own(real, d in pythons))):
            continue  # the package (bound on its own) or a folder in it, or one holding it other than Python's own
            # (a wheel lies in the venv's site-packages, beside nbval and torch: bound, the package hidden there)
        if checkout is not None and (real == checkout or real in checkout.parents or
                                     (checkout in real.parents and d not in pythons)):
            continue  # the checkout, a folder holding it, or something inside it other than the venv
        out.append(d)
    # only the outermost of nested directories
    return [d for d in out if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in out)]


def _python_own(folder: Path, is_prefix: bool) -> bool:
    """Whether ``folder``, holding the package, is Python's own: a prefix (the venv) or site-packages, and not a
    course folder itself (a venv made in the checkout's root)."""
    own = is_prefix or (folder == PACKAGE.parent and folder.name in ("site-packages", "dist-packages"))
    return own and not (folder / "solutions").is_dir()


def _hidden(args: list[str]) -> list[str]:
    """Every copy of softmax_lab on Python's path (this package included), and a checkout under a bound folder
    (``/usr/src/...``), where the binds in ``args`` bring them into the sandbox: paths to cover with an empty,
    read-only tmpfs (a judge run must have no check helper to call, a notebook run only /opt's copy)."""
    targets = {PACKAGE} | {Path(p).resolve() / "softmax_lab" for p in sys.path
                           if p and os.path.isdir(os.path.join(p, "softmax_lab"))}
    checkout = _checkout()
    if checkout is not None:
        targets.add(checkout)
    binds = [(Path(args[k + 1]).resolve(), args[k + 2]) for k, a in enumerate(args)
             if a in ("--ro-bind", "--bind", "--dev-bind") and k + 2 < len(args)]
    out = []
    for target in sorted(targets):
        for src, dst in binds:
            if src == target or src in target.parents:
                out.append(os.path.join(dst, os.path.relpath(target, src)))
    return sorted(set(out))


def _venv_binds() -> list[str]:
    args = []
    for d in _python_dirs():
        args += ["--ro-bind", d, d]
    # sys.executable may be a symlink inside the venv pointing elsewhere; bind its parent too
    exe = os.path.realpath(sys.executable)
    if not any(exe.startswith(d.rstrip("/") + "/") for d in _python_dirs()) and not exe.startswith("/usr/"):
        args += ["--ro-bind", os.path.dirname(exe), os.path.dirname(exe)]
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    venv = os.path.dirname(venv_bin)
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")) and os.path.realpath(venv) != venv:
        # a venv reached through a symbolic link (CHECKOUT/.venv -> elsewhere): Python finds pyvenv.cfg, and so
        # its site-packages, next to the path it was started by
        args += ["--ro-bind", os.path.realpath(venv), venv]
    elif not any(venv_bin.startswith(d.rstrip("/") + "/") for d in _python_dirs()) and not venv_bin.startswith("/usr/"):
        args += ["--ro-bind", venv_bin, venv_bin]
    return args


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    args += ["--ro-bind", str(synthetic_etc()), "/etc"]
    return args


# ------------------------------------------------------------------------------------------ a synthetic /etc

_ETC: dict[str, Path] = {}
_ETC_LOCK = threading.Lock()
ETC_FILES = {
    "passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nlearner:x:{UID}:{UID}:learner:/tmp/home:/bin/sh\n"
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\nlearner:x:{UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
    "hostname": "sandbox\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
    "ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n",
}


def synthetic_etc() -> Path:
    """The sandbox's /etc (made once per grader): a few plain files, and of the host's only what the loader and
    the compilers need to find libraries and programs (ld.so.cache, ld.so.conf.d, the alternatives links)."""
    with _ETC_LOCK:
        if "dir" in _ETC and _ETC["dir"].is_dir():
            return _ETC["dir"]
        d = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-etc-", dir=str(scratch_parent())))
        for name, text in ETC_FILES.items():
            (d / name).write_text(text, encoding="utf-8")
        if os.path.isfile("/etc/ld.so.cache"):
            shutil.copyfile("/etc/ld.so.cache", d / "ld.so.cache")
        (d / "ld.so.conf.d").mkdir()
        for conf in Path("/etc/ld.so.conf.d").glob("*.conf") if os.path.isdir("/etc/ld.so.conf.d") else []:
            if conf.is_file():
                shutil.copyfile(conf, d / "ld.so.conf.d" / conf.name)
        if os.path.isdir("/etc/alternatives"):  # /usr/bin/cc -> /etc/alternatives/cc -> /usr/bin/gcc: links only
            (d / "alternatives").mkdir()
            for link in Path("/etc/alternatives").iterdir():
                if link.is_symlink():
                    os.symlink(os.readlink(link), d / "alternatives" / link.name)
        for p in [d, *d.rglob("*")]:
            if not p.is_symlink():
                os.chmod(p, 0o755 if p.is_dir() else 0o644)
        _ETC["dir"] = d
        atexit.register(shutil.rmtree, d, True)
        return d


# ------------------------------------------------------------------------------------------------ the GPU

GPU_VARIABLES = ("LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
                 "TRITON_NVDISASM_PATH", "CUDA_HOME", "CUDA_PATH")


def gpu_devices() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*")) + [p for p in ("/dev/dxg",) if os.path.exists(p)]


def driver_dirs() -> list[str]:
    """Folders holding the CUDA driver library, wherever this machine finds it: TRITON_LIBCUDA_PATH,
    LD_LIBRARY_PATH, the loader's cache (``ldconfig -p``), and the toolkit named by the GPU variables."""
    dirs = []
    for var in ("TRITON_LIBCUDA_PATH", "LD_LIBRARY_PATH"):
        dirs += [p for p in os.environ.get(var, "").split(":") if p]
    for var in ("TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.dirname(os.environ[var]))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(os.environ[var])
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.exists(ldconfig):
            try:
                text = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                text = ""
            dirs += [os.path.dirname(ln.split("=>")[-1].strip()) for ln in text.splitlines() if "libcuda.so" in ln]
            break
    out = []
    for d in dirs:
        real = os.path.realpath(d)
        if (os.path.isdir(real) and real not in out and real != "/"
                and not real.startswith(("/usr/", "/proc", "/dev", "/sys"))
                and real not in ("/etc", "/tmp", "/root", "/home") and not real.startswith(("/etc/", "/tmp/"))):
            out.append(real)
    return out


def _gpu_binds() -> list[str]:
    args = []
    devs = gpu_devices()
    for d in devs:
        args += ["--dev-bind", d, d]
    if devs:
        args += ["--ro-bind", "/sys", "/sys"]
        for lib in ["/usr/lib/wsl", *driver_dirs()]:
            if os.path.isdir(lib):
                args += ["--ro-bind", lib, lib]
    return args


def command(inner: list[str], *, grader_dir: Path, env: dict[str, str], tmp_mb: int = 1024, shm_mb: int = 64,
            memory_mb: int = 0, rlimit_as: bool = False, cwd: str = "/tmp/work", prelude: str = "",
            package: bool = True) -> list[str]:
    """The bwrap command line that runs ``inner`` in a fresh sandbox (see the module docstring)."""
    exe = bwrap_path()
    if exe is None:
        raise SandboxMissing(missing_message())
    if exe not in USERNS:
        check_works()
    args = [exe, "--die-with-parent", "--new-session"]
    if USERNS.get(exe):
        args += ["--unshare-user", "--uid", str(UID), "--gid", str(UID)]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--hostname", "sandbox", "--cap-drop", "ALL"]
    args += _system_binds()
    args += ["--proc", "/proc", "--dev", "/dev", "--size", str(shm_mb * 2**20), "--tmpfs", "/dev/shm"]
    args += ["--size", str(tmp_mb * 2**20), "--tmpfs", "/tmp"]
    args += _venv_binds()
    args += _gpu_binds()
    for path in _hidden(args):  # after every bind that could bring a copy in (site-packages, /usr, driver folders)
        args += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
    if package:  # a judge run gets no softmax_lab: no check helper to call
        args += ["--ro-bind", str(PACKAGE), f"{INSIDE_PACKAGE_ROOT}/softmax_lab"]
    args += ["--ro-bind", str(grader_dir), "/grader"]
    for d in ("/tmp/work", "/tmp/home", "/tmp/runtime"):
        args += ["--dir", d]
    args += ["--chdir", cwd, "--clearenv"]
    for k, v in sorted(env.items()):
        args += ["--setenv", k, v]
    limits = "ulimit -c 0"
    if rlimit_as and memory_mb > 0:
        # data size, not address space: CUDA torch maps far more than it uses
        limits += f"; ulimit -d {memory_mb * 1024}"
    args += ["--", "/bin/sh", "-c", limits + (f"; {prelude}" if prelude else "") + '; exec "$@"', "sh", *inner]
    return args


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The sandbox's whole environment: nothing of the instructor's except a few device/thread settings."""
    venv_bin = os.path.dirname(os.path.abspath(sys.executable))
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp/home",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONPATH": INSIDE_PACKAGE_ROOT,
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "IPYTHONDIR": "/tmp/home/.ipython",
        "JUPYTER_RUNTIME_DIR": "/tmp/runtime",
        "JUPYTER_PLATFORM_DIRS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp/home/.config/matplotlib",
        "TRITON_CACHE_DIR": "/tmp/home/.triton/cache",  # private: a shared cache could be poisoned
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
    }
    for k in ("SOFTMAX_LAB_DEVICE", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "NVIDIA_VISIBLE_DEVICES"):
        if k in os.environ:
            env[k] = os.environ[k]
    if gpu_devices():  # how Triton finds the driver and the toolkit (their folders are bound read-only)
        env.update({k: os.environ[k] for k in GPU_VARIABLES if os.environ.get(k)})
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------------------------- scratch folders


def scratch_parent() -> Path:
    return Path(tempfile.gettempdir())


def new_scratch(keep: bool = False) -> Path:
    """A fresh scratch folder for one run, named with the grader's pid (so a later start can clean it up);
    ``keep`` (``--keep-scratch``): named ``...kept-<pid>-...``, which no grader's clean-up removes."""
    mark = "kept-" if keep else ""
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{mark}{os.getpid()}-", dir=str(scratch_parent())))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_scratch(min_age_s: float = 5.0) -> int:
    """Delete scratch folders left by graders that no longer run (killed with kill -9, a power cut).
    Returns how many were removed."""
    removed = 0
    try:
        entries = list(scratch_parent().iterdir())
    except OSError:
        return 0
    for p in entries:
        if not p.name.startswith(SCRATCH_PREFIX) or not p.is_dir() or p.is_symlink():
            continue
        rest = p.name[len(SCRATCH_PREFIX):]
        pid = rest.split("-", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue  # a grader that still runs (this one included) owns it
        try:
            if time.time() - p.stat().st_mtime < min_age_s:
                continue
        except OSError:
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed += not p.exists()
    return removed
