"""The `softmax-lab` command: argparse sub-commands, each defined next to the code it runs.

Every entry of ``COMMANDS`` names the module, the function that adds the command's options to its parser, and
the function that runs it with the parsed arguments. Only the chosen command's module is imported, so
`softmax-lab --help` and the course/grading commands never import torch.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from dataclasses import dataclass

from .usage import UsageError  # (raised by the commands' rooms; re-exported: softmax_lab.cli.UsageError)

__all__ = ["COMMANDS", "Command", "UsageError", "main"]


@dataclass(frozen=True)
class Command:
    module: str
    add_arguments: str
    run: str
    help: str


COMMANDS = {
    # learners
    "lab": Command("softmax_lab.lab", "add_lab_arguments", "run_lab",
                   "open the course in JupyterLab on workspace/ (what `make lab` runs)"),
    "workspace": Command("softmax_lab.lab", "add_workspace_arguments", "run_workspace",
                         "copy new chapters into workspace/, or --update changed ones beside yours"),
    "doctor": Command("softmax_lab.doctor", "add_arguments", "run",
                      "check the environment and name the fix for each problem"),
    "check": Command("softmax_lab.grading.check", "add_arguments", "run",
                     "validate your own notebook's exercises (learners)"),
    # authors
    "build": Command("softmax_lab.course.build", "add_arguments", "run",
                     "generate learner notebooks/ from solutions/"),
    "site": Command("softmax_lab.web", "add_arguments", "run",
                    "build the web edition into site/ (answers removed) and check its links"),
    "nbgrader": Command("softmax_lab.course.nbgrader", "add_arguments", "run",
                        "convert solution notebooks into nbgrader source notebooks"),
    # instructors
    "release": Command("softmax_lab.course.release", "add_arguments", "run",
                       "build the class edition into OUT: learner notebooks and package, no answers (instructors)"),
    "grade": Command("softmax_lab.grading.grade", "add_arguments", "run",
                     "grade learners' notebooks into a gradebook (instructors)"),
    "similarity": Command("softmax_lab.grading.similarity", "add_arguments", "run",
                          "flag copied code: each graded function against the package, solutions, classmates"),
    "collect": Command("softmax_lab.grading.collect", "add_arguments", "run",
                       "copy the chapters from the hub's learners' workspaces into a folder to grade (instructors)"),
    # performance
    "bench": Command("softmax_lab.cli", "add_bench_arguments", "run_bench",
                     "time every kernel and torch.softmax against copy bandwidth (GPU)"),
}


def add_bench_arguments(ap: argparse.ArgumentParser) -> None:
    # softmax_lab.bench parses its own options; they pass through unchanged.
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="softmax-lab bench --help lists them")


def run_bench(args: argparse.Namespace) -> int:
    from . import bench

    return bench.main(args.bench_args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"softmax-lab {version('softmax-lab')}"
    except PackageNotFoundError:  # running from a checkout without installing
        return "softmax-lab (not installed; from the source tree)"


def parser(chosen: str | None = None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser | None]:
    """The command-line parser and ``chosen``'s sub-parser; only ``chosen``'s options are added (its module
    imported)."""
    ap = argparse.ArgumentParser(prog="softmax-lab", description="Softmax Lab: the course's command.",
                                 epilog="softmax-lab COMMAND --help shows a command's options.")
    ap.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    mine = None
    for name, cmd in COMMANDS.items():
        bench = name == "bench"
        p = sub.add_parser(name, help=cmd.help, description=cmd.help, add_help=not bench, prog=f"softmax-lab {name}")
        if name == chosen:
            getattr(importlib.import_module(cmd.module), cmd.add_arguments)(p)
            mine = p
    return ap, mine


def main(argv: list[str] | None = None) -> int:
    as_program = argv is None  # the `softmax-lab` command, not softmax_lab.check() in a notebook's kernel
    argv = sys.argv[1:] if argv is None else argv
    chosen = argv[0] if argv and argv[0] in COMMANDS else None
    ap, mine = parser(chosen)
    if argv[:1] in (["-V"], ["--version"]):
        print(_version())
        return 0
    if not argv or argv[0] == "help":
        ap.print_help()
        return 0
    if chosen is None and not argv[0].startswith("-"):
        print(f"softmax-lab: unknown command {argv[0]!r}\n\n{ap.format_help()}", file=sys.stderr)
        return 2
    args, extra = ap.parse_known_args(argv)
    if args.command == "bench":  # its options are bench's own: pass them through, --help included
        args.bench_args = extra + args.bench_args
    elif extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    cmd = COMMANDS[args.command]
    try:
        return int(getattr(importlib.import_module(cmd.module), cmd.run)(args) or 0)
    except UsageError as err:
        mine.error(str(err))  # usage line, the message, exit status 2
    except BrokenPipeError:  # `softmax-lab check ... | head`: the reader has what it wanted, no traceback
        if not as_program:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # (Python's own advice, "signal" docs)
        return 1
    finally:
        if as_program:
            _quick_exit()


def _quick_exit() -> None:
    """Python collects every object still alive before it exits: seconds once torch is loaded, after the command
    has said everything. Frozen objects are skipped (the operating system frees them); exit handlers still run."""
    import gc

    sys.stdout.flush()
    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
