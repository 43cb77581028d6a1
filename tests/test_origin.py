"""softmax_lab.origin.is_package_object: the package's own kernels and functions are recognised when a learner's
cell imports them under the exercise's name, aliases them, or wraps them; the learner's own code is not."""
from __future__ import annotations

import types

import pytest

from conftest import exercise_source, load_exercise
from softmax_lab import origin

HEADER = """\
import functools
import softmax_lab
import triton
import triton.language as tl
import softmax_lab.kernels as K
from softmax_lab import kernels
"""


def cell(source: str, tmp_path):
    """A learner's cell, as a module whose code lives in its own file (as a notebook cell's does)."""
    return load_exercise("origin", source, tmp_path, header=HEADER)


@pytest.mark.parametrize("source,name,expected", [
    ("from softmax_lab.kernels.fused import fused_softmax_kernel as my_fused_kernel", "my_fused_kernel",
     "softmax_lab.kernels.fused.fused_softmax_kernel"),
    ("my_multirow_softmax = K.multirow_softmax", "my_multirow_softmax",
     "softmax_lab.kernels.multirow.multirow_softmax"),
    ("from softmax_lab.kernels._launch import row_vector as my_row_vector", "my_row_vector",
     "softmax_lab.kernels._launch.row_vector"),
    ("from softmax_lab.checks.ch04 import three_pass_counts\nmine = three_pass_counts", "mine",
     "softmax_lab.checks.ch04.three_pass_counts"),
    ("def my_fused_softmax(x, out):\n    return kernels.fused_softmax(x, out=out)", "my_fused_softmax",
     "softmax_lab.kernels.fused.fused_softmax, called by my_fused_softmax"),
    ("def my_fused_softmax(x, out):\n    return softmax_lab.kernels.fused.fused_softmax(x, out)", "my_fused_softmax",
     "softmax_lab.kernels.fused.fused_softmax, called by my_fused_softmax"),
    ("my_fused_softmax = lambda x, out: K.fused_softmax(x, out)", "my_fused_softmax",
     "softmax_lab.kernels.fused.fused_softmax, called by <lambda>"),
    ("my_fused_softmax = functools.partial(K.fused_softmax, BLOCK=None)", "my_fused_softmax",
     "softmax_lab.kernels.fused.fused_softmax"),
    ("@functools.wraps(K.fused_softmax)\ndef my_fused_softmax(x, out):\n    return x", "my_fused_softmax",
     "softmax_lab.kernels.fused.fused_softmax"),
    ("def helper(x):\n    return K.online_softmax(x)\n\n"
     "def my_online(x, out):\n    out.copy_(helper(x))\n    return out",
     "my_online", "softmax_lab.kernels.online.online_softmax, called by helper"),
    ("def outer():\n    f = K.fused_softmax\n    def my(x, out):\n        return f(x, out)\n    return my\n"
     "mine = outer()",
     "mine", "softmax_lab.kernels.fused.fused_softmax, called by outer.<locals>.my"),
])
def test_imported_aliased_or_wrapped_package_code_is_recognised(source, name, expected, tmp_path):
    assert origin.is_package_object(getattr(cell(source, tmp_path), name)) == expected


def test_a_copied_code_object_is_recognised():
    from softmax_lab.kernels import fused

    copy = types.FunctionType(fused.launch_setup.__code__, {}, "my_launch")
    assert origin.is_package_object(copy) == "softmax_lab.kernels.fused.launch_setup"


@pytest.mark.parametrize("ident", ["ch04-fused", "ch04-traffic", "ch07-multirow", "ch01-stable-row"])
def test_the_learner_own_solutions_are_theirs(ident, tmp_path):
    module = load_exercise(ident, exercise_source(ident), tmp_path)
    mine = [v for k, v in vars(module).items() if k.startswith(("my_", "softmax_", "three_", "fused_"))
            and callable(v) and not isinstance(v, types.ModuleType)]
    own = [v for v in mine if getattr(getattr(v, "fn", v), "__module__", "") == module.__name__]
    assert own, ident
    assert [origin.is_package_object(v) for v in own] == [None] * len(own)


def test_tools_and_a_skeleton_helper_are_allowed_and_checks_can_allow_more(tmp_path):
    source = ("def my_timing(f, x):\n    return softmax_lab.measure(f, x)\n\n"
              "def my_warps(block):\n    from softmax_lab.kernels._launch import default_num_warps\n"
              "    return default_num_warps(block)\n\n"
              "def my_stats(x):\n    return K.online_softmax(x)\n")
    module = cell(source, tmp_path)
    assert origin.is_package_object(module.my_timing) is None
    assert origin.is_package_object(module.my_warps) is None
    assert origin.is_package_object(module.my_stats, allowed=("softmax_lab.kernels.online.",)) is None


def test_chapter_nine_numba_kernels_and_the_operator_are_recognised():
    import softmax_lab
    from softmax_lab.cuda_layer import kernels as cuda_kernels

    assert origin.is_package_object(cuda_kernels.block_softmax_kernel) == \
        "softmax_lab.cuda_layer.kernels.block_softmax_kernel"
    assert origin.is_package_object(cuda_kernels.warp_max) == "softmax_lab.cuda_layer.kernels.warp_max"
    import torch
    import softmax_lab.op

    assert origin.is_package_object(torch.ops.softmax_lab.softmax) == "torch.ops.softmax_lab.softmax"
    assert origin.is_package_object(softmax_lab.softmax) is not None


def test_describe_says_whose_kernel_it_is():
    from softmax_lab.kernels import fused

    text = origin.describe(fused.fused_softmax_kernel)
    assert text.startswith("this is softmax_lab's kernel, not yours (softmax_lab.kernels.fused.fused_softmax_kernel)")
    assert origin.describe(lambda x: x) is None


def test_the_skeleton_launcher_around_an_imported_package_kernel_is_recognised(tmp_path):
    """The package's kernel imported under the exercise's name, the given launcher kept."""
    source = exercise_source("ch04-fused")
    launcher = source[source.index("def my_fused_softmax"):]
    imported = "from softmax_lab.kernels.fused import fused_softmax_kernel as my_fused_kernel\n\n\n" + launcher
    module = load_exercise("ch04-fused", imported, tmp_path)
    assert origin.is_package_object(module.my_fused_softmax) == \
        "softmax_lab.kernels.fused.fused_softmax_kernel, called by my_fused_softmax"
    own = load_exercise("ch04-fused", source, tmp_path)
    assert origin.is_package_object(own.my_fused_softmax) is None
