"""The exercise registry: the course's one declaration of graded work, read from ``exercises/chNN.toml``.

One file per chapter. Each ``[[exercise]]`` has ``id``, ``points``, ``check`` (a function name in
``softmax_lab.checks``) and ``hints`` (three short strings: concept area, direction, key line; the fourth
level, the complete answer, comes from the solution notebook); each ``[[question]]`` has ``id`` and
``points``. Notebook cells only carry the tag ``exercise:<id>`` / ``question:<id>`` saying where each sits;
``softmax-lab build`` checks that the two agree.

Seed 002's code-point split: an exercise may declare ``parts = {normal = 2, boundary = 1, explanation = 1}`` (the
parts add up to its ``points``) and ``boundary = ["case name", ...]``, names from its case table. The grader's
judge then awards the normal part when every other case passed and the boundary part when every boundary case
passed; the explanation part is a hand-graded free-text item, ``explain:<exercise id>`` (a ``Question`` the
registry adds, asked in a markdown cell tagged ``explain:<exercise id>`` after the check cell, answered in the
cell tagged ``answer:explain:<exercise id>``).

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
PARTS = ("normal", "boundary", "explanation")  # seed 002: normal inputs 2, boundary inputs 1, explanation 1
EXPLAIN = "explain:"  # the id of an exercise's explanation item: explain:<exercise id>


class RegistryError(ValueError):
    """A registry file is unreadable or breaks the format (the message names the file and entry)."""


@dataclass(frozen=True)
class Exercise:
    id: str
    chapter: str
    points: int
    check: str
    hints: tuple[str, ...] = ()
    parts: tuple[tuple[str, int], ...] = ()  # (("normal", 2), ("boundary", 1), ("explanation", 1)) or ()
    boundary: tuple[str, ...] = ()            # the case names (of its case table) that are boundary inputs

    def part(self, name: str) -> int:
        """The points of one part (0 when the exercise has no such part, or no parts at all)."""
        return dict(self.parts).get(name, 0)

    @property
    def code_points(self) -> int:
        """The points its code earns (the grader's row): all of them, less a hand-graded explanation part."""
        return self.points - self.part("explanation")

    @property
    def explain_id(self) -> str | None:
        """The id of its hand-graded explanation item, or None when it has none."""
        return EXPLAIN + self.id if self.part("explanation") else None


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str
    points: int
    explains: str = ""  # for an exercise's explanation item (id explain:<exercise id>): that exercise's id


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
    allowed = set(need) | ({"hints", "parts", "boundary"} if kind == "exercise" else set())
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
    if kind == "exercise":
        _check_parts(where, raw)
    return raw


def _check_parts(where: str, raw: dict) -> None:
    """``parts`` (seed 002's split) and ``boundary`` (case names) of one exercise entry, or RegistryError."""
    parts, boundary, ident = raw.get("parts"), raw.get("boundary"), raw["id"]
    if parts is None:
        if boundary is not None:
            raise RegistryError(f"{where} ({ident}): boundary names cases only for an exercise with parts")
        return
    if (not isinstance(parts, dict) or not parts or set(parts) - set(PARTS)
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in parts.values())):
        raise RegistryError(f"{where} ({ident}): parts must be a table of whole numbers >= 0 with keys among "
                            f"{', '.join(PARTS)}")
    if sum(parts.values()) != raw["points"]:
        raise RegistryError(f"{where} ({ident}): its parts add up to {sum(parts.values())}, "
                            f"but its points are {raw['points']}")
    if not parts.get("normal"):
        raise RegistryError(f"{where} ({ident}): parts needs a normal part (the cases that are not boundary cases)")
    names = boundary if boundary is not None else []
    if (not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names)
            or len(set(names)) != len(names)):
        raise RegistryError(f"{where} ({ident}): boundary must be a list of distinct case names")
    if bool(parts.get("boundary")) != bool(names):
        raise RegistryError(f"{where} ({ident}): a boundary part needs the boundary case names, and boundary case "
                            "names need a boundary part")


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
    exercises = tuple(Exercise(e["id"], chapter, e["points"], e["check"], tuple(e.get("hints", [])),
                               tuple((p, e["parts"][p]) for p in PARTS if p in e.get("parts", {})),
                               tuple(e.get("boundary", [])))
                      for k, e in enumerate(_entry(path, "exercise", k, raw)
                                            for k, raw in enumerate(data.get("exercise", []))))
    questions = tuple(Question(q["id"], chapter, q["points"])
                      for q in (_entry(path, "question", k, raw) for k, raw in enumerate(data.get("question", []))))
    for q in questions:
        if q.id.startswith(EXPLAIN):
            raise RegistryError(f"{path.name}: question {q.id}: ids starting {EXPLAIN!r} are exercises' explanation "
                                "items (declare them with the exercise's parts)")
    explanations = tuple(Question(e.explain_id, chapter, e.part("explanation"), e.id) for e in exercises
                         if e.explain_id)
    return Chapter(chapter, path, exercises, questions + explanations)


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
