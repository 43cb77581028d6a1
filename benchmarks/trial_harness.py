"""The driver and the case loop that the users' trials share (``user_trial_long_rows.py``,
``user_trial_backward.py``): each case runs in a child process, restarted after a case that broke the CUDA
context or hung, one line per case (PASS / FAIL / EXC / SKIP), a summary at the end.

The child tells the driver what it does in lines of its own: ``@@TOTAL n`` (cases in all), ``@@NAME i name``
(optional: names for the summary of cases never reached), ``@@START i name`` before case i; every other line
is passed through. A case's result line starts ``PASS #i``, ``FAIL #i``, ``EXC  #i`` or ``SKIP #i``.
"""
import gc
import os
import queue
import re
import subprocess
import sys
import threading
import time

RESULT_RE = re.compile(r"^(PASS|FAIL|EXC|SKIP)\s+#\s*(\d+)\s")


def drive(script: str, args: list, budget_s: float, case_timeout_s: float, only: str | None = None) -> int:
    """Run ``python -u script --child START *args`` until every case has a result: a child that dies or stays
    ``case_timeout_s`` in one case is killed, that case counted EXC, and a new child starts after it. Then the
    summary (cases whose name matches ``only``, if given). Returns 0 when no case failed."""
    t0 = time.time()
    env = dict(os.environ, TRIAL_T0=str(t0))
    results, names = {}, {}
    start, total = 0, None
    while True:
        cmd = [sys.executable, "-u", os.path.abspath(script), "--child", str(start)] + list(args)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env)
        lines = queue.Queue()

        def pump(stream=p.stdout, lines=lines):
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        current, t_case, killed = None, time.time(), None
        while True:
            try:
                line = lines.get(timeout=1.0)
            except queue.Empty:
                now = time.time()
                if current is not None and now - t_case > case_timeout_s:
                    killed = f"no result after {now - t_case:.0f}s (TRIAL_CASE_TIMEOUT): child killed"
                elif now - t0 > budget_s + case_timeout_s:
                    killed = "past the budget: child killed"
                if killed:
                    p.kill()
                    break
                if p.poll() is not None and lines.empty():
                    time.sleep(0.5)
                    if lines.empty():
                        break
                continue
            if line is None:
                break
            if line.startswith("@@START "):
                parts = line.rstrip("\n").split(" ", 2)
                current, t_case = int(parts[1]), time.time()
                if len(parts) > 2:
                    names.setdefault(current, parts[2])
                continue
            if line.startswith("@@TOTAL "):
                total = int(line.split()[1])
                continue
            if line.startswith("@@NAME "):
                parts = line.rstrip("\n").split(" ", 2)
                names[int(parts[1])] = parts[2]
                continue
            m = RESULT_RE.match(line)
            if m:
                idx = int(m.group(2))
                results[idx] = (m.group(1), line.rstrip("\n"))
                if idx == current:
                    current = None
            sys.stdout.write(line)
            sys.stdout.flush()
        rc = p.wait()
        if rc == 0 and not killed:
            break
        if current is not None and current not in results:
            why = killed or f"child died (rc={rc}) during the case"
            line = f"EXC  #{current:3d} {names.get(current, '?')} [{time.time() - t_case:.1f}s] {why}"
            results[current] = ("EXC", line)
            print(line, flush=True)
        print(f"!! child exited rc={rc}{' (' + killed + ')' if killed else ''}; t={time.time() - t0:.0f}s",
              flush=True)
        if current is not None:
            nxt = current + 1
        else:
            done = [i for i in results if i >= start]
            nxt = (max(done) + 1) if done else start
        if nxt <= start and current is None:
            print("!! no case finished in that child: giving up", flush=True)
            break
        start = nxt
        if (total is not None and start >= total) or time.time() - t0 > budget_s + case_timeout_s:
            break
    total = total if total is not None else (max(results) + 1 if results else 0)
    counts = {"PASS": 0, "FAIL": 0, "EXC": 0, "SKIP": 0}
    bad, selected = [], 0
    for i in range(total):
        if only is not None and not re.search(only, names.get(i, "")):
            continue
        selected += 1
        status, line = results.get(i, ("SKIP", f"SKIP #{i:3d} {names.get(i, '?')}: not reached"))
        counts[status] += 1
        if status != "PASS":
            bad.append(line)
    print(f"== summary: {selected} cases: {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['EXC']} EXC, "
          f"{counts['SKIP']} SKIP in {time.time() - t0:.0f}s (budget {budget_s:.0f}s)", flush=True)
    for line in bad:
        print("   " + (line if len(line) < 400 else line[:400] + " ..."), flush=True)
    print(f"== driver done in {time.time() - t0:.0f}s", flush=True)
    return 0 if counts["FAIL"] == counts["EXC"] == 0 else 1


def run_cases(cases, start: int, t0: float, budget_s: float, gpu: bool, skip=None) -> None:
    """The child's loop over ``cases`` (``(name, fn, ...)``; ``fn()`` returns ``(ok, detail)``) from ``start``:
    ``@@START``, the case (seeded by its index), its result line; then the CUDA context checked, and the child
    leaves (exit 3) if the case broke it. ``skip(i, case)``: None to run the case, "" to leave it out silently,
    else the reason of a SKIP line."""
    import torch

    for i in range(start, len(cases)):
        name, fn = cases[i][0], cases[i][1]
        why = skip(i, cases[i]) if skip else None
        if why is None and time.time() - t0 > budget_s:
            why = f"out of time (TRIAL_BUDGET={budget_s:.0f}s)"
        if why is not None:
            if why:
                print(f"SKIP #{i:3d} {name}: {why}", flush=True)
            continue
        print(f"@@START {i} {name}", flush=True)
        torch.manual_seed(1000 + i)
        t = time.time()
        try:
            ok, detail = fn()
            if gpu:
                torch.cuda.synchronize()
            print(f"{'PASS' if ok else 'FAIL'} #{i:3d} {name} [{time.time() - t:.1f}s] {detail}", flush=True)
        except Exception as e:
            msg = str(e).replace("\n", " / ")
            print(f"EXC  #{i:3d} {name} [{time.time() - t:.1f}s] {type(e).__name__}: {msg[:700]}", flush=True)
        try:
            gc.collect()
            if gpu:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        except Exception as e:
            print(f"!! CUDA context broken after #{i}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            sys.stdout.flush()
            os._exit(3)
    print(f"== child done at t={time.time() - t0:.0f}s", flush=True)
