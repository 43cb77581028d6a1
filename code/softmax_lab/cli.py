"""The `softmax-lab` command: lab, workspace, doctor, build, site, check, grade, bench.

Each subcommand lives in its own module with a ``main(argv) -> int``; this file only dispatches.
"""
from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "lab": ("softmax_lab.lab", "open the course in JupyterLab on workspace/ (what `make lab` runs)"),
    "workspace": ("softmax_lab.lab", "copy new chapters into workspace/, or --update changed ones beside yours"),
    "doctor": ("softmax_lab.checkup", "check the environment and name the fix for each problem"),
    "build": ("softmax_lab.build", "generate learner notebooks/ from solutions/"),
    "check": ("softmax_lab.grade", "validate your own notebook's exercises (learners)"),
    "grade": ("softmax_lab.grade", "grade learners' notebooks into a gradebook (instructors)"),
    "site": ("softmax_lab.web", "build the web edition into site/ (answers removed) and check its links"),
    "bench": ("softmax_lab.bench", "time every kernel and torch.softmax against copy bandwidth (GPU)"),
}


def usage() -> str:
    lines = ["usage: softmax-lab [--version] COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "softmax-lab COMMAND --help shows a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"softmax-lab {version('softmax-lab')}")
        except PackageNotFoundError:  # running from a checkout without installing
            print("softmax-lab (not installed; from the source tree)")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"softmax-lab: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    entry = getattr(module, f"{name}_main", None) or module.main
    return int(entry(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
