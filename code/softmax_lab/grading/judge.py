"""Judge outside the sandbox: launch the learner's own code on fresh inputs, read back arrays, decide here.

For every exercise with a judge (``JUDGES`` in ``softmax_lab.checks.chNN``, see ``checks/judging.py``):

1. here: draw fresh inputs from the grader's seed, write them as ``.npy`` files and ``judge.json``;
2. in a fresh sandbox *without* the softmax_lab package: ``judge_harness.py`` defines only the learner's
   ``@triton.jit`` functions (kernel exercises; checked to be Triton code) or ``@cuda.jit`` functions (chapter 9's
   numba exercises, run in numba's simulator with ``cuda_layer/sim.py`` beside the harness), or runs the cell
   (Python exercises), each kind in a separate sandbox, launches/calls them, and saves the outputs;
3. here: read what the harness sends back on its standard output (a pipe, read up to the size expected: no
   file of the sandbox is ever opened) with strict parsers (``np.load(allow_pickle=False)``, a validated JSON),
   compare with float64 references computed here, and count k/n. Nothing the learner prints is read.
"""
from __future__ import annotations

import ast
import importlib
import io
import json
import re
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..course.registry import check_module
from . import sandbox, streams
from .process import STOP, Limits, gpu_visible, start

REGISTRY: dict[str, object] = {}  # exercise id -> judge; tests add the fixture chapter's here
_SEEN: set[str] = set()  # exercise ids already looked up (with or without a judge)
MAX_RESULTS_BYTES = 2 * 2**20


def judges(chapter: str | None = None) -> dict[str, object]:
    """Every exercise's judge (``chapter``: that chapter's), plus REGISTRY (tests add fixture judges there).

    The registry's id names the module (``course.registry.check_module``): ``ch07-row-vector`` is judged by
    ``JUDGES["ch07-row-vector"]`` in ``softmax_lab.checks.ch07.row_vector``; no module is scanned or searched, and
    a chapter without check modules imports none (importing them imports torch). The grader tells the checks
    whether this machine may launch the GPU-sized cases (``judging.gpu_scale``)."""
    if chapter is not None and not _has_check_module(chapter):
        return REGISTRY
    from ..course import exercises

    from ..checks import judging  # (here: importing the checks imports torch; the chapter may need none)

    judging.set_gpu_scale(gpu_visible())
    for ex in exercises(chapter):
        if ex.id in REGISTRY or ex.id in _SEEN:
            continue
        _SEEN.add(ex.id)
        name = check_module(ex.id)
        if name is None:
            continue
        found = getattr(importlib.import_module(name), "JUDGES", {}).get(ex.id)
        if found is not None:
            REGISTRY[ex.id] = found
    return REGISTRY


def _has_check_module(chapter: str) -> bool:
    """Chapter ``chapter`` has at least one exercise whose check module exists (found by path, nothing imported)."""
    from ..course import exercises

    return any(check_module(ex.id) is not None for ex in exercises(chapter))


@dataclass
class Verdict:
    passed: int = 0
    total: int = 0
    lines: list[str] = field(default_factory=list)
    note: str = ""          # said once, before the lines (the kernel is missing, the source was refused ...)
    cases: list[tuple[str, bool]] = field(default_factory=list)  # (case name as in its table, passed), in order

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def add(self, name: str, problem: str, case: str | None = None) -> None:
        """One check; ``case``: the case table's name when ``name`` adds words to it (seed 002's parts read it)."""
        self.total += 1
        self.cases.append((name if case is None else case, not problem))
        if problem:
            self.lines.append(f"FAIL  {name}: {problem}")
        else:
            self.passed += 1

    def text(self, ident: str) -> str:
        body = ([self.note] if self.note else []) + self.lines[:8]
        if len(self.lines) > 8:
            body.append(f"... and {len(self.lines) - 8} more")
        word = "PASSED" if self.ok else "FAILED"
        return "\n".join(body + [f"{ident}: {word} ({self.passed}/{self.total} grader checks passed)"])


def _strict_json(text: str):
    def constant(name):
        if name in ("Infinity", "-Infinity", "NaN"):
            return float(name.replace("Infinity", "inf").replace("NaN", "nan"))
        raise ValueError(name)
    return json.loads(text, parse_constant=constant)


def _clean(text, limit=300) -> str:
    if not isinstance(text, str):
        return ""
    text = text.encode("utf-8", "replace").decode("utf-8", "replace")
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text[:limit]


def _harness_command(grader_dir: Path, limits: Limits) -> tuple[list[str], dict]:
    """(command, environment) of the harness: in a fresh sandbox without the package, or in place (unsafe)."""
    shutil.copy(Path(__file__).with_name("judge_harness.py"), grader_dir / "judge_harness.py")
    # chapter 9's numba exercises: the course's simulator additions (shuffles, race recorder), standalone, no answer
    shutil.copy(Path(__file__).parent.parent / "cuda_layer" / "sim.py", grader_dir / "cuda_sim.py")
    # Triton's interpreter taking `stride: tl.int64` as 64 bits, as a GPU does (standalone, no answer)
    shutil.copy(Path(__file__).parent.parent / "interpreter_ints.py", grader_dir / "interpreter_ints.py")
    inner = [sandbox.python(), "-I", "/grader/judge_harness.py"]
    data_limit = limits.data_limit()
    if limits.sandbox:
        env = sandbox.base_env()
        env.pop("PYTHONPATH", None)
        cmd = sandbox.command(inner, grader_dir=grader_dir, env=env, tmp_mb=256, shm_mb=min(limits.shm_mb, 64),
                              memory_mb=limits.memory_mb, rlimit_as=data_limit, cwd="/tmp/work",
                              package=False)
        return cmd, {"PATH": "/usr/bin:/bin"}
    # --unsafe-no-sandbox: the same harness, reading its inputs in place
    text = (grader_dir / "judge_harness.py").read_text(encoding="utf-8")
    text = text.replace('IN = "/grader"', f"IN = {str(grader_dir)!r}")
    (grader_dir / "judge_harness.py").write_text(text, encoding="utf-8")
    return [sandbox.python(), "-I", str(grader_dir / "judge_harness.py")], dict(os.environ)


def _run_harness(grader_dir: Path, limits: Limits, timeout: float, cap: int) -> tuple[str, bytes]:
    """Run the harness in a fresh sandbox: ('', what it sent back) or (what went wrong, b'')."""
    cmd, popen_env = _harness_command(grader_dir, limits)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = start(cmd, limits, env=popen_env, cwd=str(grader_dir), out=out_w, err=err_w, read_ends=(out_r, err_r))
    out = streams.Drain(out_r, head=cap, tail=0)   # the results: at most what the grader expects
    err = streams.Drain(err_r, head=0, tail=4096)  # the learner may flood stderr: only the end is kept
    trouble, oom = "", 0
    try:
        trouble = _watch_harness(child, out, timeout, cap)
    finally:
        oom = child.finish()
        out.join()
        err.join()
    if STOP.is_set():
        raise KeyboardInterrupt
    trouble = trouble or _harness_trouble(child.proc.returncode, oom, out, err, limits, cap)
    return trouble, (b"" if trouble else bytes(out.head))


def _watch_harness(child, out, timeout: float, cap: int) -> str:
    """Wait for the harness; kill it past its time, when it sends back too much, or on Ctrl-C (then say why)."""
    t0 = time.monotonic()
    while child.proc.poll() is None:
        trouble = ""
        if time.monotonic() - t0 > timeout:
            trouble = f"the grader's run of your code took longer than {timeout:g} s"
        elif out.over.is_set():
            trouble = f"the grader's run of your code sent back more than {cap // 2**20 + 1} MB"
        elif STOP.is_set():
            trouble = "stopped"
        if trouble:
            child.tree.kill()
            return trouble
        time.sleep(0.05)
    return ""


def _harness_trouble(returncode: int, oom: int, out, err, limits: Limits, cap: int) -> str:
    """What went wrong with a harness that ended by itself ('' when nothing did)."""
    if oom:
        return f"the grader's run of your code used more than {limits.memory_mb} MB of memory"
    if out.over.is_set():
        return f"the grader's run of your code sent back more than {cap // 2**20 + 1} MB"
    if returncode != 0:
        return f"the grader's run of your code ended with status {returncode}" + (
            f" ({_clean(err.text()[-300:], 300)})" if os.environ.get("SOFTMAX_LAB_JUDGE_DEBUG") else "")
    return ""


_FILE_NAME = re.compile(r"e\d{1,4}_c\d{1,4}_[A-Za-z_][A-Za-z0-9_]{0,40}\.npy")


def parse_results(data: bytes) -> tuple[dict, dict[str, bytes]]:
    """The harness's answer: a JSON line {"results": {...}, "files": [[name, size], ...]} and the files' bytes.
    ValueError when it is not exactly that."""
    line, sep, rest = data.partition(b"\n")
    if not sep or len(line) > MAX_RESULTS_BYTES:
        raise ValueError("no header line")
    try:
        head = _strict_json(line.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deep") from None
    if (not isinstance(head, dict) or not isinstance(head.get("results"), dict)
            or not isinstance(head.get("files"), list)):
        raise ValueError("not a results header")
    files, at = {}, 0
    for item in head["files"]:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                or not _FILE_NAME.fullmatch(item[0]) or not isinstance(item[1], int) or isinstance(item[1], bool)
                or not 0 <= item[1] <= len(rest) - at):
            raise ValueError("a bad file entry")
        files[item[0]] = rest[at: at + item[1]]
        at += item[1]
    return head["results"], files


def _write_array(path: Path, values: np.ndarray, dtype: str) -> None:
    from ..checks.judging import to_file_array

    np.save(path, to_file_array(values, dtype), allow_pickle=False)


def _read_array(data: bytes | None, dtype: str, size: int) -> np.ndarray | None:
    from ..checks.judging import from_file_array, to_file_array

    want = to_file_array(np.zeros(1), dtype).dtype
    if data is None or len(data) > 64 + size * want.itemsize + 4096:
        return None
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if arr.dtype != want or arr.shape != (size,):
        return None
    return from_file_array(arr, dtype)


HINT_CALLS = {"hint", "hint_button"}


def without_hint_calls(source: str) -> str:
    """The cell with its top-level ``softmax_lab.hint(...)`` lines blanked (line numbers kept): the judge runs the
    cell alone, without the package, and the hints it showed are read from the notebook's outputs instead."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source  # the harness says what is wrong with it
    lines = source.split("\n")
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        name = getattr(getattr(call, "func", None), "attr", None) or getattr(getattr(call, "func", None), "id", None)
        if isinstance(call, ast.Call) and name in HINT_CALLS:
            for k in range(node.lineno - 1, node.end_lineno):
                lines[k] = ""
    return "\n".join(lines)


def run(chapter_id: str, sources: dict[str, str], limits: Limits, seed: int) -> dict[str, Verdict]:
    """Judge the exercises in ``sources`` (exercise id -> the learner's cell source) that have a judge."""
    table = judges()
    todo = {k: without_hint_calls(v) for k, v in sources.items() if k in table}
    results: dict[str, Verdict] = {}
    if not todo:
        return results
    rng = np.random.default_rng(seed)
    timeout = max(60.0, min(limits.wall_timeout, 2 * limits.cell_timeout))
    kernels = {k: v for k, v in todo.items() if table[k].kind == "kernel"}
    pythons = {k: v for k, v in todo.items() if table[k].kind == "python"}
    numbas = {k: v for k, v in todo.items() if table[k].kind == "numba"}
    for group in (kernels, pythons, numbas):
        if not group:
            continue
        scratch = sandbox.new_scratch(limits.keep_scratch)
        try:
            results.update(_run_group(group, table, rng, scratch, limits, timeout))
        finally:
            if not limits.keep_scratch:
                shutil.rmtree(scratch, ignore_errors=True)
    return results


def _run_group(group, table, rng, scratch: Path, limits: Limits, timeout: float) -> dict[str, Verdict]:
    """Judge one group of exercises (kernels, or Python) in one harness run: inputs out, arrays back, verdicts."""
    grader_dir = scratch / "in"
    grader_dir.mkdir()
    plans, expected = _write_inputs(group, table, rng, grader_dir)
    trouble, data = _run_harness(grader_dir, limits, timeout, MAX_RESULTS_BYTES + expected)
    raw, files = {}, {}
    if not trouble:
        try:
            raw, files = parse_results(data)
        except (ValueError, UnicodeDecodeError):
            trouble = "the grader's run of your code left no readable results"
    out = {}
    for ident in group:
        n, items = plans[ident]
        v = Verdict()
        rec = raw.get(ident) if isinstance(raw, dict) else None
        if trouble or not isinstance(rec, dict):
            v.note = trouble or "the grader's run of your code left no result for this exercise"
            for item in items:
                v.add(item.name, "not run")
        elif table[ident].kind == "kernel":
            _kernel_verdict(v, rec, table[ident], items, files, n)
        elif table[ident].kind == "numba":
            _numba_verdict(v, rec, table[ident], items, files, n, group[ident])
        else:
            _python_verdict(v, rec, items, table[ident], group[ident])
        out[ident] = v
    return out


def _write_inputs(group, table, rng, grader_dir: Path) -> tuple[dict, int]:
    """Draw every exercise's inputs from ``rng`` and write them with ``judge.json`` for the harness: returns
    exercise id -> (its number, its cases or calls), and the bytes of output the harness may send back."""
    spec, plans = [], {}
    expected = 0
    for n, (ident, source) in enumerate(sorted(group.items())):
        judge = table[ident]
        if judge.kind == "kernel":
            cases = judge.cases(rng)
            entries = []
            for k, case in enumerate(cases):
                entry, size = _case_spec(n, k, case, grader_dir)
                entries.append(entry)
                expected += size
            spec.append({"id": ident, "kind": "kernel", "kernel": judge.kernel, "source": source,
                         "int64": judge.int64, "cases": entries, "out_prefix": f"e{n}_"})
            plans[ident] = (n, cases)
        elif judge.kind == "numba":
            cases = judge.cases(rng)
            entries = []
            for k, case in enumerate(cases):
                entry, size = _numba_case_spec(n, k, case, grader_dir)
                entries.append(entry)
                expected += size
            spec.append({"id": ident, "kind": "numba", "functions": list(judge.functions), "source": source,
                         "helpers": judge.helpers, "cases": entries, "out_prefix": f"e{n}_"})
            plans[ident] = (n, cases)
        else:
            calls = judge.calls(rng)
            spec.append({"id": ident, "kind": "python", "source": source,
                         "calls": [{"fn": c.fn, "args": c.args, **({"fold": c.fold, "tile": c.tile} if c.fold
                                                                   else {})} for c in calls]})
            plans[ident] = (n, calls)
    (grader_dir / "judge.json").write_text(json.dumps({"exercises": spec}), encoding="utf-8")
    return plans, expected


def _case_spec(n: int, k: int, case, grader_dir: Path) -> tuple[dict, int]:
    """One kernel case for the harness (its buffers written as .npy files), and the bytes its outputs may take."""
    bufs, expected = {}, 0
    for name, buf in case.buffers.items():
        fname = f"e{n}_c{k}_{name}.npy"
        _write_array(grader_dir / fname, buf.storage, buf.dtype)
        bufs[name] = {"file": fname, "dtype": buf.dtype}
        if buf.size:
            bufs[name].update(size=buf.size, windows=[list(w) for w in buf.windows], base=buf.base)
        if buf.output:
            expected += 4096 + buf.storage.size * 8
    return ({"grid": list(case.grid), "args": [{a[0]: a[1]} for a in case.args], "constexprs": case.constexprs,
             "buffers": bufs, "int64": case.int64, "outputs": [b for b, v in case.buffers.items() if v.output]},
            expected)


def _numba_case_spec(n: int, k: int, case, grader_dir: Path) -> tuple[dict, int]:
    """One numba launch for the harness (float32 buffers as .npy files), and the bytes its outputs may take."""
    bufs, expected = {}, 0
    for name, buf in case.buffers.items():
        fname = f"e{n}_c{k}_{name}.npy"
        _write_array(grader_dir / fname, buf.storage, "float32")
        bufs[name] = {"file": fname, "shape": list(buf.shape), "step": buf.step}
        if buf.output:
            expected += 4096 + buf.storage.size * 8
    return ({"function": case.function, "probe": case.probe, "blocks": case.blocks, "threads": case.threads,
             "shared_bytes": case.shared_bytes, "race": case.race, "args": [{a[0]: a[1]} for a in case.args],
             "buffers": bufs, "outputs": [b for b, v in case.buffers.items() if v.output]}, expected)


def _launch_note(rec: dict, decorator: str, name: str, what: str, launches: str, keep: str) -> str:
    """Why the grader launched nothing of the learner's (no function of that name, refused, undefinable), or ''."""
    status = rec.get("status")
    if status == "no-kernel":
        return f"your exercise cell defines no {decorator} function named `{name}`: {launches}"
    if status == "rejected":
        return (f"the grader runs your {decorator} functions alone, and refused them: {_clean(rec.get('message'))} "
                f"({keep})")
    if status != "ran":
        return f"the grader could not define your {what}: {_clean(rec.get('message'))}"
    return ""


def _numba_verdict(v: Verdict, rec: dict, judge, cases, files: dict[str, bytes], n: int, source: str) -> None:
    """The verdict on a numba exercise: the cell's own source (``judge.source_problem``), then every case's race
    report and output, decided here by the exercise's module (``judge.problem``)."""
    status = rec.get("status")
    v.note = _launch_note(rec, "@cuda.jit", _clean(rec.get("message"), 80), "functions",
                          "the grader launches your own functions itself, in numba's simulator (a name bound to the "
                          "course's function earns nothing)",
                          "keep them to kernel code: cuda.*, math.* and numba's float32") or v.note
    got = rec.get("cases") if status == "ran" else None
    if not isinstance(got, list) or len(got) != len(cases):
        for case in cases:
            v.add(case.name, "not run" if not v.note else "nothing to launch")
        return
    if judge.source_problem is not None:
        v.add("your cell's source", _clean(judge.source_problem(source)))
    for k, (case, r) in enumerate(zip(cases, got)):
        if not isinstance(r, dict):
            v.add(case.name, "no result")
            continue
        if r.get("status") == "raised":
            v.add(case.name, f"the grader's launch raised {_clean(r.get('message'), 200)}")
            continue
        race = r.get("race") if case.race else None
        if case.race and not isinstance(race, dict):
            v.add(case.name, "no race report came back")
            continue
        outputs = {}
        for name, buf in case.buffers.items():
            if buf.output:
                outputs[name] = _read_array(files.get(f"e{n}_c{k}_{name}.npy"), "float32", buf.storage.size)
        if any(a is None for a in outputs.values()):
            v.add(case.name, "its output did not come back")
            continue
        try:
            problem = judge.problem(case, outputs, race)
        except (TypeError, ValueError, KeyError, IndexError):
            problem = "the grader could not read what your code sent back"
        v.add(f"{case.name} (grader's run in numba's simulator)", _clean(problem, 600), case.name)


def _kernel_verdict(v: Verdict, rec: dict, judge, cases, files: dict[str, bytes], n: int) -> None:
    status = rec.get("status")
    v.note = _launch_note(rec, "@triton.jit", judge.kernel, "kernel",
                          "the grader launches that kernel itself, with its own buffers and grid (a launcher that "
                          "calls torch.softmax or a library kernel earns nothing)",
                          "keep the kernel to Triton code: tl.* calls on its arguments") or v.note
    got = rec.get("cases") if status == "ran" else None
    if not isinstance(got, list) or len(got) != len(cases):
        for case in cases:
            v.add(case.name, "not run" if not v.note else "no kernel to launch")
        return
    for k, (case, r) in enumerate(zip(cases, got)):
        if not isinstance(r, dict):
            v.add(case.name, "no result")
            continue
        if r.get("status") == "raised":
            v.add(case.name, f"the launch of {judge.kernel} raised {_clean(r.get('message'), 200)}")
            continue
        problem = ""
        for name, buf in case.buffers.items():
            if not buf.output:
                continue
            from ..checks.judging import output_problem

            arr = _read_array(files.get(f"e{n}_c{k}_{name}.npy"), buf.dtype, buf.storage.size)
            problem = "its output did not come back" if arr is None else output_problem(buf, arr)
            if problem:
                break
        narrow = r.get("narrow_offsets")
        if not problem and case.int64 and isinstance(narrow, int) and not isinstance(narrow, bool) and narrow > 0:
            problem = case.hint
        elif problem and case.hint and not case.int64:  # the GPU case with real 2**31+ element buffers
            problem = f"{problem} - {case.hint}"
        v.add(f"{case.name} (grader's launch of {judge.kernel})", problem, case.name)


def _python_verdict(v: Verdict, rec: dict, calls, judge, source: str) -> None:
    """Each call's value decided by its ``expect``, then the cell's own source (``judge.source_problem``)."""
    ran = _python_calls(v, rec, calls)
    if judge.source_problem is not None:
        v.add(judge.source_case, _clean(judge.source_problem(source)) if ran else "not run")


def _python_calls(v: Verdict, rec: dict, calls) -> bool:
    """Add each call's item; False when the cell's functions did not run."""
    if rec.get("status") == "raised":
        v.note = f"your exercise cell raised when the grader ran it alone: {_clean(rec.get('message'), 200)}"
    got = rec.get("results") if rec.get("status") == "ran" else None
    if not isinstance(got, list) or len(got) != len(calls):
        for c in calls:
            v.add(c.name, "not run")
        return False
    for c, r in zip(calls, got):
        if not isinstance(r, dict):
            v.add(c.name, "no result")
        elif r.get("status") == "missing":
            v.add(c.name, f"no function `{c.fn}` in your exercise cell")
        elif r.get("status") != "ok":
            v.add(c.name, f"your code raised {_clean(r.get('message'), 200)}")
        else:
            value = r.get("value")
            try:
                problem = c.expect(value)
            except (TypeError, ValueError, OverflowError, IndexError):
                problem = f"unexpected result {_clean(repr(value), 80)}"
            v.add(c.name, _clean(problem))
    return True


def new_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


__all__ = ["run", "judges", "Verdict", "REGISTRY", "new_seed", "math"]
