"""Hints on demand: every exercise has a ladder of four levels, revealed one at a time.

    softmax_lab.hint("ch04-fused")       # the next level: 1, then 2, then 3
    softmax_lab.hint("ch04-fused", 2)    # a level you ask for
    softmax_lab.hint("ch04-fused", 4)    # the complete answer (this caps the exercise's points)
    softmax_lab.hint_button("ch04-fused")  # the same, one click per level (ipywidgets)

1. *concept area*: which idea of the chapter the exercise is about;
2. *specific direction*: what to do, not how;
3. *key line*: the one line (or expression) that matters most;
4. *complete answer*: the solution's code. It is never written twice: it is taken from the exercise's
   ``### BEGIN SOLUTION`` / ``### END SOLUTION`` region in ``solutions/``.

Levels 1-3 live in the course registry (``course/exercises/chNN.toml``, ``hints = [...]``). In a checkout both
are read from the sources; an installed package reads ``data/hints/chNN.json``, which ``write_hint_data()``
generates (``python -m softmax_lab.hints``; the build calls it; ``tests/test_hints.py`` fails when one is stale).

Every hint shown is recorded, so that re-running, clearing or deleting a hint cell never lowers the level:

* in its output: a display whose metadata is ``{"softmax_lab": {"hint": {"exercise": <id>, "level": <n>},
  "hints": {<id>: <highest level>, ...}}}`` (every hint output carries the highest level of each exercise
  shown in this kernel, and the kernel remembers them across restarts, see below);
* beside the notebook, when the kernel knows which notebook it runs (Jupyter tells it): ``.softmax-lab-hints.json``
  holds the highest levels per notebook;
* in the notebook's metadata ``softmax_lab.hints``: ``save_hook``, which `make lab` installs as the Jupyter
  server's pre-save hook, writes there at every save the highest level found in the outputs, the metadata
  already saved and the file beside the notebook.

The grader reads the outputs and the metadata (``softmax_lab.grading.hints``), lists the hints used in the
gradebook and caps the points of an exercise whose complete answer (level 4) was shown. The text is plain
markdown, so it reads the same where widgets do not render.
"""
from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

from .cells import notebook_path

PACKAGE = Path(__file__).resolve().parent
REGISTRY_DIR = PACKAGE / "course" / "exercises"
DATA_DIR = PACKAGE / "data" / "hints"   # one generated file per chapter: chNN.json
LEVELS = 4
NAMES = {1: "concept area", 2: "specific direction", 3: "key line", 4: "complete answer"}
BEGIN, END, HINT = "### BEGIN SOLUTION", "### END SOLUTION", "# HINT:"
WITHHELD = ("the complete answer is not in this edition of the course (the class edition): hints 1-3 are "
            "all there is; ask your instructor.")
CAP_NOTE = ("Level 4 is the complete answer: once it is shown, this exercise earns at most {cap:.0%} of its "
            "points when graded (your notebook records which hints you used).")

RECORD_FILE = ".softmax-lab-hints.json"  # beside the notebooks: {notebook file name: {exercise id: level}}

_shown: dict[str, int] = {}   # exercise id -> highest level shown (this kernel, and what it found recorded)
_seeded = False               # _shown has been read from the records of this kernel's notebook


class HintError(ValueError):
    """An unknown exercise id or level (the message says what exists)."""


# ------------------------------------------------------------------------------------------ the sources


def _repo_solutions() -> Path | None:
    """solutions/ of the checkout this package sits in (code/softmax_lab -> the repository root), if any."""
    root = PACKAGE.parents[1]
    folder = root / "solutions"
    return folder if folder.is_dir() and (root / "Makefile").is_file() else None


def read_registry(folder: Path = REGISTRY_DIR) -> dict[str, dict]:
    """Every exercise of the course registry (``softmax_lab.course``): id -> {"chapter", "points", "hints"}."""
    from .course import load_registry

    return {ex.id: {"chapter": ex.chapter, "points": ex.points, "hints": list(ex.hints)}
            for ex in load_registry(Path(folder)).exercises()}


def solution_regions(source: str) -> list[str]:
    """The code of each solution region of one cell (marker lines and ``# HINT:`` lines dropped, dedented)."""
    regions, current = [], None
    for line in source.split("\n"):
        mark = line.strip()
        if mark == BEGIN:
            current = []
        elif mark == END:
            if current is not None:
                regions.append(textwrap.dedent("\n".join(current)).strip("\n"))
            current = None
        elif current is not None and not mark.startswith(HINT):
            current.append(line)
    return regions


def answers_from_solutions(solutions: Path) -> dict[str, list[str]]:
    """exercise id -> its solution regions, read from the solution notebooks (json only: no nbformat needed)."""
    out: dict[str, list[str]] = {}
    for path in sorted(Path(solutions).glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            ids = [t[len("exercise:"):] for t in cell.get("metadata", {}).get("tags", []) if t.startswith("exercise:")]
            if ids:
                src = cell.get("source", "")
                out[ids[0]] = solution_regions("".join(src) if isinstance(src, list) else src)
    return out


def hint_data(solutions: Path | None = None, registry: Path = REGISTRY_DIR) -> dict:
    """Everything the ladder needs, from the sources: {"exercises": {id: {chapter, points, hints, answer}}}."""
    solutions = solutions or _repo_solutions()
    if solutions is None:
        raise HintError("no solutions/ folder here: the course's sources are needed to derive the answers")
    answers = answers_from_solutions(solutions)
    table = read_registry(registry)
    for ident, entry in table.items():
        entry["answer"] = answers.get(ident, [])
    return {"exercises": dict(sorted(table.items()))}


def hint_data_texts(solutions: Path | None = None, registry: Path = REGISTRY_DIR) -> dict[str, str]:
    """The text of each generated file: {"chNN.json": text}, one per chapter with exercises."""
    chapters: dict[str, dict] = {}
    for ident, entry in hint_data(solutions, registry)["exercises"].items():
        chapters.setdefault(f"ch{entry['chapter']}.json", {})[ident] = entry
    return {name: json.dumps({"exercises": table}, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
            for name, table in sorted(chapters.items())}


def write_hint_data(solutions: Path | None = None, target: Path = DATA_DIR, check: bool = False) -> list[str]:
    """Write data/hints/chNN.json (the ladders of an installed package) from the sources; returns the names of
    the files that changed (stale ones are rewritten, files of chapters that no longer exist removed).
    With ``check``, nothing is written: the names are those that would change.
    The build calls this, so an installed package's answers are always the solutions' own."""
    texts = hint_data_texts(solutions)
    target = Path(target)
    stale = [name for name, text in texts.items()
             if not (target / name).is_file() or (target / name).read_text(encoding="utf-8") != text]
    gone = [p.name for p in sorted(target.glob("ch*.json")) if p.name not in texts]
    if not check:
        target.mkdir(parents=True, exist_ok=True)
        for name in stale:
            (target / name).write_text(texts[name], encoding="utf-8")
        for name in gone:
            (target / name).unlink()
    return stale + gone


_cache: dict | None = None


def table() -> dict[str, dict]:
    """id -> entry: from the sources in a checkout, else from the packaged data/hints/chNN.json."""
    global _cache
    if _cache is None:
        if _repo_solutions() is not None and REGISTRY_DIR.is_dir():
            _cache = hint_data()["exercises"]
        elif any(DATA_DIR.glob("ch*.json")):
            _cache = {}
            for path in sorted(DATA_DIR.glob("ch*.json")):
                _cache.update(json.loads(path.read_text(encoding="utf-8"))["exercises"])
        else:
            raise HintError("this installation has neither the course sources nor data/hints/")
    return _cache


# ------------------------------------------------------------------------------------------ the ladder


def _entry(exercise_id: str) -> dict:
    known = table()
    if exercise_id in known:
        return known[exercise_id]
    match = re.match(r"ch(\d\d)-", str(exercise_id))
    same = sorted(k for k, v in known.items() if match and v["chapter"] == match.group(1))
    listed = same or sorted(known)
    where = f"chapter {match.group(1)}'s exercises" if same else "the course's exercises"
    raise HintError(f"no exercise {exercise_id!r}; {where}: {', '.join(listed)}")


def answer_cap() -> float:
    """The share of an exercise's points left once its complete answer was shown, as the course's grader applies
    it: ``[grading] answer_hint_cap`` of ``softmax-lab.toml`` in a checkout, else the grader's default."""
    from .grading.hints import DEFAULT_ANSWER_HINT_CAP

    folder = _repo_solutions()
    if folder is None:
        return DEFAULT_ANSWER_HINT_CAP
    try:
        from .grading.options import course_hint_cap

        return course_hint_cap(folder)
    except Exception:
        return DEFAULT_ANSWER_HINT_CAP


def cap_note() -> str:
    return CAP_NOTE.format(cap=answer_cap())


def level_text(exercise_id: str, level: int) -> str:
    """The markdown of one level of one exercise's ladder (4 = the complete answer, from the solution)."""
    entry = _entry(exercise_id)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= LEVELS:
        raise HintError(f"hint levels are 1, 2, 3 and 4 (the complete answer); got {level!r}")
    head = f"**Hint {level}/{LEVELS} for `{exercise_id}` ({NAMES[level]})**"
    if level < LEVELS:
        hints = entry["hints"]
        if len(hints) < level:
            return f"{head}: this exercise has no hint at this level yet."
        return f"{head}: {hints[level - 1]}"
    if "answer" not in entry:  # the class edition (softmax-lab release) ships hints 1-3 only
        return f"{head}: {WITHHELD}"
    regions = entry.get("answer") or []
    if not regions:
        return f"{head}: no solution region was found for this exercise."
    parts = [f"{head}. {cap_note()}"]
    for k, code in enumerate(regions, 1):
        where = (f"gap {k} of {len(regions)}: replace its `raise NotImplementedError(...)` line with"
                 if len(regions) > 1 else "replace the `raise NotImplementedError(...)` line with")
        parts.append(f"{where}\n\n```python\n{code}\n```")
    return "\n\n".join(parts)


def record(exercise_id: str | None = None, level: int = 0) -> dict:
    """The output metadata that records a hint in the saved notebook (the grader reads it): the level this
    output shows, and the highest level of every exercise seen so far (``exercise_id`` None: only those)."""
    meta: dict = {"hints": dict(sorted(_levels().items()))} if _levels() else {}
    if exercise_id is not None:
        meta["hint"] = {"exercise": exercise_id, "level": int(level)}
    return {"softmax_lab": meta} if meta else {}


# ------------------------------------------------------------------------------------------ the records


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _valid(levels) -> dict[str, int]:
    """The (exercise id, level) pairs of a record that make sense (anything else is dropped)."""
    from .grading.hints import levels_in

    return levels_in(levels)


def recorded_levels(path: Path) -> dict[str, int]:
    """The highest level per exercise recorded for the notebook ``path``: in the file beside it, and in the
    notebook itself as saved (its metadata and its outputs)."""
    from .grading.hints import levels_used, merge

    beside = _valid(_read_json(path.parent / RECORD_FILE).get(path.name, {}))
    return merge(beside, levels_used(_read_json(path)).items())


def _levels() -> dict[str, int]:
    """_shown, first completed from what this kernel's notebook has recorded (a restarted kernel goes on)."""
    from .grading.hints import merge

    global _seeded
    if not _seeded:
        _seeded = True
        path = notebook_path()
        if path is not None:
            merge(_shown, recorded_levels(path).items())
    return _shown


def _remember(exercise_id: str, level: int) -> None:
    """Raise the recorded level of an exercise: in this kernel and in the file beside its notebook."""
    from .grading.hints import merge

    levels = _levels()
    levels[exercise_id] = max(levels.get(exercise_id, 0), int(level))
    path = notebook_path()
    if path is None:
        return
    store = path.parent / RECORD_FILE
    try:
        data = _read_json(store)
        mine = merge(_valid(data.get(path.name, {})), levels.items())
        data[path.name] = dict(sorted(mine.items()))
        tmp = store.with_name(store.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(store)
    except OSError:  # a read-only folder: the outputs and the saved metadata still record it
        pass


def save_hook(model=None, path: str = "", contents_manager=None, **kwargs) -> None:
    """Jupyter server pre-save hook (``--ContentsManager.pre_save_hook=softmax_lab.hints.save_hook``): write into
    the notebook's metadata ``softmax_lab.hints`` the highest level of each exercise found in what is being
    saved, in the notebook as saved before, and in the file beside it. So a hint cell re-run, cleared or deleted
    never lowers the record. It never stops a save: any problem leaves the notebook as it was given."""
    try:
        if not isinstance(model, dict) or model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
            return
        from .grading.hints import levels_used, merge

        nb = model["content"]
        levels = levels_used(nb)
        root = getattr(contents_manager, "root_dir", None)
        if root:
            levels = merge(levels, recorded_levels(Path(root) / path.lstrip("/")).items())
        if not levels:
            return
        meta = nb.get("metadata")
        if not isinstance(meta, dict):
            meta = nb["metadata"] = {}
        mine = meta.get("softmax_lab")
        mine = dict(mine) if isinstance(mine, dict) else {}
        mine["hints"] = dict(sorted(levels.items()))
        meta["softmax_lab"] = mine  # assigned last: a NotebookNode copies what it is given
    except Exception:
        return


def _recorded(exercise_id: str, level: int) -> int:
    """The level the notebook records: where the class edition withholds the answer, level 4 showed nothing
    (so it caps nothing) and is recorded as 3."""
    return LEVELS - 1 if level == LEVELS and "answer" not in _entry(exercise_id) else level


def _bundle(exercise_id: str, level: int, text: str | None = None) -> dict:
    text = level_text(exercise_id, level) if text is None else text
    return {"text/markdown": text, "text/plain": _plain(text)}


def _plain(markdown: str) -> str:
    return markdown.replace("**", "").replace("```python\n", "").replace("```", "")


def _publish(data: dict, metadata: dict | None = None) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: text only
        print(data["text/plain"])
        return
    if get_ipython() is None:
        print(data["text/plain"])
        return
    display(data, raw=True, metadata=metadata or {})


def next_level(exercise_id: str) -> int:
    """The level ``hint(id)`` shows next: one past the highest shown, but never 4 unasked."""
    return min(_levels().get(exercise_id, 0) + 1, LEVELS - 1)


def hint(exercise_id: str, level: int | None = None) -> None:
    """Show the next level of an exercise's hint ladder (or ``level``); the notebook records it.

    ``hint(id)`` walks levels 1, 2, 3. The complete answer (level 4) comes only when asked for by number,
    ``hint(id, 4)``, because it caps the exercise's points."""
    try:
        _entry(exercise_id)
        if level is None:
            seen = _levels().get(exercise_id, 0)
            if seen >= LEVELS - 1:
                shown = "the complete answer (level 4)" if seen == LEVELS else "hints 1-3"
                _publish(_bundle(exercise_id, 0, f"You have seen {shown} of `{exercise_id}`. {cap_note()} "
                                                 f'To see it: `softmax_lab.hint("{exercise_id}", 4)`.'), record())
                return
            level = next_level(exercise_id)
        text = level_text(exercise_id, level)
    except HintError as err:
        _publish({"text/plain": str(err), "text/markdown": str(err)})
        return
    shown = _recorded(exercise_id, level)  # the class edition withholds level 4: it records 3
    _remember(exercise_id, shown)
    _publish(_bundle(exercise_id, level, text), record(exercise_id, shown))


def hint_button(exercise_id: str):
    """A button that reveals the next level at each click (the 4th asks to be clicked twice: it caps the
    points). The levels shown go to a display output made when the cell runs, so the saved notebook records
    them (output metadata, as for ``hint``); where widgets don't render that output says to call ``hint()``."""
    try:
        _entry(exercise_id)
    except HintError as err:
        _publish({"text/plain": str(err), "text/markdown": str(err)})
        return None
    import ipywidgets as widgets
    from IPython.display import display

    button = widgets.Button(description="Show hint 1 of 4", layout=widgets.Layout(width="auto"))
    shown: list[str] = []
    state = {"armed": False}
    idle = f'No hint shown yet for `{exercise_id}` (no button above? run `softmax_lab.hint("{exercise_id}")`).'
    display(button)
    # the idle output carries the levels already recorded: re-running this cell does not lower them
    handle = display({"text/markdown": idle, "text/plain": _plain(idle)}, raw=True, display_id=True,
                     metadata=record())

    def click(_=None) -> None:
        level = len(shown) + 1
        if level > LEVELS:
            return
        if level == LEVELS and not state["armed"]:
            state["armed"] = True
            button.description = (f"Click again for the complete answer (caps this exercise at {answer_cap():.0%} "
                                  "of its points)")
            button.button_style = "warning"
            return
        shown.append(level_text(exercise_id, level))
        _remember(exercise_id, _recorded(exercise_id, level))
        text = "\n\n".join(shown)
        handle.update({"text/markdown": text, "text/plain": _plain(text)}, raw=True,
                      metadata=record(exercise_id, _recorded(exercise_id, level)))
        button.button_style = ""
        if level == LEVELS:
            button.description, button.disabled = "All 4 levels shown", True
        elif level == LEVELS - 1:
            button.description = "Show the complete answer (level 4)"
        else:
            button.description = f"Show hint {level + 1} of 4"

    button.on_click(click)
    return HintButton(button, handle)


class HintButton:
    """What ``hint_button`` returns: the button and the display handle it updates. Shows nothing itself (the
    button is already displayed), so a cell ending in ``hint_button(...)`` does not show it twice."""

    def __init__(self, button, handle):
        self.button, self.handle = button, handle

    def _ipython_display_(self) -> None:
        pass


if __name__ == "__main__":  # python -m softmax_lab.hints: regenerate data/hints/ from the sources
    for changed_name in write_hint_data() or ["(nothing changed)"]:
        print(f"data/hints/{changed_name}")

__all__ = ["hint", "hint_button", "level_text", "record", "read_registry", "solution_regions", "hint_data",
           "write_hint_data", "save_hook", "recorded_levels", "HintError", "LEVELS"]
