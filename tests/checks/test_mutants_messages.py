"""Each message names the real first fault: one wrong answer per message, and what the learner sees.

A load with no mask is named as such, not as padding that reads 0; padding that reads 0 is named, drawn in the
lane map with the value the padding lanes read, and the verdict line stays last; the memory-traffic case judges
traffic, not the values the other cases already judge; a contiguous input is never called strided.
"""
from __future__ import annotations

import struct

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from softmax_lab.checks import ch00, ch02

from conftest import exercise_source, load_exercise, run_check

LOAD = 'x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))'
STORE = "tl.store(out_ptr + row * n_cols + cols, y, mask=mask)"
CH02 = "ch02-masked-load-store"


def ch02_mutant(tmp_path, *edits):
    source = exercise_source(CH02)
    for old, new in edits:
        assert old in source, f"the solution of {CH02} no longer contains {old!r}: update this test"
        source = source.replace(old, new)
    return load_exercise(CH02, source, tmp_path).softmax_rows


def fails(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("FAIL")]


def test_a_load_with_no_mask_is_named_not_padding(tmp_path):
    ok, text = run_check(CH02, ch02_mutant(tmp_path, (LOAD, "x = tl.load(in_ptr + row * n_cols + cols)")))
    assert not ok
    assert "read the next row's values (the load is not masked)" in fails(text)[0], text
    assert "padding lanes read 0" not in text, text


@pytest.mark.parametrize("load", ['x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0)',
                                  "x = tl.load(in_ptr + row * n_cols + cols, mask=mask)"],
                         ids=["other=0.0", "a masked load without other="])
def test_padding_that_reads_0_is_named_and_drawn(load, tmp_path):
    ok, text = run_check(CH02, ch02_mutant(tmp_path, (LOAD, load)))
    lines = text.strip().splitlines()
    assert not ok
    assert "the padding lanes read 0" in fails(text)[0], text
    # the lane map shows the padding lanes and what they read; the verdict stays last
    k = lines.index("lane map of your kernel on a 4 x 10 input (contiguous); its padding lanes read 0:")
    assert "read 0: they take part" in lines[k + 1] and "max and sum" in lines[k + 1], text
    assert "-inf" not in lines[k + 1], "the lane map names the mistake, not the value to pad with"
    assert "other=" not in lines[k + 1], "the lane map names the mistake, the hint ladder gives the fix"
    assert "stored once" not in text, "the lane map must not reassure about a kernel that pads with 0"
    assert lines[-1].startswith(f"{CH02}: FAILED"), text
    # wrong values are the value cases' verdict: the traffic case (right traffic) passes
    assert f"PASS  {ch02.TRAFFIC_CASE}" in lines, text


def test_the_traffic_case_judges_traffic_not_values(tmp_path):
    source = exercise_source("ch00-double").replace("2 * x", "3 * x")
    ok, text = run_check("ch00-double", load_exercise("ch00-double", source, tmp_path).double)
    assert not ok and "the output is not 2 * x" in text, text
    assert f"PASS  {ch00.TRAFFIC_CASE}" in text.splitlines(), text


def test_a_contiguous_input_is_never_called_strided(tmp_path):
    # an unmasked store: the lane map's findings are about the store, on an input it calls contiguous
    ok, text = run_check(CH02, ch02_mutant(tmp_path, (STORE, "tl.store(out_ptr + row * n_cols + cols, y)")))
    assert not ok
    assert "(contiguous)" in text and "apart" not in text and "stride" not in text.replace("wrong stride)", ""), text
    assert "the store is not masked" in fails(text)[0], text


def test_the_lane_map_picture_is_compact_and_before_the_verdict(tmp_path):
    InteractiveShell.instance()
    fn = ch02_mutant(tmp_path, (LOAD, 'x = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0)'))
    with capture_output() as cap:
        from softmax_lab.checks import check_masked_rows

        assert not check_masked_rows(fn)
    (picture,) = [o for o in cap.outputs if "image/png" in o.data]
    png = picture.data["image/png"]
    png = png if isinstance(png, bytes) else __import__("base64").b64decode(png)
    width, height = struct.unpack(">II", png[16:24])
    assert height <= 300 and width <= 800, (width, height)
    assert cap.stdout.strip().splitlines()[-1].startswith(f"{CH02}: FAILED")


def test_a_second_load_is_named_in_the_lane_map_not_the_padding(tmp_path):
    # the mean from a second load with other=0.0: the padding lanes read -inf in one load and 0 in the other
    second = "scores = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0)"
    ok, text = run_check(CH02, ch02_mutant(tmp_path, ("scores = tl.where(mask, x, 0.0)", second)))
    assert not ok
    line = next(ln for ln in text.splitlines() if "the padding lanes (past column" in ln)
    assert "read -inf and 0: each row was loaded more than once" in line, text
    assert "take part" not in line and "not -inf" not in line, text
