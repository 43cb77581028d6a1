"""Which hints a learner used, read from their notebook, and the cap on an exercise whose answer they were shown.

Showing a hint (``softmax_lab.hints``) leaves a ``display_data`` output in the notebook whose output metadata is

    {"softmax_lab": {"hint": {"exercise": "<id>", "level": 1..4}, "hints": {"<id>": <highest level>, ...}}}

(older notebooks have only ``hint``), and the Jupyter server's pre-save hook of `make lab` keeps the highest
levels in the notebook's metadata, ``{"softmax_lab": {"hints": {"<id>": <level>}}}``, so that re-running,
clearing or deleting a hint cell does not lower them.

Levels 1-3 are the registry's hints (concept area, direction, key line); level 4 is the complete answer. The
grader takes the highest level per exercise from the submitted notebook's metadata and outputs (any cell) and
from the cell records of its run under nbval, shows it in the gradebook's ``hints`` column and the feedback, and
caps the points of an exercise whose level 4 was shown at ``answer_hint_cap`` x its points (default 0.5;
``softmax-lab grade --answer-hint-cap``).

The record is what the notebook holds: a learner who edits the notebook's JSON can delete it. It tells
instructors who needed help; it is not a proctoring tool.
"""
from __future__ import annotations

ANSWER_LEVEL = 4
DEFAULT_ANSWER_HINT_CAP = 0.5
MAX_ID = 200


def hint_of(output) -> tuple[str, int] | None:
    """(exercise, level) when ``output`` is a hint's display_data output, else None (malformed ones ignored)."""
    if not isinstance(output, dict) or output.get("output_type") != "display_data":
        return None
    meta = output.get("metadata")
    hint = meta.get("softmax_lab", {}).get("hint") if isinstance(meta, dict) and isinstance(
        meta.get("softmax_lab"), dict) else None
    if not isinstance(hint, dict):
        return None
    ident, level = hint.get("exercise"), hint.get("level")
    return (ident, level) if _level(ident, level) else None


def _level(ident, level) -> bool:
    return (isinstance(ident, str) and 0 < len(ident) <= MAX_ID and isinstance(level, int)
            and not isinstance(level, bool) and 1 <= level <= ANSWER_LEVEL)


def levels_in(value) -> dict[str, int]:
    """A ``{"<id>": level}`` record (the metadata's or an output's ``hints``), malformed entries dropped."""
    if not isinstance(value, dict):
        return {}
    return {ident: level for ident, level in list(value.items())[:MAX_ID] if _level(ident, level)}


def merge(levels: dict[str, int], found) -> dict[str, int]:
    """``levels`` updated with every (exercise, level) in ``found``, keeping the highest level per exercise."""
    for ident, level in found:
        levels[ident] = max(level, levels.get(ident, 0))
    return levels


def _softmax_lab(holder) -> dict:
    meta = holder.get("metadata") if isinstance(holder, dict) else None
    mine = meta.get("softmax_lab") if isinstance(meta, dict) else None
    return mine if isinstance(mine, dict) else {}


def levels_used(nb) -> dict[str, int]:
    """The highest hint level per exercise recorded in a notebook: its metadata, and its outputs (any cell)."""
    if not isinstance(nb, dict):
        return {}
    found = list(levels_in(_softmax_lab(nb).get("hints")).items())
    for cell in nb.get("cells", []) if isinstance(nb.get("cells"), list) else []:
        outputs = cell.get("outputs", []) if isinstance(cell, dict) else []
        for out in outputs if isinstance(outputs, list) else []:
            found += [h for h in [hint_of(out)] if h]
            if isinstance(out, dict) and out.get("output_type") == "display_data":
                found += list(levels_in(_softmax_lab(out).get("hints")).items())
    return merge({}, found)


ANSWER_NOTE = "note: you were shown the complete answer"  # (how the row's note starts: `check` prints it)


def capped(points: float, max_points: float, level: int, cap: float) -> tuple[float, str]:
    """Points after the answer-hint cap, and a note for the row ('' when nothing changed)."""
    if level < ANSWER_LEVEL:
        return points, ""
    limit = round(max_points * cap, 2)
    note = (f"{ANSWER_NOTE} (hint level {ANSWER_LEVEL}): this exercise counts at most "
            f"{cap:.0%} of its points ({limit:g}/{max_points:g})")
    return (min(points, limit), note) if points > limit else (points, note)
