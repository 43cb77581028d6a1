"""softmax_lab.measure on the CPU: the logic (rotation past L2, checks before and after, the copy beside it)
through a stand-in timing backend, and the CPU's one-line "not timed" with its memcount proxy."""
from __future__ import annotations

import time

import pytest
import torch

import softmax_lab
from softmax_lab import measure as M
from softmax_lab.kernels import fused_softmax


class FakeBackend:
    """Times a plain loop with perf_counter; the L2 size is what the test says. Records every call's input."""

    def __init__(self, l2: int):
        self._l2 = l2
        self.passes = 0

    def l2(self) -> int:
        return self._l2

    def sync(self) -> None:
        pass

    def prepare(self, calls):
        outs = [None] * len(calls)

        def run():
            self.passes += 1
            for k, c in enumerate(calls):
                outs[k] = c()
        return run, outs, "test loop"

    def time(self, run, reps):
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            run()
            times.append(1e3 * (time.perf_counter() - t))
        return times


def softmax_torch(x):
    return torch.softmax(x, dim=-1)


def make_inputs(shape=(4, 64)):
    made = []

    def make():
        made.append(torch.randn(*shape))
        return made[-1]
    return make, made


@pytest.mark.parametrize("per_set,l2,want", [
    (32 * 2**20, 60 * 2**20, 4),        # 4096x1024 fp32 in + out on an H200: 4 sets = 128 MiB >= 120 MiB
    (2**30, 60 * 2**20, 2),             # bigger than the cache: still 2, never one set timed against itself
    (1024, 60 * 2**20, M.MAX_SETS),     # tiny inputs: capped (the result then says the cache serves them)
    (3 * 2**20, 2**20 * 50, 34),
])
def test_rotation_count(per_set, l2, want):
    n = M.rotation_count(per_set, l2)
    assert n == want
    assert n == M.MAX_SETS or n * per_set >= 2 * l2


def test_rotation_count_refuses_empty_inputs():
    with pytest.raises(ValueError, match="no bytes"):
        M.rotation_count(0, 2**20)


def test_times_every_set_checks_and_compares_with_copy():
    make, made = make_inputs()
    per_set = 2 * 4 * 64 * 4  # x and y, float32
    backend = FakeBackend(l2=5 * per_set)
    seen = []

    def fn(x):
        seen.append(id(x))
        return softmax_torch(x)

    r = softmax_lab.measure(fn, make, reps=5, _backend=backend)
    assert r.ok and r.timed, r.text
    assert r.sets == len(made) == M.rotation_count(per_set, 5 * per_set) == 10
    assert set(seen) == {id(x) for x in made}           # every input set went through fn
    assert r.bytes_per_call == per_set and r.l2_bytes == 5 * per_set
    assert r.spread_ms[0] <= r.median_ms <= r.spread_ms[1]
    assert r.copy_gbps > 0 and r.pct_of_copy == pytest.approx(100 * r.gbps / r.copy_gbps)
    assert "% of copy" in r.text and "rotated past" in r.text and "checked before and after" in r.text
    assert str(r) == r.text


def test_wrong_output_before_timing_is_reported_not_timed():
    make, _ = make_inputs()
    r = M.measure(lambda x: torch.softmax(x, dim=0), make, reps=3, _backend=FakeBackend(2**12))
    assert not r.ok and not r.timed
    assert r.text.startswith("<lambda>: NOT TIMED - wrong output before timing")
    assert "differ from the float64 reference" in r.text


def test_wrong_output_after_timing_is_caught():
    """A kernel that goes wrong only once it runs over and over (a race, a stale buffer) is caught by the check
    of the timed runs' own outputs."""
    make, _ = make_inputs()
    calls = {"n": 0}

    def flaky(x):
        calls["n"] += 1
        y = softmax_torch(x)
        return y if calls["n"] <= 3 else y * 0.5

    r = M.measure(flaky, make, reps=3, _backend=FakeBackend(2 * 2048))
    assert not r.ok and "wrong output after timing" in r.problem


def test_check_callable_and_its_message():
    make, _ = make_inputs()
    r = M.measure(softmax_torch, make, check=lambda y, x: "" if y.shape == x.shape else "bad shape",
                  reps=3, _backend=FakeBackend(2**12))
    assert r.ok and r.timed
    r = M.measure(softmax_torch, make, check=lambda y, x: "rows do not sum to 2", reps=3,
                  _backend=FakeBackend(2**12))
    assert not r.ok and r.problem.endswith("rows do not sum to 2")


def test_small_inputs_note_the_cache():
    r = M.measure(softmax_torch, lambda: torch.randn(2, 2), reps=3, _backend=FakeBackend(2**30))
    assert r.sets == M.MAX_SETS and "smaller than twice the L2" in r.text


def test_cpu_does_not_time_and_labels_its_proxy():
    if softmax_lab.ON_GPU:
        pytest.skip("the CPU path")
    r = softmax_lab.measure(fused_softmax, lambda: torch.randn(4096, 1024))
    assert not r.timed and r.text == ("fused_softmax: not timed on the CPU (the interpreter's speed says nothing "
                                      "about a GPU)")
    r = softmax_lab.measure(fused_softmax, lambda: torch.randn(4096, 1024), proxy_inputs=lambda: torch.randn(3, 5))
    assert r.proxy == {"programs": 3, "launches": 1, "load_bytes": 60, "store_bytes": 60}
    assert "proxy, counted by memcount, not a timing" in r.text


def test_reps_must_allow_a_spread():
    with pytest.raises(ValueError, match="at least 3"):
        M.measure(softmax_torch, lambda: torch.randn(2, 2), reps=1)


@pytest.mark.gpu
def test_gpu_fused_against_copy():
    r = softmax_lab.measure(fused_softmax, lambda: torch.randn(4096, 1024, device="cuda"))
    assert r.ok and r.timed and r.method == "CUDA graph", r.text
    assert r.l2_bytes == torch.cuda.get_device_properties(0).L2_cache_size
    assert r.sets * r.bytes_per_call >= 2 * r.l2_bytes
    assert 30 < r.pct_of_copy < 130, r.text
