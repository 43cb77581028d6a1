"""Round 15: does the bench's process, with QuACK and Liger-Kernel in it, slow the streamed clustered_tma form?

The dispatcher's line at 1024×128256 bf16 (``softmax(x)``, the streamed form on 8 programs of 4 warps) ran 94.6-95.5%
of copy three times in a process of its own (``stream_repeats.py --dispatch``, h200-stream-dispatch-round15.json)
and 87.8-88.5 in the issue's bench (rounds 14-15), whose process imports the peers at its start and runs them on
every shape. Here, in one process: that line twice, then again after each step of what the bench does (import the
peers; run QuACK's and Liger's forward on the same shape; run QuACK's on a few other shapes), with ``bench.compare``
(a copy of the same bytes timed alike each time). GPU machine with the peers unpacked as
``benchmarks/bench_with_peers.sh`` does (PYTHONPATH set the same way), repository root:

    python3 benchmarks/sweeps/peer_state.py OUT.json          # h200-peer-state-round15.json
"""
import sys

import torch

from softmax_lab import bench

BF16 = torch.bfloat16
SHAPE = (1024, 128256, BF16)


def ours(step, records):
    for rec in bench.compare(*SHAPE, [], rep_ms=40, with_torch=False):
        if rec["impl"] == "softmax_lab.softmax":
            rec["step"] = step
            records.append(rec)
            print(f"{step:40s} {rec.get('pct_copy', 0):6.1f}% {rec.get('checked')}", flush=True)


def main(path):
    records = []
    for _ in range(2):
        ours("alone", records)
    found, missing = bench.peers(False, True)
    print("peers:", sorted(found), missing or "", flush=True)
    for _ in range(2):
        ours("after importing the peers", records)
    for name in sorted(found):
        for rec in bench.compare(*SHAPE, [(name, lambda x, out, f=found[name][0]: f(x), None)], rep_ms=40,
                                 with_torch=False):
            if rec["impl"] == name:
                print(f"{name:40s} {rec.get('pct_copy', 0):6.1f}% {rec.get('checked') or rec.get('error')}",
                      flush=True)
        for _ in range(2):
            ours(f"after {name} on this shape", records)
    if "quack" in found:
        for shape in ((2048, 32768, BF16), (512, 151936, torch.float32), (4096, 1024, torch.float32)):
            bench.compare(*shape, [("quack", lambda x, out: found["quack"][0](x), None)], rep_ms=20, with_torch=False)
        for _ in range(2):
            ours("after quack on three other shapes", records)
    bench.save(path, records, "python3 benchmarks/sweeps/peer_state.py OUT.json")


if __name__ == "__main__":
    main(sys.argv[1])
