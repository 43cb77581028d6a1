"""The performance goal, line by line, from a saved run of ``softmax-lab bench --lm-widths --peers``.

``softmax-lab bench --scorecard RUN.json [--since EARLIER.json]`` prints, with no GPU:

* the table: each shape's % of copy (GPU time) for torch, Liger, QuACK and ``softmax_lab.softmax``, the earlier
  run's figure, the speed against torch and QuACK, and the eager cost per call;
* the goal, line by line: met, MISSED (with the shapes and numbers that miss it) or NOT JUDGED (the run holds
  nothing that line applies to: no peers, no eager times, no shape of 16 MB):

  1. at least 90% of copy on every shape of 16 MB (16·10⁶ bytes of input) or more;
  2. at least 1.0x QuACK wherever QuACK runs;
  3. at least 1.0x torch on every shape;
  4. eager calls: per call at most max(torch's, our GPU time + 3 µs); the issue's tiny inputs (1x128, 32x1024 and
     4096x1024 fp32) at most torch's;
  5. (with ``--since``) at least 95% of copy wherever the earlier run had it.

  A shape where ``softmax_lab.softmax`` failed, gave a wrong result or was not timed misses every line it
  belongs to; a number that misses is never printed as its bound (0.9997x, not 1.00x; 89.96%, not 90.0%).
  A run cut short (``meta.partial``: the bench saves after every shape) says so first.

A run made with ``--rounds K`` timed every implementation K times in turn; each ratio is then the median of the K
rounds' ratios, with their range, so that a 0.98x can be told from the drift between rounds.
``softmax-lab bench --history RUN.json ...`` gives each line's ratio to QuACK in several runs, oldest first.
"""
from __future__ import annotations

import json
import os
import statistics

COPY_SHARE = 90  # % of copy, on every shape of at least BIG_BYTES
BIG_BYTES = 16 * 10**6  # one input tensor's bytes ("16 MB", as the goal says)
KEEP_SHARE = 95  # % of copy kept wherever the earlier run had it
EAGER_SLACK_MS = 3e-3  # eager per call: at most max(torch's, GPU time + 3 µs)
TINY_SHAPES = {("forward", 1, 128, "float32"), ("forward", 32, 1024, "float32"), ("forward", 4096, 1024, "float32")}
OURS, TORCH, QUACK, LIGER = "softmax_lab.softmax", "torch.softmax", "quack", "liger"
DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
REFUSALS = ("divisible", "Input N", "exceeds the recommended")  # a peer that turns the shape down before running
FIELDS = ("kind", "rows", "cols", "dtype", "impl")


def load(path: str) -> dict:
    """A saved run, ``{"meta": {...}, "records": [...]}`` as ``softmax-lab bench`` writes it; ValueError naming
    the file and what is wrong with it otherwise."""
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: {type(err).__name__}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise ValueError(f"{path}: holds no 'records' list (not a file written by softmax-lab bench)")
    if not isinstance(data.get("meta", {}), dict):
        raise ValueError(f"{path}: its 'meta' is not an object")
    for i, r in enumerate(data["records"]):
        lacks = [f for f in FIELDS if not isinstance(r, dict) or f not in r]
        if lacks:
            raise ValueError(f"{path}: record {i} lacks {', '.join(lacks)} (each record of softmax-lab bench names its "
                             "kind, rows, cols, dtype and impl)")
    return data


def by_shape(records) -> dict:
    """``{(kind, rows, cols, dtype): {impl: record}}``, shapes in the run's order."""
    shapes = {}
    for r in records:
        shapes.setdefault((r["kind"], r["rows"], r["cols"], r["dtype"]), {})[r["impl"]] = r
    return shapes


def time_of(rec, key="ms"):
    """A record's time under ``key`` (ms), or None where it has none (not timed, failed, or not a time)."""
    t = rec.get(key) if rec else None
    return t if isinstance(t, (int, float)) and t > 0 else None


def speedup(other, ours, key="ms"):
    """How many times faster ours ran than ``other`` (its time over ours), with the (lowest, highest) of the
    per-round ratios when both were timed in the same rounds; (None, None) where either has no time."""
    if time_of(other, key) is None or time_of(ours, key) is None:
        return None, None
    other_rounds, our_rounds = other.get(f"{key}_rounds") or [], ours.get(f"{key}_rounds") or []
    if len(other_rounds) == len(our_rounds) > 1 and all(time_of({key: t}, key) for t in other_rounds + our_rounds):
        ratios = [o / s for o, s in zip(other_rounds, our_rounds)]
        return statistics.median(ratios), (min(ratios), max(ratios))
    return other[key] / ours[key], None


def failure(ours) -> str:
    """'' when softmax_lab.softmax ran, was timed and gave the right result on this shape; else what went wrong."""
    if ours is None:
        return "not run"
    if "error" in ours:
        return f"fails ({str(ours['error'])[:80]})"
    checked = ours.get("checked")
    if checked not in (None, "", "ok", "not checked"):
        checked = str(checked)[:80]
        return checked if checked.startswith("wrong result") else f"wrong result ({checked})"
    return "" if time_of(ours) is not None else "not timed"


def _under(value, *bounds, digits=1):
    """``value`` to ``digits`` places, or to as many as it takes to print it on its own side of every bound (89.96,
    not 90.0, against 90; 65.002, not 65.0, against 65.0)."""
    def same_side(d):
        return all((round(value, d) < b) == (value < b) and (round(value, d) > b) == (value > b) for b in bounds)

    while digits < 9 and not same_side(digits):
        digits += 1
    return f"{value:.{digits}f}"


def _times(ratio, spread, digits=2):
    """A speed ratio as printed: ``0.98×``, with the rounds' range, ``0.98× (0.96-1.01)``; never a miss as 1.00."""
    if ratio is None:
        return "–"
    low_high = f" ({_under(spread[0], 1.0, digits=digits)}-{_under(spread[1], 1.0, digits=digits)})" if spread else ""
    return f"{_under(ratio, 1.0, digits=digits)}×{low_high}"


def _pct(rec, *bounds):
    """A record's % of copy as a table cell (printed on its own side of ``bounds``), or why it has none."""
    if rec is None:
        return "–"
    if "error" in rec:
        return "refuses" if any(s in str(rec["error"]) for s in REFUSALS) else "fails"
    pct = rec.get("pct_copy")
    return _under(pct, *bounds) if isinstance(pct, (int, float)) else "–"


def _us(rec, key):
    return f"{rec[key] * 1e3:.1f}" if time_of(rec, key) is not None else "–"


def _shape(key):
    kind, rows, cols, dtype = key
    return f"{'backward ' if kind == 'backward' else ''}{rows}×{cols} {DTYPE_SHORT.get(dtype, dtype)}"


def table(run: dict, since: dict | None = None, since_name: str = "earlier") -> str:
    earlier = by_shape(since["records"]) if since else {}
    lines = [f"| pass | shape | dtype | torch | Liger | QuACK | softmax_lab | {since_name} | vs torch | vs QuACK | "
             "eager µs: ours (torch, QuACK; our GPU time) |", "|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for key, impls in by_shape(run["records"]).items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        kind, rows, cols, dtype = key
        our_cell = _pct(ours, COPY_SHARE, KEEP_SHARE)
        if failure(ours).startswith("wrong result"):
            our_cell += " (wrong result)"
        eager = "–"
        if time_of(ours, "eager_ms"):
            eager = (f"{_us(ours, 'eager_ms')} ({_us(impls.get(TORCH), 'eager_ms')}, "
                     f"{_us(impls.get(QUACK), 'eager_ms')}; {_us(ours, 'ms')})")
        lines.append(f"| {kind} | {rows}×{cols} | {DTYPE_SHORT.get(dtype, dtype)} | {_pct(impls.get(TORCH))} | "
                     f"{_pct(impls.get(LIGER))} | {_pct(impls.get(QUACK))} | **{our_cell}** | "
                     f"{_pct(earlier.get(key, {}).get(OURS))} | {_times(*speedup(impls.get(TORCH), ours))} | "
                     f"{_times(*speedup(impls.get(QUACK), ours))} | {eager} |")
    return "\n".join(lines)


class _Line:
    """One line of the goal: how many shapes it applies to, and those that miss it."""

    def __init__(self, what, why_not_judged):
        self.what, self.why_not_judged, self.counted, self.misses = what, why_not_judged, 0, []

    def judge(self, key, failed, miss=""):
        """Count the shape ``key`` on this line; it misses where ``failed`` or ``miss`` (what misses) says so."""
        self.counted += 1
        if failed or miss:
            self.misses.append(f"{_shape(key)} {failed or miss}")

    def verdict(self):
        if not self.counted:
            return f"{self.what} ({self.why_not_judged})", None, []
        return f"{self.what}: {self.counted - len(self.misses)} of {self.counted}", not self.misses, self.misses


def goal(run: dict, since: dict | None = None) -> list[tuple[str, bool | None, list[str]]]:
    """The goal's lines: ``(what, met, [the shapes that miss it, with their numbers])``; ``met`` is None where
    the run holds nothing the line applies to."""
    big = _Line(f"≥ {COPY_SHARE}% of copy on every shape of ≥ 16 MB", "no shape of 16 MB or more with a copy beside it")
    quack = _Line("≥ 1.0× QuACK where it runs", "QuACK ran no shape of this run")
    torch_ = _Line("≥ 1.0× torch on every shape", "torch was not timed")
    eager = _Line("eager ≤ max(torch's, GPU time + 3 µs), tiny inputs ≤ torch's", "no eager times in this run")
    keep = _Line(f"≥ {KEEP_SHARE}% kept where the earlier run had it",
                 f"no shape at {KEEP_SHARE}% or more in the earlier run")
    shapes = by_shape(run["records"])
    for key, impls in shapes.items():
        ours = impls.get(OURS)
        if ours is None:
            continue
        _, rows, cols, dtype = key
        failed = failure(ours)
        pct = ours.get("pct_copy") if isinstance(ours.get("pct_copy"), (int, float)) else None
        if rows * cols * ELEMENT_BYTES.get(dtype, 4) >= BIG_BYTES and (pct is not None or failed):
            big.judge(key, failed, f"{_under(pct, COPY_SHARE)}%" if pct is not None and pct < COPY_SHARE else "")
        for line, peer in ((quack, impls.get(QUACK)), (torch_, impls.get(TORCH))):
            if time_of(peer) is not None:
                ratio, spread = speedup(peer, ours)
                line.judge(key, failed, _times(ratio, spread, 3) if ratio is not None and ratio < 1.0 else "")
        torch_rec = impls.get(TORCH)
        if time_of(torch_rec, "eager_ms") is not None and (failed or time_of(ours, "eager_ms") is not None):
            torch_eager = torch_rec["eager_ms"]
            bound = torch_eager if key in TINY_SHAPES else max(torch_eager, ours.get("ms", 0) + EAGER_SLACK_MS)
            our_eager, why = ours.get("eager_ms"), ""
            if our_eager is not None and our_eager > bound:
                whose = " (torch's)" if bound == torch_eager else " (GPU time + 3)"
                why = f"{_under(our_eager * 1e3, bound * 1e3)} µs against {_under(bound * 1e3, our_eager * 1e3)}{whose}"
            eager.judge(key, failed, why)
    for key, impls in (by_shape(since["records"]) if since else {}).items():
        before = impls.get(OURS, {}).get("pct_copy")
        if isinstance(before, (int, float)) and before >= KEEP_SHARE:
            ours = shapes.get(key, {}).get(OURS)
            pct = ours.get("pct_copy") if ours and isinstance(ours.get("pct_copy"), (int, float)) else None
            why = ""
            if ours is None:
                why = "not in this run"
            elif pct is None:
                why = "no copy timed beside it"
            elif pct < KEEP_SHARE:
                why = f"{_under(pct, KEEP_SHARE)}% (was {before:.1f})"
            keep.judge(key, failure(ours) if ours else "", why)
    return [line.verdict() for line in (big, quack, torch_, eager) + ((keep,) if since else ())]


def history(runs) -> str:
    """How much each line's ratio to QuACK moves between runs: ``runs`` as ``(name, run)``, oldest first; one row a
    shape that QuACK runs in any of them, the ratio in each run, and the lowest and highest. A line under 1.0 in
    every run is a real gap, not the drift between runs. A run cut short is marked so in its column's name."""
    tables = [(name + (" (partial)" if run.get("meta", {}).get("partial") else ""), by_shape(run["records"]))
              for name, run in runs]
    keys = list(dict.fromkeys(key for _, shapes in tables for key in shapes))
    lines = ["| shape | " + " | ".join(name for name, _ in tables) + " | lowest-highest |",
             "|---|" + "--:|" * (len(tables) + 1)]
    for key in keys:
        ratios = [speedup(shapes.get(key, {}).get(QUACK), shapes.get(key, {}).get(OURS))[0] for _, shapes in tables]
        seen = [r for r in ratios if r is not None]
        if seen:
            lines.append(f"| {_shape(key)} | " + " | ".join(_times(r, None, 3) for r in ratios)
                         + f" | {_under(min(seen), 1.0, digits=3)}-{_under(max(seen), 1.0, digits=3)} |")
    return "\n".join(lines)


def report(run: dict, since: dict | None = None, since_name: str = "earlier") -> str:
    meta = run.get("meta", {})
    rounds = meta.get("rounds", 1)
    head = (f"{meta.get('device', '?')}, torch {meta.get('torch', '?')}, Triton {meta.get('triton', '?')}, "
            f"{meta.get('date', '?')}: `{meta.get('command', '?')}`")
    if isinstance(rounds, int) and rounds > 1:
        head += f" ({rounds} rounds; each ratio the median of the rounds' ratios (lowest-highest))"
    out = [head, ""]
    if meta.get("partial"):
        out += [f"PARTIAL RUN ({meta['partial']}): the shapes it did not reach are judged on no line.", ""]
    out += [f"torch, Liger, QuACK, softmax_lab, {since_name}: % of a copy of the same bytes, GPU time "
            "(refuses: the peer turns the shape down; fails: it raised)", "", table(run, since, since_name), "",
            "The goal, line by line:"]
    for what, met, misses in goal(run, since):
        verdict = "met" if met else "MISSED" if met is False else "NOT JUDGED"
        out.append(f"- {verdict}: {what}" + (f"; missed on {', '.join(misses)}" if misses else ""))
    return "\n".join(out)


def run_name(path: str) -> str:
    """A run's name in the tables: its file's name without the folder and ``.json``."""
    return os.path.basename(path).removesuffix(".json")
