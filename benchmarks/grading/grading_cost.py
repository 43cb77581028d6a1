"""What the grader's isolation costs, and what a spinning submission takes from its classmates (issue 30).

    python benchmarks/grading/grading_cost.py --code CODE_DIR --label after --out benchmarks/records/grading-cost.json

1. ``alone``: one honest submission of chapter 02 (the solution pasted into the learner notebook), graded
   with ``--jobs 1``: seconds per honest submission.
2. ``spinner``: three honest submissions and one that keeps 8 processes and its own cell spinning for
   ``--timeout`` seconds, graded with ``--jobs 4``: when each honest one finished, and their grades.

3. ``share`` (``--share``): four sandboxes at once, as ``--jobs 4`` starts them; one keeps 32 processes spinning,
   each in a session of its own (with autogrouping on, Linux schedules every session as a group of its own),
   the other three each spin one process and report the CPU seconds it got in ``SECONDS`` of wall time, with
   a cgroup per sandbox and without one (the grader before issue 30 had none).

``--code`` picks the grader (a checkout's ``code/`` folder: the tree before the change or after it). Results
are appended to ``--out`` under ``--label``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "02_masks_and_padding.ipynb"
SPIN = ("import subprocess, sys\n"
        "for _ in range(8):\n"
        "    subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "while True:\n"
        "    pass\n")


def honest(path: Path, spin: bool = False) -> None:
    import nbformat

    from softmax_lab.course.build import learner_notebook
    from softmax_lab.course.notebook import tag_value

    sol = nbformat.read(str(ROOT / "solutions" / NAME), as_version=4)
    nb = learner_notebook(sol)
    first = True
    for cell in nb.cells:
        ident = tag_value(cell, "exercise:")
        if ident:
            cell.source = next(c.source for c in sol.cells if tag_value(c, "exercise:") == ident)
            if spin and first:
                cell.source = SPIN
                first = False
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def grade(code: Path, subs: Path, jobs: int, timeout: int) -> dict:
    out = subs.parent / "grades" / "gradebook.csv"
    cmd = [sys.executable, "-c", "import sys; from softmax_lab import cli; sys.exit(cli.main(sys.argv[1:]))",
           "grade", str(subs), "--out", str(out), "--jobs", str(jobs), "--timeout", str(timeout),
           "--solutions", str(ROOT / "solutions")]
    env = dict(os.environ, PYTHONPATH=str(code))
    t0 = time.monotonic()
    finished = {}
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as p:
        for line in p.stdout:
            who = line.split("/")[0]
            if ": " in line and "/" in line:
                finished[who] = {"seconds": round(time.monotonic() - t0, 1), "line": line.strip()}
    return {"rc": p.returncode, "seconds": round(time.monotonic() - t0, 1), "finished": finished,
            "rows": sorted(out.read_text(encoding="utf-8").splitlines()[1:]) if out.exists() else []}


SECONDS = 20
HONEST_LOOP = ("import time\nt0 = time.monotonic()\nwhile time.monotonic() - t0 < %d:\n    pass\n"
               "print(round(time.process_time(), 2))\n" % SECONDS)
SPINNER = ("import subprocess, sys, time\n"
           "ps = [subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)\n"
           "      for _ in range(31)]\n"
           "t0 = time.monotonic()\nwhile time.monotonic() - t0 < %d:\n    pass\n" % (SECONDS + 5))


def share(with_cgroup: bool) -> dict:
    """CPU seconds each of three one-process sandboxes gets next to a sandbox that spins 32 processes."""
    from softmax_lab.grading import cgroup, sandbox

    groups, procs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for code in [SPINNER, HONEST_LOOP, HONEST_LOOP, HONEST_LOOP]:
            g = cgroup.create(8192, 4096, 2.0) if with_cgroup else None
            groups.append(g)
            cmd = sandbox.command([sys.executable, "-c", code], grader_dir=Path(tmp), env=sandbox.base_env())
            procs.append(subprocess.Popen(cgroup.enter(g, cmd), stdout=subprocess.PIPE, text=True,
                                          env={"PATH": "/usr/bin:/bin"}))
        got = [p.communicate()[0].strip() for p in procs]
        for g in groups:
            if g is not None:
                g.close()
    cpu = [float(x) for x in got[1:] if x]
    return {"cgroup": with_cgroup, "wall_seconds": SECONDS, "honest_cpu_seconds": cpu,
            "honest_share_of_one_cpu": [round(c / SECONDS, 2) for c in cpu]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--code", type=Path, required=True)
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "records" / "grading-cost.json")
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--skip-spinner", action="store_true")
    ap.add_argument("--share", action="store_true", help="only the CPU-share measurement (with this tree)")
    args = ap.parse_args()
    if args.share:
        record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
                  "loadavg_before": os.getloadavg(), "with_cgroups": share(True), "without_cgroups": share(False)}
        data = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        data[args.label] = record
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(json.dumps(record, indent=1))
        return 0
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.node(),
              "cpus": os.cpu_count(), "python": sys.version.split()[0], "code": str(args.code)}
    with tempfile.TemporaryDirectory() as tmp:
        alone = Path(tmp) / "alone" / "subs"
        honest(alone / "honest" / NAME)
        record["alone"] = grade(args.code, alone, 1, args.timeout)
        if not args.skip_spinner:
            spin = Path(tmp) / "spin" / "subs"
            for k in range(3):
                honest(spin / f"honest{k}" / NAME)
            honest(spin / "spinner" / NAME, spin=True)
            record["spinner"] = grade(args.code, spin, 4, args.timeout)
    data = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    data[args.label] = record
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in record.items() if k in ("alone", "spinner")}, indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
