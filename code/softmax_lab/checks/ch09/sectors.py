"""Exercise ch09-sectors: the 32-byte sectors and 128-byte lines one warp's addresses touch (coalescing), predicted
for four mappings before the notebook counts them, then counted by the learner's own function."""
from __future__ import annotations

import torch

import threading

import numpy as np

from .._pitfalls import Verdict
from ..common import Report, explain_exception
from ..judging import PCall, PythonJudge
from ._blocks import NOT_IMPLEMENTED, _cl

JUDGE_FRESH = 3  # fresh warp loads in every grader run (lane stride, start and width from the grader's seed)


_RECORDING = threading.Lock()
_RECORDED: list = []


def _sector_cases():
    """The case table, read by the notebook check and the grader's judge alike: (name, byte addresses of one warp
    load, access bytes), from the course kernels' own loads (recorded once per process, one thread at a time: the
    simulator's state is global, and the grader judges submissions in threads) and a few special cases."""
    with _RECORDING:
        if not _RECORDED:
            _RECORDED.extend(_record_cases())
    return list(_RECORDED)


def _record_cases():
    cl = _cl()
    k = cl.kernels
    g = torch.Generator().manual_seed(98)
    x = torch.randn(32, 64, generator=g)
    serial = cl.warp_loads(k.row_serial_kernel, 1, 32, (x, torch.zeros_like(x), 32, 64))
    yield "one thread per row (row_serial_kernel, 32 rows of 64 floats)", serial.warp_load(0, 0, 0).active, 4
    row = torch.randn(1, 64, generator=g)
    block = cl.warp_loads(k.block_softmax_kernel, 1, 32, (row, torch.zeros_like(row), 64), shared_bytes=128)
    yield "one block per row (block_softmax_kernel, 1 row of 64 floats)", block.warp_load(0, 0, 0).active, 4
    chunk = torch.randn(1, 512, generator=g)
    chunked = cl.warp_loads(k.chunked_row_max_kernel, 1, 32, (chunk, torch.zeros(1), 512))
    yield "seed 004's chunks (thread t reads 16t, 16t+1, ...)", chunked.warp_load(0, 0, 0).active, 4
    big = torch.randn(1, 65, generator=g)
    view = big[:, 1:]
    shifted = cl.warp_loads(k.block_softmax_kernel, 1, 32, (view, torch.zeros(1, 64), 64), shared_bytes=128)
    yield "one block per row on the view big[:, 1:] (starts 4 bytes in)", shifted.warp_load(0, 0, 0).active, 4
    yield "16 lanes active (a row of 16 floats)", block.warp_load(0, 0, 0).active[:16], 4
    yield "32 float16 values side by side", [2 * i for i in range(32)], 2
    yield "every lane reads the same float (a broadcast)", [256] * 32, 4
    yield ("8-byte reads starting 4 bytes in (4 + 8 * lane): some straddle a sector boundary and touch two",
           [4 + 8 * lane for lane in range(32)], 8)
    yield "8-byte reads, one per 12-byte record, from byte 8 (8 + 12 * lane)", [8 + 12 * lane for lane in range(32)], 8
    yield ("12-byte reads, one per 16-byte record, from byte 8 (8 + 16 * lane)",
           [8 + 16 * lane for lane in range(32)], 12)


# ch09-sectors' predictions, made before the cell after the check counts every load of the same launch: 32 rows of
# 256 float32, 32 threads. The mapping (the key of the learner's dict) -> the kernel whose first warp load is counted.
PREDICTIONS = ["one thread per row", "chunks", "one block per row", "one block per row on big[:, 1:]"]
_PREDICTED: dict = {}


def predicted_truth() -> dict:
    """{mapping: (sectors, lines)} of the first warp load of each mapping of ``PREDICTIONS``, recorded from the
    course's kernels (once per process)."""
    with _RECORDING:
        if not _PREDICTED:
            cl = _cl()
            k = cl.kernels
            x = torch.zeros(32, 256)
            big = torch.zeros(1, 257)
            loads = {
                "one thread per row": cl.warp_loads(k.row_serial_kernel, 1, 32, (x, torch.zeros_like(x), 32, 256)),
                "chunks": cl.warp_loads(k.chunked_row_max_kernel, 1, 32, (x[:1], torch.zeros(1), 256)),
                "one block per row": cl.warp_loads(k.block_softmax_kernel, 1, 32, (x[:1], torch.zeros(1, 256), 256),
                                                   shared_bytes=128),
                "one block per row on big[:, 1:]": cl.warp_loads(k.block_softmax_kernel, 1, 32,
                                                                 (big[:, 1:], torch.zeros(1, 256), 256),
                                                                 shared_bytes=128),
            }
            _PREDICTED.update({name: cl.count_sectors(loads[name].warp_load(0, 0, 0).active, 4)
                               for name in PREDICTIONS})
    return dict(_PREDICTED)


def prediction_problem(got, name: str, want: tuple) -> str:
    """'' when the learner's prediction dict ``got`` holds ``want`` for mapping ``name``, else what is off."""
    if not isinstance(got, dict):
        return (f"predicted_loads() returned {type(got).__name__}: a prediction is a dict {{mapping: (sectors, "
                "lines)}} with the four mappings' names as keys")
    if name not in got:
        return f"no prediction for {name!r} (the keys are the mappings' names, as written above the exercise)"
    try:
        sectors, lines = (int(v) for v in got[name])
    except (TypeError, ValueError):
        return f"a prediction is a pair (sectors, lines) of whole numbers, got {str(got[name])[:40]}"
    if (sectors, lines) == want:
        return ""
    if (lines, sectors) == want:
        return "sectors and lines are swapped"
    if sectors != want[0]:
        if sectors < want[0]:
            return (f"{sectors} sectors is too few: the bytes the 32 lanes read are spread over more 32-byte "
                    "sectors than that")
        return (f"{sectors} sectors is too many: some lanes you counted apart read bytes of the same 32-byte "
                "sector, which the warp load fetches once")
    return (f"{lines} lines is too {'few' if lines < want[1] else 'many'}: the bytes the 32 lanes read span "
            f"{'more' if lines < want[1] else 'fewer'} 128-byte lines than that")


def _sectors_problem(fn, addresses, access_bytes: int) -> str:
    return sectors_verdict(fn(list(addresses), access_bytes), addresses, access_bytes)


def sectors_verdict(got, addresses, access_bytes: int) -> str:
    """'' when ``got`` is the (sectors, lines) pair of this warp load, else the counting mistake it shows."""
    cl = _cl()
    want = cl.count_sectors(addresses, access_bytes)
    try:
        got = (int(got[0]), int(got[1]))
    except (TypeError, ValueError, IndexError, OverflowError):
        return f"return a pair (sectors, lines), got {str(got)[:60]}"
    if got == want:
        return ""
    if got == (want[1], want[0]):
        return "sectors and lines are swapped"
    # a counting mistake is named only when no other one gives the same number of sectors
    n = len(addresses)
    first = (len({a // 32 for a in addresses}), len({a // 128 for a in addresses}))
    mistakes = {
        n: "sectors: you counted one per lane, but lanes that fall in the same 32-byte sector share it",
        -(-n * access_bytes // 32): ("sectors: you divided the bytes the warp asked for by 32; that holds only for "
                                     "contiguous, aligned addresses, and these lanes are not"),
        first[0]: (f"you counted only the sector of each access's first byte: a read of {access_bytes} bytes that "
                   "straddles a boundary touches the next sector (and line) too"),
    }
    candidates = [n, -(-n * access_bytes // 32), first[0]]
    if got[0] != want[0] and candidates.count(got[0]) == 1:
        return mistakes[got[0]]
    if got[0] == want[0] and got == first:  # the first bytes hit every sector, but a read runs into the next line
        return mistakes[first[0]]
    if got[0] != want[0]:
        return f"sectors: {got[0]} is {'too many' if got[0] > want[0] else 'too few'}"
    return f"lines: {got[1]} is {'too many' if got[1] > want[1] else 'too few'} (a line is 128 bytes)"


def _blank(fn, *args) -> bool:
    try:
        fn(*args)
    except NotImplementedError:
        return True
    except Exception:
        pass
    return False


def check_sectors(sectors_and_lines, predicted_loads) -> Verdict:
    """Exercise ch09-sectors: ``predicted_loads() -> {mapping: (sectors, lines)}``, the prediction for the first
    warp load of each mapping of ``PREDICTIONS``, and ``sectors_and_lines(byte_addresses, access_bytes) ->
    (sectors, lines)``."""
    report = Report("ch09-sectors")
    if _blank(predicted_loads) or _blank(sectors_and_lines, [0], 4):
        report.add("predicted_loads and sectors_and_lines", NOT_IMPLEMENTED)
        return Verdict(report.show())
    try:
        cases = list(_sector_cases())
        truth = predicted_truth()
    except Exception as err:
        report.add("recording the kernels' addresses", explain_exception(err))
        return Verdict(report.show())
    try:
        guess = predicted_loads()
    except Exception as err:
        guess = err
    for name in PREDICTIONS:
        report.run(f"your prediction: {name}", lambda n=name: (
            explain_exception(guess) if isinstance(guess, Exception) else prediction_problem(guess, n, truth[n])))
    for name, addresses, nbytes in cases:
        report.run(name, lambda a=addresses, b=nbytes: _sectors_problem(sectors_and_lines, a, b))
    return Verdict(report.show())


def fresh_load(rng: np.random.Generator) -> tuple:
    """One warp load like the table's, from the grader's seed: 32 lanes, a lane stride, a start, a width."""
    width = int(rng.choice([1, 2, 4, 8, 16]))
    stride = int(rng.choice([width, 2 * width, 12, 36, 132, 4096]))
    start = int(rng.integers(0, 64))
    return (f"lane stride {stride} bytes from byte {start}, {width}-byte reads",
            [start + stride * lane for lane in range(32)], width)


def _expect(addresses, access_bytes):
    return lambda value: sectors_verdict(value, addresses, access_bytes)


def _judge_calls(rng: np.random.Generator) -> list:
    cases = list(_sector_cases()) + [fresh_load(rng) for _ in range(JUDGE_FRESH)]
    truth = predicted_truth()
    return ([PCall(f"your prediction: {name}", "predicted_loads", [],
                   lambda value, n=name: prediction_problem(value, n, truth[n])) for name in PREDICTIONS]
            + [PCall(name, "sectors_and_lines", [[int(a) for a in addresses], int(nbytes)], _expect(addresses, nbytes))
               for name, addresses, nbytes in cases])


JUDGES = {"ch09-sectors": PythonJudge(_judge_calls)}
