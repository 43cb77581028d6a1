"""The options `softmax-lab grade` and `softmax-lab check` share: where the course is, the limits, the sandbox."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..usage import UsageError
from ..course import registry as _registry
from ..course import sanitize_config
from .chapters import Chapter, load_chapters
from .grader import Options
from .hints import DEFAULT_ANSWER_HINT_CAP
from .runner import Limits


def add_common_arguments(ap: argparse.ArgumentParser) -> None:
    """The options `grade` and `check` share: where the course is, limits, sandbox."""
    ap.add_argument("--solutions", type=Path, default=None,
                    help="folder of solution notebooks (default: solutions/ of this checkout)")
    ap.add_argument("--registry", type=Path, default=None,
                    help="folder of chNN.toml exercise registry files (default: the course's own)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per cell, from the first exercise on "
                    "(default 120)")
    ap.add_argument("--setup-timeout", type=float, default=300,
                    help="seconds per cell before the first exercise: imports, helpers (default 300)")
    ap.add_argument("--notebook-timeout", type=float, default=900,
                    help="seconds for one run of a whole notebook (default 900)")
    ap.add_argument("--memory-mb", type=int, default=8192,
                    help="memory cap per submission in MB, 0 for none (default 8192)")
    ap.add_argument("--sanitize-with", type=Path, default=None,
                    help="nbval sanitize config (default: the package's data/nbval_sanitize.cfg)")
    ap.add_argument("--answer-hint-cap", type=_fraction, default=None,
                    help="share of an exercise's points kept when the learner was shown its complete answer "
                         f"(hint level 4), 0..1 (default: the course config, else {DEFAULT_ANSWER_HINT_CAP})")
    ap.add_argument("--keep-scratch", action="store_true", help="keep each run's scratch folder (debugging)")
    ap.add_argument("--unsafe-no-sandbox", action="store_true",
                    help="run submissions WITHOUT the bubblewrap sandbox (trusted notebooks only; recorded in the "
                         "gradebook)")
    ap.add_argument("--unsafe-no-cgroup", action="store_true",
                    help="grade where no cgroup can be made: memory, tasks and CPU are then not capped by the kernel "
                         "(recorded in the gradebook; docs/grading.md says which limits still hold)")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1")
    return value


def default_solutions() -> Path | None:
    """The chapters to grade against: the course's solutions/, or in the class edition (which has none, e.g. on a
    class hub) its check-notebooks/, the same notebooks with every answer taken out (`softmax-lab release`)."""
    from ..course.notebook import BuildError, repo_root

    try:
        root = repo_root(learner=True)
    except BuildError:
        return None
    if not (root / "solutions").is_dir() and (root / "check-notebooks").is_dir():
        return root / "check-notebooks"
    return root / "solutions"


COURSE_CONFIG = "softmax-lab.toml"  # [grading] answer_hint_cap = 0.5, beside solutions/ (docs/grading.md)


def course_hint_cap(solutions: Path) -> float:
    """``[grading] answer_hint_cap`` from ``softmax-lab.toml`` in the folder holding solutions/, else the default."""
    return course_setting(solutions, "answer_hint_cap", DEFAULT_ANSWER_HINT_CAP)


def course_setting(solutions: Path, key: str, default):
    """A share from 0 to 1 set as ``[grading] KEY`` in ``softmax-lab.toml`` beside solutions/, else ``default``
    (answer_hint_cap; pass_threshold, the share of a chapter's points needed to pass it)."""
    import tomllib

    path = Path(solutions).resolve().parent / COURSE_CONFIG
    if not path.is_file():
        return default
    try:
        value = tomllib.loads(path.read_text(encoding="utf-8")).get("grading", {}).get(key, default)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"{path}: {err}") from None
    if value is default:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise UsageError(f"{path}: [grading] {key} must be a number between 0 and 1, not {value!r}")
    return float(value)


def _chapters(args) -> tuple[Path, dict[str, Chapter]]:
    solutions = args.solutions or default_solutions()
    if solutions is None or not Path(solutions).is_dir():
        raise UsageError("cannot find the solution notebooks: pass --solutions DIR")
    try:
        chapters = load_chapters(Path(solutions), _registry.load(args.registry))
    except Exception as err:
        raise UsageError(f"cannot read the solutions in {solutions}: {err}") from None
    if not chapters:
        raise UsageError(f"no chapter with exercises in {solutions}")
    return Path(solutions), chapters


def _prepare_sandbox(args, learner: bool) -> None:
    from . import cgroup, judge, sandbox

    own = learner and _own_notebooks(args)
    if not args.unsafe_no_sandbox:
        try:
            sandbox.check_works()
        except sandbox.SandboxMissing as err:
            if not own:
                where = (" (`softmax-lab check` of a notebook outside your own workspace/ runs it in the same sandbox "
                         "as `grade`)" if learner else "")
                raise UsageError(f"{err}{where}") from None
            # A learner checking their own notebook on their own laptop (macOS has no bubblewrap): their own code.
            print("softmax-lab check: no bubblewrap here, so your notebook runs without a sandbox (fine for your own "
                  "work in workspace/)", file=sys.stderr)
            args.unsafe_no_sandbox = True
    args.cgroup = _cgroup_policy(args, own)
    sandbox.clean_stale_scratch()  # left behind by a grader killed with kill -9
    cgroup.clean_stale()
    if not learner:  # `check` grades one notebook at a time and loads only what its chapter needs
        judge.judges()  # load the chapters' judges once, before worker threads start


def _own_notebooks(args) -> bool:
    """Every notebook given is the user's own: inside workspace/ of this checkout (or of the current folder)."""
    from ..course.notebook import BuildError, repo_root

    try:
        workspace = (repo_root(learner=True) / "workspace").resolve()
    except BuildError:
        workspace = (Path.cwd() / "workspace").resolve()
    paths = getattr(args, "notebooks", None) or []
    for p in paths:
        real = Path(p).resolve() if Path(p).exists() else (workspace / Path(p).name).resolve()
        if workspace not in real.parents:
            return False
    return bool(paths)


def _cgroup_policy(args, own: bool) -> bool:
    """Whether every run gets a cgroup of its own. Grading (and checking a notebook that is not the user's own)
    refuses where none can be made, unless told --unsafe-no-cgroup."""
    from . import cgroup

    if getattr(args, "unsafe_no_cgroup", False):
        return False
    why = cgroup.why_unavailable()
    if not why:
        return True
    if own or args.unsafe_no_sandbox:
        return False
    raise UsageError(f"the grader caps each submission's memory, tasks and CPU with a cgroup of its own, but none can "
                     f"be made here ({why}). {cgroup.WITHOUT[0].upper()}{cgroup.WITHOUT[1:]}. Pass --unsafe-no-cgroup "
                     "to grade with those limits only (recorded in every row).")


def options(args, learner: bool = False) -> tuple[Options, dict[str, Chapter]]:
    """Grading options and the chapters from the parsed command line (UsageError names what is wrong)."""
    solutions, chapters = _chapters(args)
    if getattr(args, "dask", None):  # the cluster's workers sandbox each notebook: cluster.py checks them instead
        args.cgroup = not args.unsafe_no_cgroup
    else:
        _prepare_sandbox(args, learner)
    limits = Limits(cell_timeout=args.timeout, setup_timeout=max(args.setup_timeout, args.timeout),
                    wall_timeout=args.notebook_timeout, memory_mb=args.memory_mb, keep_scratch=args.keep_scratch,
                    sandbox=not args.unsafe_no_sandbox, cgroup=args.cgroup)
    sanitize = args.sanitize_with.read_text(encoding="utf-8") if args.sanitize_with else sanitize_config()
    cap = args.answer_hint_cap if args.answer_hint_cap is not None else course_hint_cap(solutions)
    opts = Options(limits=limits, sanitize=sanitize, expected_chapter=getattr(args, "chapter", None),
                   partial=getattr(args, "partial_credit", False), answer_hint_cap=cap)
    if opts.expected_chapter and opts.expected_chapter not in chapters:
        raise UsageError(f"--chapter {opts.expected_chapter}: no such chapter in {solutions} "
                         f"(have {', '.join(sorted(chapters))})")
    return opts, chapters
