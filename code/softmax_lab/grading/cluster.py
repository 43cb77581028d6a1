"""Grading on a Dask cluster (`softmax-lab grade --dask ADDRESS`): each notebook goes to a worker, which grades it
in its own sandbox exactly as `grade` does here, and only this process writes the gradebook, as results come back.

    GradingOnDask(address, opts) is a ``concurrent.futures.Executor``: `grade` uses it in place of its thread pool,
    so the same function grades each notebook, and results, resume and the gradebook are those of a local run.

* What travels: the notebook's bytes (so the workers need no shared folder with the submissions), the chapters
  once (a task the cluster can recompute), the options (limits, sandbox, cgroup). Back comes the graded result.
* Before anything is sent, every worker is asked whether it can grade like this machine: the same grader and
  versions, bubblewrap working, cgroups when the limits need them. One clear line otherwise.
* A worker that dies while grading (killed, out of memory, its node lost) costs a retry on another worker: the
  scheduler runs the notebook again, up to its ``allowed-failures``; after that the notebook gets a row saying so,
  which the next run grades again.
* The scheduler going away stops the run with one line: every notebook graded so far is in the gradebook, and
  running the same command again grades the rest (nothing is recorded twice: rows are written here, per notebook).

The instructor's guide is docs/grading.md ("Grading on a cluster with Dask").
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import logging
import re
import shutil
import sys
import threading
import traceback
import uuid
from pathlib import Path

CONNECT_TIMEOUT = 10   # seconds to reach the scheduler (a typo should not wait for long)
RESULT_TIMEOUT = 120   # seconds to fetch one finished result from its worker
RETRIES = 2            # reruns of a notebook whose task raised (a worker that died is retried by the scheduler)
# What decides a grade besides the package's own code: a worker with other versions could grade differently.
VERSIONED = ("torch", "triton", "numpy", "nbval", "pytest", "nbformat", "nbclient", "ipykernel", "numba-cuda")


class ClusterError(Exception):
    """The cluster cannot grade (unreachable, unfit workers) or went away: the message is one line for the
    instructor, and the gradebook holds every notebook graded so far."""


class WorkerUnfit(RuntimeError):
    """Raised on a worker that cannot grade with the instructor's limits (no bubblewrap, no cgroups ...)."""


# ------------------------------------------------------------------------------------------ on the workers


# A worker reads its package once, when it first grades: a checkout changed after that still looks old to it.
RESTART = ("restart the workers (`dask worker ...` again: each one takes its grader's fingerprint once, so one "
           "started before the checkout changed keeps the old one), and install the same checkout and versions on "
           "every worker")


@functools.cache  # (once per process: it reads every file of the package)
def grader_fingerprint() -> str:
    """A digest of the softmax_lab package's code and data and of the versions that decide a grade."""
    from importlib import metadata

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"python {sys.version_info[:2]}".encode())
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".toml", ".cfg", ".json") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    for name in VERSIONED:
        try:
            digest.update(f"{name} {metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} missing".encode())
    return digest.hexdigest()[:16]


def versions() -> dict[str, str]:
    from importlib import metadata

    found = {"python": ".".join(map(str, sys.version_info[:3]))}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


_READY: dict[tuple[bool, bool], str] = {}  # (sandbox, cgroup) -> '' or why this worker cannot grade so
_READY_LOCK = threading.Lock()


def worker_problem(sandbox_needed: bool, cgroup_needed: bool) -> str:
    """'' when this process can grade with these limits, else why not (checked once per process). Also what the
    instructor's run does before grading: stale scratch folders and cgroups removed, the judges loaded."""
    with _READY_LOCK:
        key = (sandbox_needed, cgroup_needed)
        if key not in _READY:
            from . import cgroup, judge, sandbox

            why = ""
            if sandbox_needed:
                try:
                    sandbox.check_works()
                except sandbox.SandboxMissing as err:
                    why = str(err)
            if not why and cgroup_needed and cgroup.why_unavailable():
                why = (f"no cgroup can be made for each notebook ({cgroup.why_unavailable()}); docs/grading.md says "
                       "how to delegate one to the worker, or grade with --unsafe-no-cgroup")
            if not why:
                sandbox.clean_stale_scratch()
                cgroup.clean_stale()
                judge.judges()  # once, before the worker's threads grade (as `grade` does before its threads)
            _READY[key] = why
        return _READY[key]


def probe(sandbox_needed: bool, cgroup_needed: bool) -> dict:
    """What the instructor's process asks each worker before sending it anything."""
    return {"fingerprint": grader_fingerprint(), "versions": versions(),
            "problem": worker_problem(sandbox_needed, cgroup_needed)}


async def probe_off_loop(sandbox_needed: bool, cgroup_needed: bool) -> dict:
    """``probe`` in a thread of the worker: ``Client.run`` calls a function on the worker's event loop, and the probe
    reads the whole package and starts a sandbox (seconds), which would stall the worker's heartbeats meanwhile."""
    import asyncio

    return await asyncio.get_running_loop().run_in_executor(None, probe, sandbox_needed, cgroup_needed)


def chapters_task(chapters: dict) -> dict:
    """The chapters as a task of their own: sent once, shared by every notebook, recomputed if a worker is lost."""
    return chapters


def grade_on_worker(grade_one, name: str, filename: str, data: bytes, learner: str, chapters: dict, opts,
                    expected: str):
    """One notebook on a worker: its bytes written to a private folder under the same file name, then graded
    by ``grade_one`` (the function `grade` uses here). The result names its chapter by number (the instructor's
    process puts its own chapter back): the solution notebook does not travel back with every result.

    Every task checks its worker again (``expected``: the instructor's grader fingerprint): a worker that joined
    after the first check is held to the same rules."""
    from . import sandbox
    from .submissions import Submission

    why = worker_problem(opts.limits.sandbox, opts.limits.cgroup)
    if not why and grader_fingerprint() != expected:
        why = ("it would grade with another grader (its softmax_lab package or versions differ from the "
               f"instructor's): {RESTART}")
    if why:
        raise WorkerUnfit(why)
    folder = sandbox.new_scratch()  # (named with this worker's pid: a later start removes it if the worker died)
    try:
        path = folder / filename
        path.write_bytes(data)
        result = grade_one(Submission(path, name, learner), chapters, opts)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    result.chapter = result.chapter.chapter if result.chapter is not None else None
    return result


# -------------------------------------------------------------------------------- in the instructor's process


def _address_hint(address: str) -> str:
    if re.search(r":8787/?$", address) or address.startswith(("http://", "https://")):
        return " (that looks like the dashboard's address: the scheduler's is usually tcp://HOST:8786)"
    return ""


class GradingOnDask(concurrent.futures.Executor):
    """An executor whose ``submit(grade_one, submission, chapters, opts)`` grades on the cluster at ``address``.

    Its futures always end in a ``SubmissionResult`` (a row saying what went wrong when the cluster could not grade
    a notebook), or in ``ClusterError`` when the scheduler went away."""

    def __init__(self, address: str, opts, connect_timeout: float = CONNECT_TIMEOUT):
        try:
            from distributed import Client
        except ImportError:
            raise ClusterError("--dask needs Dask's `distributed` package on this machine and on every worker: "
                               "pip install -e '.[cluster]' (or pip install distributed)") from None
        self.address, self.opts = address, opts
        self._quiet = _Quiet()
        try:
            self.client = Client(address, timeout=connect_timeout, set_as_default=False)
        except Exception as err:  # OSError, TimeoutError, ValueError (a malformed address) ...
            self._quiet.restore()
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            raise ClusterError(f"no Dask scheduler answers at {address} ({reason}){_address_hint(address)}: start "
                               "one (dask scheduler; docs/grading.md) or check the address") from None
        self._lock = threading.Lock()
        self._pending: dict[object, concurrent.futures.Future] = {}
        self._chapters: tuple[int, object] | None = None
        self._closed = False
        try:
            self._check_workers()
        except ClusterError:
            self._close()
            raise
        except Exception as err:  # the scheduler went away while the workers were being asked
            self._close()
            raise self._lost(f"the scheduler at {address} went away ({str(err).splitlines()[0][:200]})") from None
        except BaseException:
            self._close()
            raise

    # ---------------------------------------------------------------------------------------- the workers

    def _check_workers(self) -> None:
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        if not workers:
            print(f"softmax-lab grade: the scheduler at {self.address} has no workers yet; the notebooks wait "
                  "for the first one (Ctrl-C stops; nothing is lost)", file=sys.stderr, flush=True)
            try:
                self.client.wait_for_workers(1)
            except KeyboardInterrupt:
                raise ClusterError("stopped while waiting for the cluster's first worker: nothing was graded, "
                                   "nothing changed") from None
        limits = self.opts.limits
        try:
            answers = self.client.run(probe_off_loop, limits.sandbox, limits.cgroup, on_error="return")
            names = {addr: info.get("name", addr) for addr, info in
                     self.client.scheduler_info(n_workers=-1).get("workers", {}).items()}
        except Exception as err:
            raise ClusterError(f"the workers at {self.address} could not be asked whether they can grade "
                               f"({type(err).__name__}: {str(err)[:200]})") from None
        mine, problems = grader_fingerprint(), []
        my_versions = versions()
        for address, answer in sorted(answers.items()):
            name = str(names.get(address, address))
            worker = f"worker {name} ({address})" if name != address else f"worker {address}"
            if isinstance(answer, BaseException):
                what = f"{type(answer).__name__}: {str(answer)[:200]}"
                if isinstance(answer, ImportError):
                    what += " (every worker needs the course's environment: this checkout's package installed)"
                problems.append(f"{worker} cannot run the grader ({what})")
            elif answer["problem"]:
                problems.append(f"{worker}: {answer['problem']}")
            elif answer["fingerprint"] != mine:
                other = {k: v for k, v in answer["versions"].items() if my_versions.get(k) != v}
                what = (", ".join(f"{k} {v} there, {my_versions.get(k)} here" for k, v in other.items())
                        or "its softmax_lab package differs from this one")
                problems.append(f"{worker} would grade with another grader ({what}): {RESTART}")
        if problems:
            more = f" (and {len(problems) - 1} more worker(s))" if len(problems) > 1 else ""
            raise ClusterError(f"the cluster at {self.address} cannot grade like this machine: {problems[0]}{more}")
        threads = sum(w.get("nthreads", 0) for w in self.client.scheduler_info(n_workers=-1)["workers"].values())
        print(f"softmax-lab grade: on the Dask cluster at {self.address}: {len(answers)} worker(s), {threads} "
              "notebook(s) at a time", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------------------ submitting

    def submit(self, grade_one, sub, chapters, opts):  # the Executor interface
        from .chapters import MAX_NOTEBOOK_BYTES
        from .streams import read_regular

        done: concurrent.futures.Future = concurrent.futures.Future()
        try:
            data = read_regular(sub.path, MAX_NOTEBOOK_BYTES)
        except OSError:
            # Too large, not a regular file, unreadable: grading it here stops at reading, with the same row.
            done.set_result(grade_one(sub, chapters, opts))
            return done
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit after shutdown")
            if self._chapters is None or self._chapters[0] != id(chapters):
                self._chapters = (id(chapters), self.client.submit(chapters_task, chapters, pure=False,
                                                                   key=f"softmax-lab-chapters-{uuid.uuid4().hex}"))
            try:
                task = self.client.submit(grade_on_worker, grade_one, sub.name, sub.path.name, data, sub.learner,
                                          self._chapters[1], opts, grader_fingerprint(), pure=False,
                                          retries=RETRIES, key=_task_key(sub.name))
            except Exception:  # the client lost its scheduler while sending
                raise self._lost(f"the scheduler at {self.address} went away") from None
            self._pending[task.key] = done
        done.set_running_or_notify_cancel()
        task.add_done_callback(lambda t: self._finished(t, sub, chapters))
        return done

    def _finished(self, task, sub, chapters) -> None:
        """Runs in Dask's callback thread when a task ended: resolve the matching future here."""
        from distributed.client import FutureCancelledError

        with self._lock:
            done = self._pending.pop(task.key, None)
        if done is None or done.done():
            return
        try:
            result = task.result(timeout=RESULT_TIMEOUT)
        except FutureCancelledError as err:
            if self._closed and err.reason != "scheduler-connection-lost":
                done.cancel()
                return
            done.set_exception(self._lost(f"the scheduler at {self.address} went away"))
            return
        except concurrent.futures.CancelledError:
            done.cancel() if self._closed else done.set_exception(self._lost("the scheduler cancelled the work"))
            return
        except WorkerUnfit as err:  # a worker that joined after the check: stop with one line, rows kept
            done.set_exception(ClusterError(
                f"a worker of the cluster at {self.address} cannot grade like this machine: {str(err)[:300]}; "
                "the gradebook holds every notebook graded so far: remove that worker (or make it like the others) "
                "and run the same command again"))
            return
        except Exception as err:  # the task failed for good: a row that the next run grades again
            if not self.client.status == "running":
                done.set_exception(self._lost(f"the scheduler at {self.address} went away"))
                return
            done.set_result(self._failed_row(sub, err))
            return
        result.chapter = chapters.get(result.chapter) if result.chapter is not None else None
        done.set_result(result)

    def _lost(self, what: str) -> ClusterError:
        return ClusterError(f"{what}: the gradebook holds every notebook graded so far; run the same command again "
                            "to grade the rest")

    def _failed_row(self, sub, err: BaseException):
        """The row of a notebook the cluster could not grade (the details go to the instructor's terminal only)."""
        from distributed import KilledWorker

        from .grader import SubmissionResult
        from .rows import GRADER_TROUBLE, make_row, safe_line

        if isinstance(err, KilledWorker):
            detail = (f"the Dask workers grading it kept dying ({str(err).splitlines()[0][:300]}): out of memory, "
                      "killed, or their node lost; see the workers' logs")
        else:
            detail = "".join(traceback.format_exception(type(err), err, err.__traceback__)).strip()
        ref = hashlib.sha256(detail.encode("utf-8", "replace")).hexdigest()[:8]
        print(f"softmax-lab grade: the cluster could not grade {safe_line(sub.name)} (error {ref}): {detail}",
              file=sys.stderr, flush=True)
        message = (f"{GRADER_TROUBLE}, not because of your code (the grading cluster failed on it, error {ref}; your "
                   "instructor has the details and grades it again)")
        return SubmissionResult(sub.name, None, [make_row(sub.name, "", "", 0, 0, "error", message)])

    # ------------------------------------------------------------------------------------------ stopping

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._pending.values())
            self._pending.clear()
        for done in pending:  # nothing still running is wanted any more (Ctrl-C, or the scheduler went away)
            done.cancel()
        self._close()

    def _close(self) -> None:
        try:
            self.client.close(timeout=5)  # the scheduler drops this client's tasks (a running one is not kept)
        except Exception:  # closing a client whose scheduler is gone
            pass
        finally:
            self._quiet.restore()


def _task_key(name: str) -> str:
    """A task name the cluster's dashboard shows: the submission, in plain characters, and a unique suffix."""
    plain = re.sub(r"[^A-Za-z0-9_./-]+", "_", name)[-80:]
    return f"grade-{plain}-{uuid.uuid4().hex[:8]}"


class _Quiet:
    """Dask logs its connection troubles at length; `grade` says what happened in one line instead."""

    def __init__(self):
        import distributed  # noqa: F401 - its logging configuration first

        self.handlers = [(h, h.level) for h in logging.getLogger("distributed").handlers]
        for handler, _ in self.handlers:
            handler.setLevel(logging.CRITICAL)

    def restore(self) -> None:
        for handler, level in self.handlers:
            handler.setLevel(level)
