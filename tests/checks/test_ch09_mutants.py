"""Chapter 9's checks and judges, proved with mutants of the solution cells: the classic mistakes of each exercise
(a missing or divergent barrier, a tree stride that starts too small, too large or stops early, a serial loop where a
tree belongs, a shuffle of the wrong width or direction, sectors counted per lane or by first byte only) fail the
notebook's check naming the mistake, and fail the grader's judge too (fresh inputs, numba's simulator, a sandbox
without the package). No FAIL line of either quotes the solution (``feedback_fix``: the check's lines through the
autouse fixture, the judge's here).

Sizes are tiny (numba's simulator runs them in CI); the solutions pass the same checks.
"""
import pytest

from softmax_lab import cuda_layer  # noqa: F401 - before numba: it picks the CUDA simulator on a CPU
from conftest import exercise_source
from feedback_fix import quoted_fix
from mutant_helpers import fails_naming, passes
from softmax_lab.checks import ch09

CUDA_HEADER = "import math\nfrom softmax_lab import cuda_layer\nfrom numba import cuda, float32\n"


def mutate(ident: str, edits) -> str:
    """Exercise ``ident``'s solution cell with each (old, new) edit made (every occurrence)."""
    source = exercise_source(ident)
    for old, new in edits:
        assert old in source, f"the solution of {ident} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    return source


def loaded(exercise_module, ident, source):
    return exercise_module(ident, source=CUDA_HEADER + source)


def judged(sources: dict, seed=13) -> dict:
    """The grader's verdicts on {exercise id: cell source}, each FAIL line free of the solution."""
    from softmax_lab.grading import judge
    from softmax_lab.grading.runner import Limits

    verdicts = judge.run("09", sources, Limits(cell_timeout=60), seed=seed)
    for ident, v in verdicts.items():
        for line in v.lines:
            assert not quoted_fix(ident, line), f"{ident}: the judge's {line!r} quotes the solution"
    return verdicts


def judges_fail_naming(cases: dict, seed=13):
    """{exercise id: (mutant source, words)}: every mutant fails the grader's judge with FAIL lines naming it."""
    verdicts = judged({ident: source for ident, (source, _) in cases.items()}, seed)
    for ident, (_, words) in cases.items():
        v = verdicts[ident]
        assert not v.ok, v.text(ident)
        for w in words:
            assert any(w in line for line in v.lines), f"no judge FAIL line mentions {w!r}:\n{v.text(ident)}"


# ============================================================================================ ch09-block-tree

TREE_MUTANTS = {  # name -> (edits of the solution cell, words the check's and the judge's FAIL lines must hold)
    "no barrier inside the tree": ([("        cuda.syncthreads()\n        stride //= 2", "        stride //= 2")],
                                   ["read-after-write race"]),
    "barrier inside the if": ([("        cuda.syncthreads()\n        stride //= 2",
                                "            cuda.syncthreads()\n        stride //= 2")], ["skipped"]),
    "tree starts at a quarter of the block": ([("stride = cuda.blockDim.x // 2", "stride = cuda.blockDim.x // 4")],
                                              ["combines only the first"]),
    "tree stops before stride 1": ([("while stride > 0:", "while stride > 1:")], ["one thread's value in every 2"]),
    "tree starts at the whole block": ([("stride = cuda.blockDim.x // 2", "stride = cuda.blockDim.x")],
                                       ["past its end"]),
}


def test_block_tree_solution_and_blank(exercise_module, capsys):
    solved = exercise_module("ch09-block-tree", source=CUDA_HEADER + exercise_source("ch09-block-tree"))
    passes(ch09.check_block_tree, [solved.block_max, solved.block_sum], "ch09-block-tree", capsys)
    blank = loaded(exercise_module, "ch09-block-tree", exercise_source("ch09-block-tree", learner=True))
    fails_naming(ch09.check_block_tree, [blank.block_max, blank.block_sum], "ch09-block-tree",
                 ["not implemented yet"], capsys)


@pytest.mark.parametrize("mutant", list(TREE_MUTANTS))
def test_block_tree_mutant_is_named(exercise_module, capsys, mutant):
    edits, words = TREE_MUTANTS[mutant]
    m = loaded(exercise_module, "ch09-block-tree", mutate("ch09-block-tree", edits))
    fails_naming(ch09.check_block_tree, [m.block_max, m.block_sum], "ch09-block-tree", words, capsys)


def test_block_tree_serial_loop_is_not_a_tree(exercise_module, capsys):
    # the course's one-thread reductions (reader-barrier's helpers) are right but not a tree
    serial = loaded(exercise_module, "ch09-block-tree", ch09.reader_barrier.HELPERS)
    fails_naming(ch09.check_block_tree, [serial.block_max, serial.block_sum], "ch09-block-tree",
                 ["serial loop, not a tree"], capsys)


# =========================================================================================== ch09-reader-barrier


def test_reader_barrier_cell_solution_and_blank(exercise_module, capsys):
    solved = loaded(exercise_module, "ch09-reader-barrier", exercise_source("ch09-reader-barrier"))
    passes(ch09.check_reader_barrier, [solved.fixed_kernel], "ch09-reader-barrier", capsys)
    blank = loaded(exercise_module, "ch09-reader-barrier", exercise_source("ch09-reader-barrier", learner=True))
    fails_naming(ch09.check_reader_barrier, [blank.fixed_kernel], "ch09-reader-barrier", ["not implemented yet"],
                 capsys)


READER_BARRIER = "    cuda.syncthreads()  # every thread has read the max before shared is written again\n"


def test_reader_barrier_accepts_only_added_barriers(exercise_module, capsys):
    from softmax_lab.checks.ch09.reader_barrier import RACY_KERNEL

    # the racy kernel untouched: no barrier added, and the race named
    racy = loaded(exercise_module, "ch09-reader-barrier", RACY_KERNEL)
    fails_naming(ch09.check_reader_barrier, [racy.racy_kernel], "ch09-reader-barrier",
                 ["no cuda.syncthreads() was added", "write-after-read race"], capsys)
    # a barrier added where it protects nothing (after the sum): the source is fine, the race is not
    after_sum = "    row_sum = block_sum(shared, total)\n"
    wrong_place = mutate("ch09-reader-barrier",
                         [(READER_BARRIER, ""), (after_sum, after_sum + "    cuda.syncthreads()\n")])
    wrong = loaded(exercise_module, "ch09-reader-barrier", wrong_place).fixed_kernel
    out = fails_naming(ch09.check_reader_barrier, [wrong], "ch09-reader-barrier", ["write-after-read race"], capsys)
    assert "PASS  the racy kernel's body" in out
    # a correct kernel that is not the racy one fixed (the library's block kernel): named, though it passes the rest
    import inspect

    from softmax_lab.cuda_layer import kernels as K

    # a barrier after every reduction and walk: race-free, but more barriers than the one hazard needs
    sprinkled = mutate("ch09-reader-barrier", [(after_sum, after_sum + "    cuda.syncthreads()\n"),
                                               ("    row_max = block_max(shared, m)\n",
                                                "    cuda.syncthreads()\n    row_max = block_max(shared, m)\n")])
    many = loaded(exercise_module, "ch09-reader-barrier", sprinkled).fixed_kernel
    out = fails_naming(ch09.check_reader_barrier, [many], "ch09-reader-barrier", ["you added 3 barriers"], capsys)
    assert "PASS  race check" in out
    library = inspect.getsource(K.block_softmax_kernel.py_func).replace("block_softmax_kernel", "fixed_kernel")
    whole = loaded(exercise_module, "ch09-reader-barrier", library).fixed_kernel
    out = fails_naming(ch09.check_reader_barrier, [whole], "ch09-reader-barrier", ["is not the racy kernel's line"],
                       capsys)
    assert "PASS  race check" in out


# ============================================================================================ ch09-shuffle-tail

SHUFFLE_MUTANTS = {
    "a 64-lane wavefront's first step": ([("    offset = 16\n", "    offset = 32\n")], ["offset 32"]),
    "half a warp": ([("    offset = 16\n", "    offset = 8\n")], ["only lanes 0 to 15 (16 of the warp's 32 lanes)"]),
    "last step missing": ([("    while offset > 0:\n", "    while offset > 1:\n")],
                          ["only every other lane from lane 0"]),
    "offsets 1, 2, 3, 4, 5 (not doubling)": ([("    offset = 16\n", "    offset = 1\n"),
                                              ("    while offset > 0:\n", "    while offset < 6:\n"),
                                              ("        offset //= 2\n", "        offset += 1\n")],
                                             ["only lanes 0 to 7 (8 of the warp's 32 lanes)", "more than once"]),
    "offsets rising 1, 2, 4 (stops early)": ([("    offset = 16\n", "    offset = 1\n"),
                                             ("    while offset > 0:\n", "    while offset < 8:\n"),
                                             ("        offset //= 2\n", "        offset *= 2\n")],
                                            ["only lanes 0 to 7 (8 of the warp's 32 lanes)"]),
    "shuffled up": ([("cuda.shfl_xor_sync(", "cuda.shfl_up_sync(")], ["shfl_up_sync"]),
    "shuffled, never combined into v": (
        [("        v = max(v, cuda.shfl_xor_sync(", "        w = max(v, cuda.shfl_xor_sync("),
         ("        v += cuda.shfl_xor_sync(", "        w = v + cuda.shfl_xor_sync(")],
        ["every lane got back the very value it passed in"]),
}


def _shuffle(module):
    return [module.warp_max, module.warp_sum, module.my_tail_kernel]


def test_shuffle_tail_solution_and_blank(exercise_module, capsys):
    passes(ch09.check_shuffle_tail, _shuffle(loaded(exercise_module, "ch09-shuffle-tail",
                                                    exercise_source("ch09-shuffle-tail"))), "ch09-shuffle-tail", capsys)
    blank = loaded(exercise_module, "ch09-shuffle-tail", exercise_source("ch09-shuffle-tail", learner=True))
    fails_naming(ch09.check_shuffle_tail, _shuffle(blank), "ch09-shuffle-tail", ["not implemented yet"], capsys)


@pytest.mark.parametrize("mutant", list(SHUFFLE_MUTANTS))
def test_shuffle_mutant_is_named(exercise_module, capsys, mutant):
    edits, words = SHUFFLE_MUTANTS[mutant]
    m = loaded(exercise_module, "ch09-shuffle-tail", mutate("ch09-shuffle-tail", edits))
    out = fails_naming(ch09.check_shuffle_tail, _shuffle(m), "ch09-shuffle-tail", words, capsys)
    if mutant != "shuffled up":  # a function that combines nothing is not told about shfl_up_sync
        assert "shfl_up" not in out, out
    if mutant.startswith("offsets"):  # a loop whose offsets do not start at 4 or 8 is not told they did
        assert "started at offset" not in out, out


def test_shuffle_tail_kernel_without_its_reader_barrier_races(exercise_module, capsys):
    edits = [("    row_max = shared[0]\n    cuda.syncthreads()\n", "    row_max = shared[0]\n")]
    m = loaded(exercise_module, "ch09-shuffle-tail", mutate("ch09-shuffle-tail", edits))
    fails_naming(ch09.check_shuffle_tail, _shuffle(m), "ch09-shuffle-tail", ["write-after-read race"], capsys)


# ================================================================================================= ch09-sectors

SECTOR_MUTANTS = {
    "first byte only": ("def sectors_and_lines(addresses, access_bytes=4):\n"
                        "    return len({a // 32 for a in addresses}), len({a // 128 for a in addresses})\n",
                        ["straddle"]),
    "one sector per lane": ("def sectors_and_lines(addresses, access_bytes=4):\n"
                            "    return len(addresses), len({a // 128 for a in addresses})\n",
                            ["one per lane"]),
}


PREDICTION_MUTANTS = {  # name -> (edit of the solution's prediction, words the FAIL line must hold)
    "chunks called coalesced": (('"chunks": (32, 8)', '"chunks": (8, 8)'), ["chunks", "too few"]),
    "the view's offset ignored": (('"one block per row on big[:, 1:]": (5, 2)',
                                   '"one block per row on big[:, 1:]": (4, 1)'), ["big[:, 1:]", "too few"]),
    "lines counted as sectors": (('"one thread per row": (32, 32)', '"one thread per row": (32, 8)'),
                                 ["one thread per row", "lines is too few"]),
}


def test_sectors_solution_and_mutants(exercise_module, capsys):
    from softmax_lab import cuda_layer as cl

    solved = exercise_module("ch09-sectors")
    passes(ch09.check_sectors, [solved.sectors_and_lines, solved.predicted_loads], "ch09-sectors", capsys)
    blank = exercise_module("ch09-sectors", learner=True)
    fails_naming(ch09.check_sectors, [blank.sectors_and_lines, blank.predicted_loads], "ch09-sectors",
                 ["not implemented yet"], capsys)
    cases = list(ch09.sectors._sector_cases())
    first_byte = exercise_module("m", source=SECTOR_MUTANTS["first byte only"][0]).sectors_and_lines
    # the point-for-a-range count is wrong on three loads, and named on the two where no other mistake gives its
    # count (on the contiguous 8-byte load it is also the bytes divided by 32)
    wrong = [(a, b) for _, a, b in cases if first_byte(a, b) != cl.count_sectors(a, b)]
    assert len(wrong) == 3
    verdicts = [ch09.sectors.sectors_verdict(first_byte(a, b), a, b) for a, b in wrong]
    assert sum("first byte" in v for v in verdicts) == 2 and not any("divided" in v for v in verdicts), verdicts
    # the bytes divided by 32 is named where only it gives the count (one thread per row: 32 sectors, not 4)
    divided = exercise_module("m", source="def sectors_and_lines(addresses, access_bytes=4):\n"
                              "    return -(-32 * access_bytes // 32), -(-32 * access_bytes // 128)\n")
    fails_naming(ch09.check_sectors, [divided.sectors_and_lines, solved.predicted_loads], "ch09-sectors",
                 ["divided the bytes"], capsys)
    for source, words in SECTOR_MUTANTS.values():
        fails_naming(ch09.check_sectors, [exercise_module("m", source=source).sectors_and_lines,
                                          solved.predicted_loads], "ch09-sectors", words, capsys)


@pytest.mark.parametrize("mutant", list(PREDICTION_MUTANTS))
def test_sectors_wrong_prediction_is_named(exercise_module, capsys, mutant):
    edit, words = PREDICTION_MUTANTS[mutant]
    m = exercise_module("ch09-sectors", source=mutate("ch09-sectors", [edit]))
    out = fails_naming(ch09.check_sectors, [m.sectors_and_lines, m.predicted_loads], "ch09-sectors", words, capsys)
    assert out.count("FAIL  your prediction") == 1, out


# ========================================================================== the grader's judges, same mutants


def test_judges_pass_the_solutions_and_fail_the_blanks():
    ids = ["ch09-block-tree", "ch09-reader-barrier", "ch09-shuffle-tail", "ch09-sectors"]
    good = judged({i: exercise_source(i) for i in ids})
    for i in ids:
        assert good[i].ok, good[i].text(i)
    bad = judged({i: exercise_source(i, learner=True) for i in ids})
    for i in ids:
        assert not bad[i].ok and bad[i].passed == 0, bad[i].text(i)
        assert "NotImplementedError" in bad[i].text(i), bad[i].text(i)


def test_judges_fail_the_mutants_naming_them():
    """The judges name the same mistakes as the checks (one sandbox run per group of mutants)."""
    judges_fail_naming({
        "ch09-block-tree": (mutate("ch09-block-tree", TREE_MUTANTS["no barrier inside the tree"][0]),
                            ["read-after-write race"]),
        "ch09-reader-barrier": (mutate("ch09-reader-barrier", [(READER_BARRIER, "")]),
                                ["no cuda.syncthreads() was added", "write-after-read race"]),
        "ch09-shuffle-tail": (mutate("ch09-shuffle-tail", SHUFFLE_MUTANTS["a 64-lane wavefront's first step"][0]),
                              ["offset 32"]),
        "ch09-sectors": (SECTOR_MUTANTS["one sector per lane"][0], ["one per lane"]),
    })
    judges_fail_naming({"ch09-block-tree": (mutate("ch09-block-tree", TREE_MUTANTS["tree stops before stride 1"][0]),
                                            ["one thread's value in every 2"])})
    judges_fail_naming({"ch09-block-tree": (ch09.reader_barrier.HELPERS, ["serial loop"])})
    judges_fail_naming({
        "ch09-shuffle-tail": (mutate("ch09-shuffle-tail", SHUFFLE_MUTANTS["shuffled, never combined into v"][0]),
                              ["every lane got back the very value it passed in"]),
        "ch09-sectors": (mutate("ch09-sectors", [PREDICTION_MUTANTS["chunks called coalesced"][0]]),
                         ["your prediction: chunks", "too few"]),
        "ch09-reader-barrier": (mutate("ch09-reader-barrier", [
            ("    row_sum = block_sum(shared, total)\n",
             "    cuda.syncthreads()\n    row_sum = block_sum(shared, total)\n")]), ["you added 2 barriers"]),
    })


def test_judges_refuse_the_package_and_code_outside_the_kernel_api():
    """Aliases of the course's objects and ways out of kernel code earn nothing: the sandbox has no softmax_lab,
    and only the cell's @cuda.jit functions are defined, after a check of their syntax tree."""
    v = judged({
        "ch09-reader-barrier": "fixed_kernel = K.block_softmax_kernel\n",
        "ch09-shuffle-tail": "warp_max, warp_sum = K.warp_max, K.warp_sum\n"
                             + exercise_source("ch09-shuffle-tail").split("@cuda.jit\ndef my_tail_kernel")[0].replace(
                                 "def warp_", "def unused_warp_") + "@cuda.jit\ndef my_tail_kernel"
                             + exercise_source("ch09-shuffle-tail").split("@cuda.jit\ndef my_tail_kernel")[1],
        "ch09-sectors": "sectors_and_lines = cl.count_sectors\n",
        "ch09-block-tree": exercise_source("ch09-block-tree").replace(
            "    tid = cuda.threadIdx.x\n", "    tid = cuda.threadIdx.x\n    __import__('os').system('true')\n", 1),
    })
    assert "no @cuda.jit function named `fixed_kernel`" in v["ch09-reader-barrier"].text("x")
    tail = v["ch09-shuffle-tail"].text("x")
    assert "no @cuda.jit function named `warp_max" in tail or "uses `warp_max`, defined outside" in tail, tail
    assert "NameError" in v["ch09-sectors"].text("x")
    assert "refused them" in v["ch09-block-tree"].text("x") and "__import__" in v["ch09-block-tree"].text("x")
    for ident, verdict in v.items():
        assert verdict.passed == 0, verdict.text(ident)


@pytest.mark.parametrize("body, words", [
    ("    import os\n", "Import"),
    ("    v = (lambda: 1)()\n", "Lambda"),
    ("    v = v.__class__\n", "__class__"),
    ("    v = cuda.jit(v)\n", "cuda.jit"),
    ("    v = torch.zeros(1)\n", "torch"),
    ("    v = math.exp.__self__\n", "__self__"),
    ("    v = cuda.simulator\n", "cuda.simulator"),
    ("    v = [t for t in range(3)]\n", "ListComp"),
    ("    v = v.base\n", "v.base"),
])
def test_judge_defines_only_kernel_code(body, words):
    """The judge's harness defines a numba cell's @cuda.jit functions alone, after checking their syntax tree."""
    import numba
    from numba import cuda

    from softmax_lab.grading import judge_harness

    source = f"@cuda.jit(device=True)\ndef warp_max(v):\n{body}    return v\n"
    with pytest.raises(judge_harness.SourceRejected, match=__import__("re").escape(words)):
        judge_harness.define_cuda_functions(source, cuda, numba)
    ns = judge_harness.define_cuda_functions(exercise_source("ch09-shuffle-tail"), cuda, numba)
    assert {"warp_max", "warp_sum", "my_tail_kernel"} <= set(ns)
