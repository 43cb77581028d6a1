"""GPU figures for chapter 7's targets (helper exc, issue 13): the solution kernels of ch07-multirow and
ch07-persistent timed with softmax_lab.measure at the targets' shapes over a few knob settings, and their
registers/spills. Run on the device: `python3 results/exc_gpu_figures.py` (see results/run-h200-exc.sh)."""
import importlib.util
import json
import sys
from pathlib import Path

import softmax_lab
import nbformat
import torch
import triton

root = Path(__file__).resolve().parents[1]
nb = nbformat.read(root / "solutions" / "07_performance.ipynb", 4)
src = "\n\n".join(c.source for c in nb.cells if any(t in c.metadata.get("tags", []) for t in
                                                      ("exercise:ch07-multirow", "exercise:ch07-persistent",
                                                       "exercise:ch07-occupancy")))
path = Path("/tmp/ch07_solutions.py")
path.write_text("import math\nimport torch\nimport triton\nimport triton.language as tl\n\n" + src + "\n")
spec = importlib.util.spec_from_file_location("ch07_solutions", path)
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)

dev = torch.device("cuda")
sms = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for R, w in [(4, 4), (8, 4), (16, 4), (32, 4), (8, 2), (8, 8)]:
    r = softmax_lab.measure(lambda x: m.my_multirow_softmax(x, torch.empty_like(x), ROWS=R, num_warps=w),
                            lambda: torch.randn(65536, 128, device=dev), name=f"multirow 65536x128 ROWS={R} w={w}")
    print(r, flush=True)
    rows.append({"kernel": "multirow", "shape": [65536, 128], "ROWS": R, "num_warps": w, "pct_copy": r.pct_of_copy,
                 "median_us": r.median_ms * 1e3})
for p, w, s in [(4, 4, 2), (2, 4, 2), (8, 4, 2), (4, 8, 2), (4, 4, 1), (4, 4, 3)]:
    r = softmax_lab.measure(lambda x: m.my_persistent_softmax(x, torch.empty_like(x), n_programs=sms * p,
                                                              num_warps=w, num_stages=s),
                            lambda: torch.randn(32768, 1024, device=dev),
                            name=f"persistent 32768x1024 programs/SM={p} w={w} stages={s}")
    print(r, flush=True)
    rows.append({"kernel": "persistent", "shape": [32768, 1024], "programs_per_sm": p, "num_warps": w,
                 "num_stages": s, "pct_copy": r.pct_of_copy, "median_us": r.median_ms * 1e3})
x = torch.randn(4096, 1024, device=dev)
for w in (4, 8):
    k = m.my_persistent_kernel[(sms,)](torch.empty_like(x), x, 1024, 1024, 4096, 1024, BLOCK=1024, NUM_STAGES=2,
                                       num_warps=w)
    print(f"my_persistent_kernel BLOCK=1024 w={w}: n_regs {k.n_regs}, n_spills {k.n_spills}, shared "
          f"{k.metadata.shared} -> {m.programs_per_sm(k.n_regs, w, k.metadata.shared)} programs per SM")
meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__,
        "sms": sms, "command": "python3 results/exc_gpu_figures.py", "timing": "softmax_lab.measure (CUDA graph, "
        "input sets rotated past 2x L2, output checked before and after, copy of the same bytes beside)"}
json.dump({"meta": meta, "records": rows}, open(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdout", "w"), indent=1)
print("wrote the targets figures", flush=True)

# chapter 9's timing cell: numba kernels on torch's stream, timed the same way
from softmax_lab.cuda_layer import kernels as K  # noqa: E402

for name, fn in [("block kernel (256 threads)", lambda x: K.block_softmax(x, threads=256)),
                 ("shuffle tail (256 threads)", lambda x: K.launch_rows(K.shuffle_tail_kernel, x, None, 256)),
                 ("row serial", K.row_serial_softmax)]:
    print(softmax_lab.measure(fn, lambda: torch.randn(4096, 1024, device=dev), name=f"ch09 {name}"), flush=True)
