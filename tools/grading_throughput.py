"""Grading throughput: COUNT synthetic submissions of one chapter graded here (--jobs 1, 2) and on a Dask LocalCluster
(1, 2 workers, one notebook each at a time), each run timed end to end; the record goes to a JSON file.

    PYTHONPATH=code .venv/bin/python tools/grading_throughput.py --chapter 02 --count 100 \\
        --out benchmarks/records/grading-dask-throughput.json

The submissions are the chapter's learner notebook with answers pasted in, in four kinds taken in turn: the model
answers, one exercise left blank, a wrong answer (padding with 0 instead of -inf where the chapter pads), and the
model answers reworded (a comment naming the learner). Every run grades all of them (--force) with bubblewrap and
cgroups, as an instructor would; the statuses must agree between runs, or the record says so.
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_class(chapter: str, count: int, folder: Path) -> Path:
    import nbformat

    from softmax_lab.course.build import learner_notebook
    from softmax_lab.course.notebook import tag_value

    solution_path = next((ROOT / "solutions").glob(f"{chapter}_*.ipynb"))
    solution = nbformat.read(str(solution_path), as_version=4)
    answers = {tag_value(c, p): c.source for c in solution.cells for p in ("exercise:", "answer:") if tag_value(c, p)}
    for k in range(count):
        nb = learner_notebook(solution)
        kind = k % 4
        exercises = [c for c in nb.cells if tag_value(c, "exercise:")]
        for cell in nb.cells:
            ident = tag_value(cell, "exercise:") or tag_value(cell, "answer:")
            if ident and ident in answers:
                cell.source = answers[ident]
        if kind == 1 and exercises:      # one exercise left as handed out
            blank = learner_notebook(solution)
            exercises[-1].source = next(c.source for c in blank.cells
                                        if tag_value(c, "exercise:") == tag_value(exercises[-1], "exercise:"))
        elif kind == 2 and exercises:    # the chapter's pitfall where it has one
            exercises[0].source = exercises[0].source.replace('other=float("-inf")', "other=0.0")
        elif kind == 3 and exercises:    # the same answers, reworded
            exercises[0].source = f"# learner {k:03d}: my own words\n" + exercises[0].source
        path = folder / f"learner{k:03d}" / solution_path.name
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(path))
    return solution_path


def statuses(gradebook: Path) -> dict[str, int]:
    with open(gradebook, newline="", encoding="utf-8") as f:
        return dict(collections.Counter(r["status"] for r in csv.DictReader(f)))


def grade(subs: Path, out: Path, extra: list[str]) -> float:
    cmd = [sys.executable, "-m", "softmax_lab.cli", "grade", str(subs), "--out", str(out), "--force", *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "code"))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode:
        raise SystemExit(f"grade {' '.join(extra)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chapter", default="02")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--runs", default="local:1,local:2,dask:1,dask:2",
                    help="comma-separated WHERE:N (local:JOBS, dask:WORKERS)")
    ap.add_argument("--out", type=Path, default=None, help="JSON record to write (default: print it)")
    args = ap.parse_args(argv)
    from distributed import LocalCluster

    command = "PYTHONPATH=code .venv/bin/python tools/grading_throughput.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    record = {"what": "synthetic submissions of a chapter graded by `softmax-lab grade` (bubblewrap + cgroups, "
                      "--force): wall time of the whole command, from its start to its exit",
              "machine": {"cpus": os.cpu_count(), "gpu": "none (Triton's interpreter on the CPU)",
                          "cpu": _cpu_model(), "python": platform.python_version(), "system": platform.platform()},
              "runs": []}
    if args.out and args.out.exists():  # runs of several invocations (other counts) gather in one record
        record["runs"] = json.loads(args.out.read_text(encoding="utf-8"))["runs"]
    with tempfile.TemporaryDirectory(prefix="softmax-lab-throughput-") as tmp:
        subs = Path(tmp) / "submissions"
        make_class(args.chapter, args.count, subs)
        for spec in args.runs.split(","):
            where, n = spec.split(":")
            load = round(os.getloadavg()[0], 2)  # the 1-minute load average as the run starts
            out = Path(tmp) / f"{where}{n}" / "gradebook.csv"
            if where == "local":
                took = grade(subs, out, ["--jobs", n])
                run = {"where": f"here, --jobs {n}"}
            else:
                t0 = time.monotonic()
                with LocalCluster(n_workers=int(n), threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
                    started = time.monotonic() - t0
                    took = grade(subs, out, ["--dask", cluster.scheduler_address])
                run = {"where": f"Dask LocalCluster, {n} worker(s) x 1 thread", "cluster_start_s": round(started, 1)}
            run.update(chapter=args.chapter, count=args.count, wall_s=round(took, 1),
                       per_submission_s=round(took / args.count, 2), statuses=statuses(out),
                       date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), command=command,
                       load_average_at_start=load)
            record["runs"].append(run)
            print(json.dumps(run), flush=True)
            save(record, args.out)  # after every run: a long measurement stopped early keeps what it measured
    return 0


def save(record: dict, out: Path | None) -> None:
    by_count = collections.defaultdict(set)
    for r in record["runs"]:
        by_count[(r["chapter"], r["count"])].add(json.dumps(r["statuses"], sort_keys=True))
    record["statuses_agree"] = all(len(s) == 1 for s in by_count.values())
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
