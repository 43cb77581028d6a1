"""Round 14: does the streamed clustered_tma form's speed depend on where its output lies? ``stream_repeats.py
--paths`` timed it at 95.0-95.8% of copy with an output of its own for each input (the calls rotating through
pairs) and at 87-91 with a new output each call (the dispatcher's way; in a CUDA graph the allocator hands every
call the same block), at 1024×163840 bf16, not at 131,072. Here one input and one output of one buffer, the output
``delta`` bytes after the input's end, each timed alone (CUDA graph of the one call, median), beside a copy of the
same bytes between the same two places; then the same output for two inputs in turn. GPU machine, repository root:

    PYTHONPATH=code python3 benchmarks/sweeps/output_offsets.py
"""
import torch
import triton.testing

from softmax_lab.kernels import clustered_tma_softmax

MB = 1 << 20


def timed(fn):
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench_cudagraph(fn, rep=40, return_mode="median")


def main():
    for rows, cols, knobs in ((1024, 163840, dict(parts=8, num_warps=8, stream=True)),
                              (1024, 128256, dict(parts=8, num_warps=4, stream=True))):
        n = rows * cols
        big = torch.empty(2 * n + 80 * MB, dtype=torch.bfloat16, device="cuda")
        x = big[:n].view(rows, cols)
        x.copy_(3 * torch.randn(rows, cols, device="cuda"))
        for delta in (0, 1 * MB, 2 * MB, 3 * MB, 4 * MB, 8 * MB, 16 * MB, 32 * MB, 64 * MB, 96 * MB, 128 * MB):
            start = n + delta // 2
            out = big[start:start + n].view(rows, cols)
            ms = timed(lambda: clustered_tma_softmax(x, out=out, **knobs))
            ok = torch.allclose(out.float(), torch.softmax(x.float(), -1), atol=1e-3, rtol=2e-2)
            copy = timed(lambda: out.copy_(x))  # (after the check: it overwrites the output)
            print(f"{rows}x{cols} bf16 {knobs['parts']}x{knobs['num_warps']}: output {delta // MB:4d} MB after x: "
                  f"{100 * copy / ms:5.1f}% of copy ({ms * 1e3:.1f} us, copy {copy * 1e3:.1f}) "
                  f"{'ok' if ok else 'WRONG'}", flush=True)
        x2 = torch.randn(rows, cols, device="cuda").bfloat16()
        out = torch.empty_like(x)
        state = {"i": 0}

        def two():  # (two inputs in turn, one output: the dispatcher's calls in a CUDA graph)
            state["i"] ^= 1
            clustered_tma_softmax(x if state["i"] else x2, out=out, **knobs)

        outs = [torch.empty_like(x), torch.empty_like(x)]

        def pairs():  # (two inputs in turn, each its own output: the bench's candidates)
            state["i"] ^= 1
            clustered_tma_softmax(x if state["i"] else x2, out=outs[state["i"]], **knobs)

        copy = timed(lambda: out.copy_(x))
        for name, fn in (("two inputs, one output", two), ("two inputs, two outputs", pairs)):
            print(f"{rows}x{cols} {name}: {100 * copy / timed(fn):5.1f}% of copy", flush=True)


if __name__ == "__main__":
    main()
