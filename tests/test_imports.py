"""The package's import graph, read from the source with ``ast`` (imports inside functions included): no import
circle anywhere, and the layers in order: the kernels and their tuning rules at the bottom, the dispatcher that
chooses between them above, the operator above that. A circle is reported as the chain of imports that closes it."""
from __future__ import annotations

import ast
import functools

from conftest import ROOT

PACKAGE = ROOT / "code" / "softmax_lab"
# What the kernels may import from the rest of the package: the device they run on (picked before triton loads).
BELOW_KERNELS = {"softmax_lab.device"}
# The only imports whose module name is computed, and what each can reach (added to the graph as edges): the
# package's lazy attributes, a notebook's check looked up in its chapter, the grader's judge looked up in the module
# its exercise id names, and origin's `python -m` helper (a name from the command line; nothing at import).
COMPUTED = {
    "softmax_lab": lambda modules: {f"softmax_lab.{n}" for n in ("kernels", "reference", "testing", "checks",
                                                                   "dispatch", "op")},
    "softmax_lab.checks": lambda modules: {m for m in modules if m.count(".") == 2 and
                                           m.startswith("softmax_lab.checks.ch")},
    "softmax_lab.grading.judge": lambda modules: {m for m in modules if m.startswith("softmax_lab.checks.ch")},
    "softmax_lab.origin": lambda modules: set(),
    "softmax_lab.cli": lambda modules: set(),  # (the modules its COMMANDS table names are read as edges)
}
NAMED_IN_TABLES = {"softmax_lab.cli"}  # modules naming the modules they import in a table of strings


def _modules() -> dict[str, tuple]:
    """{module name: (path, is a package)} for every module of softmax_lab."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _imported(node, module: str, package: bool) -> list[str]:
    """The dotted names an import statement (or ``importlib.import_module("...", __name__)``) reaches."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if package else module.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        return [f"{target}.{a.name}" for a in node.names] + [target]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        name = node.args[0].value
        return [module + name if name.startswith(".") and package else name]
    return []


def computed_imports() -> list[str]:
    """``module:line`` of every import_module/__import__ whose name is not written out."""
    found = []
    for module, (path, _) in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            named = (isinstance(f, ast.Attribute) and f.attr == "import_module") or \
                (isinstance(f, ast.Name) and f.id in ("import_module", "__import__"))
            if named and not (node.args and isinstance(node.args[0], ast.Constant)):
                found.append(f"{module}:{node.lineno}")
    return found


@functools.cache
def import_graph() -> dict[str, dict[str, int]]:
    """{module: {module it imports: line of the first such import}}, within softmax_lab."""
    modules = _modules()
    graph = {}
    for module, (path, package) in modules.items():
        edges = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = _imported(node, module, package)
            if module in NAMED_IN_TABLES and isinstance(node, ast.Constant) and node.value in modules:
                names = [node.value]  # a module named in a table and imported by name later (cli.COMMANDS)
            if isinstance(node, ast.ImportFrom) and names:
                # `from pkg import sub` imports the submodule; `from pkg import name` only pkg itself
                subs = [n for n in names[:-1] if n in modules]
                names = subs if len(subs) == len(names) - 1 else subs + [names[-1]]
            for name in names:
                while name not in modules and "." in name:
                    name = name.rsplit(".", 1)[0]
                if name in modules and name != module:
                    edges[name] = min(edges.get(name, node.lineno), node.lineno)
        for name in COMPUTED.get(module, lambda m: ())(modules):
            edges.setdefault(name, 0)  # (line 0: reached by a computed name)
        graph[module] = edges
    return graph


def test_every_import_by_a_computed_name_is_known():
    # An import whose module name is computed is invisible to this graph unless COMPUTED says what it reaches.
    unknown = [where for where in computed_imports() if where.split(":")[0] not in COMPUTED]
    assert not unknown, f"imports by a computed name (write the name out, or add the module to COMPUTED): {unknown}"


def test_the_command_table_is_part_of_the_graph():
    # cli.COMMANDS names each command's module as a string: those are edges, and grading's UsageError comes from
    # a module below both (softmax_lab.usage), so cli and grading do not import each other.
    graph = import_graph()
    assert "softmax_lab.grading.grade" in graph["softmax_lab.cli"]
    assert "softmax_lab.cli" not in graph["softmax_lab.grading.grade"]


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def _chain(graph, cycle: list[str]) -> str:
    return "\n".join(f"  {a} imports {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def test_no_import_circle_in_the_package():
    graph = import_graph()
    assert len(graph) > 60 and any(graph.values())  # (it read the package)
    cycle = find_cycle(graph)
    assert cycle is None, "an import circle:\n" + _chain(graph, cycle)


def test_the_cycle_finder_reports_the_chain():
    graph = {"p.a": {"p.b": 3}, "p.b": {"p.c": 7}, "p.c": {"p.a": 1}, "p.d": {"p.a": 2}}
    assert find_cycle(graph) == ["p.a", "p.b", "p.c", "p.a"]
    assert "p.c imports p.a (line 1)" in _chain(graph, find_cycle(graph))
    assert find_cycle({"p.a": {"p.b": 1}, "p.b": {}}) is None


def test_the_graph_sees_imports_inside_functions():
    source = "def f():\n    from ..op import softmax\n    from . import tuning\n"
    nodes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert _imported(nodes[0], "softmax_lab.kernels.fused", False)[-1] == "softmax_lab.op"
    assert _imported(nodes[1], "softmax_lab.kernels", True)[0] == "softmax_lab.kernels.tuning"


def test_the_kernels_import_nothing_above_them():
    graph = import_graph()
    wrong = [f"{m} imports {t} (line {line})" for m, edges in graph.items() if m.startswith("softmax_lab.kernels")
             for t, line in edges.items() if not t.startswith("softmax_lab.kernels") and t not in BELOW_KERNELS]
    assert not wrong, "the kernels and their tuning sit below dispatch and op:\n" + "\n".join(wrong)


def test_dispatch_is_above_the_kernels_and_below_the_operator():
    graph = import_graph()
    assert "softmax_lab.kernels.tuning" in graph["softmax_lab.dispatch"]
    assert {"softmax_lab.kernels.fused", "softmax_lab.kernels.multirow"} <= set(graph["softmax_lab.dispatch"])
    assert "softmax_lab.dispatch" in graph["softmax_lab.op"]
    assert "softmax_lab.op" not in graph["softmax_lab.dispatch"]


def test_dispatch_and_op_import_at_the_top():
    # A reader (and a tool) follows a tensor from softmax() into its kernel through top-level imports only.
    for name in ("dispatch.py", "op.py", "traced.py", "rows.py"):
        tree = ast.parse((PACKAGE / name).read_text(encoding="utf-8"))
        inside = [f"{name}:{n.lineno}" for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))]
        assert not inside, f"imports inside functions: {inside}"


def test_every_kernel_the_rules_name_is_in_the_dispatchers_table():
    from softmax_lab import dispatch
    from softmax_lab.kernels import tuning

    named = {rule[0] for table in (tuning.FORWARD, tuning.GLUON_FALLBACK, tuning.UNALIGNED_FORWARD)
             for rules in table.values() for _, rule in rules if rule is not None and rule[0] != "tile"}
    assert named <= set(dispatch.LAUNCHERS), named - set(dispatch.LAUNCHERS)
    assert set(tuning.GLUON_KERNELS) == set(dispatch.REFUSALS)
    assert set(dispatch.PLANNED) <= set(dispatch.LAUNCHERS)
