"""The exercise registry: the course's one declaration of graded work, read from ``exercises/chNN.toml``.

One file per chapter. Each ``[[exercise]]`` has ``id``, ``points``, ``check`` (a function name in
``softmax_lab.checks``) and ``hints`` (three short strings: concept area, direction, key line; the fourth
level, the complete answer, comes from the solution notebook); each ``[[question]]`` has ``id`` and
``points``. Notebook cells only carry the tag ``exercise:<id>`` / ``question:<id>`` saying where each sits;
``softmax-lab build`` checks that the two agree.

An exercise's id also names the module that checks it (``check_module``): ``chNN-some-name`` lives in
``softmax_lab.checks.chNN.some_name`` when chapter NN's checks are a package (a folder ``checks/chNN/``, one
module per exercise), else in ``softmax_lab.checks.chNN``. That module holds the exercise's case table, the
notebook check and the grader's judge (``JUDGES[id]``); the exercises in ``NOTEBOOK_ONLY`` have no judge yet.

Reading it needs the standard library only (tomllib): no torch, so the build and the grader can use it.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

FOLDER = Path(__file__).with_name("exercises")
CHECKS = Path(__file__).resolve().parent.parent / "checks"   # softmax_lab/checks, found without importing it
# Graded in the learner's notebook only: no judge re-runs them in the grader yet.
NOTEBOOK_ONLY: frozenset[str] = frozenset()  # (none today: every exercise has a judge)
HINT_LEVELS = 3  # written in the registry; level 4 is the solution itself


class RegistryError(ValueError):
    """A registry file is unreadable or breaks the format (the message names the file and entry)."""


@dataclass(frozen=True)
class Exercise:
    id: str
    chapter: str
    points: int
    check: str
    hints: tuple[str, ...] = ()


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str
    points: int


@dataclass(frozen=True)
class Chapter:
    chapter: str                      # "04"
    file: Path                        # its chNN.toml
    exercises: tuple[Exercise, ...]
    questions: tuple[Question, ...]


class Registry:
    """Every chapter's exercises and questions, by chapter number and by id."""

    def __init__(self, chapters: list[Chapter]):
        self.chapters = {c.chapter: c for c in chapters}
        self._by_id: dict[str, Exercise | Question] = {}
        for ch in chapters:
            for item in (*ch.exercises, *ch.questions):
                if item.id in self._by_id:
                    other = self.chapters[self._by_id[item.id].chapter].file.name
                    raise RegistryError(f"{ch.file.name}: id {item.id!r} is also declared in {other}")
                self._by_id[item.id] = item

    def exercises(self, chapter: str | None = None) -> list[Exercise]:
        return [e for c in self._pick(chapter) for e in c.exercises]

    def questions(self, chapter: str | None = None) -> list[Question]:
        return [q for c in self._pick(chapter) for q in c.questions]

    def exercise(self, ident: str) -> Exercise | None:
        item = self._by_id.get(ident)
        return item if isinstance(item, Exercise) else None

    def question(self, ident: str) -> Question | None:
        item = self._by_id.get(ident)
        return item if isinstance(item, Question) else None

    def points(self, ident: str) -> int | None:
        """The points of an exercise or question, or None when the registry does not declare it."""
        item = self._by_id.get(ident)
        return None if item is None else item.points

    def _pick(self, chapter: str | None) -> list[Chapter]:
        if chapter is None:
            return [self.chapters[k] for k in sorted(self.chapters)]
        return [self.chapters[chapter]] if chapter in self.chapters else []


def check_module(ident: str, checks: Path = CHECKS) -> str | None:
    """The dotted name of the module that checks and judges exercise ``ident`` (``ch07-row-vector`` ->
    ``softmax_lab.checks.ch07.row_vector``, ``ch03-naive-normalize`` -> ``softmax_lab.checks.ch03``), or None
    when no such file exists. Looks at the files only: imports nothing."""
    chapter, sep, name = ident.partition("-")
    if not (sep and chapter.startswith("ch") and chapter[2:].isdigit() and name):
        return None
    package = __name__.split(".")[0] + ".checks"
    module = name.replace("-", "_")
    if (checks / chapter / "__init__.py").is_file():
        return f"{package}.{chapter}.{module}" if (checks / chapter / f"{module}.py").is_file() else None
    return f"{package}.{chapter}" if (checks / f"{chapter}.py").is_file() else None


def _entry(path: Path, kind: str, k: int, raw) -> dict:
    where = f"{path.name}: [[{kind}]] #{k + 1}"
    if not isinstance(raw, dict):
        raise RegistryError(f"{where} is not a table")
    need = {"exercise": ("id", "points", "check"), "question": ("id", "points")}[kind]
    allowed = set(need) | ({"hints"} if kind == "exercise" else set())
    missing = [key for key in need if key not in raw]
    extra = sorted(set(raw) - allowed)
    if missing or extra:
        raise RegistryError(f"{where} ({raw.get('id', '?')}): " + "; ".join(
            ([f"needs {', '.join(missing)}"] if missing else [])
            + ([f"unknown key(s) {', '.join(extra)}"] if extra else [])))
    if not isinstance(raw["id"], str) or not raw["id"]:
        raise RegistryError(f"{where}: id must be a non-empty string")
    if not isinstance(raw["points"], int) or isinstance(raw["points"], bool) or raw["points"] < 0:
        raise RegistryError(f"{where} ({raw['id']}): points must be a whole number >= 0")
    hints = raw.get("hints", [])
    if kind == "exercise" and (not isinstance(hints, list) or not all(isinstance(h, str) and h.strip() for h in hints)
                               or len(hints) not in (0, HINT_LEVELS)):
        raise RegistryError(f"{where} ({raw['id']}): hints must be a list of exactly {HINT_LEVELS} non-empty strings")
    return raw


def load_file(path: Path) -> Chapter:
    """One chapter's registry file (``chNN.toml``; the chapter number comes from the file name)."""
    path = Path(path)
    if not (path.stem.startswith("ch") and path.stem[2:].isdigit()):
        raise RegistryError(f"{path.name}: registry files are named chNN.toml")
    chapter = path.stem[2:]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise RegistryError(f"{path.name}: {err}") from None
    unknown = sorted(set(data) - {"exercise", "question"})
    if unknown:
        raise RegistryError(f"{path.name}: unknown section(s) {', '.join(unknown)} "
                            "(expected [[exercise]], [[question]])")
    exercises = tuple(Exercise(e["id"], chapter, e["points"], e["check"], tuple(e.get("hints", [])))
                      for k, e in enumerate(_entry(path, "exercise", k, raw)
                                            for k, raw in enumerate(data.get("exercise", []))))
    questions = tuple(Question(q["id"], chapter, q["points"])
                      for q in (_entry(path, "question", k, raw) for k, raw in enumerate(data.get("question", []))))
    return Chapter(chapter, path, exercises, questions)


def load(folder: Path | None = None) -> Registry:
    """The registry in ``folder`` (default: the course's own, ``softmax_lab/course/exercises``)."""
    if folder is None:
        return _course_registry()
    folder = Path(folder)
    if not folder.is_dir():
        raise RegistryError(f"no registry folder {folder}")
    return Registry([load_file(p) for p in sorted(folder.glob("ch*.toml"))])


@lru_cache(maxsize=1)
def _course_registry() -> Registry:
    return Registry([load_file(p) for p in sorted(FOLDER.glob("ch*.toml"))])
