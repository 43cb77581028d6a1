#!/bin/sh
# Grading on a GPU machine, sandboxed. Run from the checkout root on the H200, with `bwrap` on PATH (Debian's
# bubblewrap .deb unpacked is enough) and the course's Python environment active:
#
#   sh benchmarks/grading/grade_on_gpu.sh [EXTRA-GRADE-OPTIONS]      (e.g. --unsafe-no-cgroup where none can be made)
#
# It records, under $OUT (default bench-out/h200-grading/): what the sandbox sees of the GPU (device
# nodes, the driver's folders, Triton finding libcuda inside), `softmax-lab check` of chapters 4, 7 and 9's solutions
# (expected: every exercise passed), and the chapter 4 cheats graded (the int32 mutant must fail the judge's
# GPU case with real buffers past 2**31 elements: "64-bit" in its message).
OUT=${OUT:-bench-out/h200-grading}
mkdir -p "$OUT"
{ date -u; nvidia-smi -L; python -c 'import torch, triton; print(torch.__version__, triton.__version__)'; } > "$OUT/env.txt" 2>&1

python - > "$OUT/sandbox-view.txt" 2>&1 <<'EOF'
import subprocess, sys, tempfile
from pathlib import Path
from softmax_lab.grading import cgroup, sandbox

sandbox.check_works()
print("user namespace:", sandbox.USERNS)
print("devices:", sandbox.gpu_devices())
print("driver folders bound:", sandbox.driver_dirs())
print("cgroups:", cgroup.backend()[0] or cgroup.why_unavailable())
probe = ("import torch, triton, triton.language as tl\n"
         "from triton.backends.nvidia.driver import libcuda_dirs\n"
         "print('cuda', torch.cuda.is_available(), 'libcuda', libcuda_dirs())\n"
         "@triton.jit\ndef k(x):\n    tl.store(x, 1.0)\n"
         "x = torch.zeros(1, device='cuda'); k[(1,)](x); torch.cuda.synchronize(); print('launched', x.item())\n")
grader_dir = Path(tempfile.mkdtemp())
(grader_dir / "probe.py").write_text(probe)  # @triton.jit reads its source from a file
cmd = sandbox.command([sys.executable, "/grader/probe.py"], grader_dir=grader_dir, env=sandbox.base_env())
p = subprocess.run(cmd, capture_output=True, text=True)
print("rc", p.returncode, p.stdout, p.stderr[-3000:])
EOF

softmax-lab check solutions/04_three_kernels_to_one.ipynb solutions/07_performance.ipynb \
    solutions/09_cuda_layer.ipynb "$@" > "$OUT/check.txt" 2>&1
echo "check exit status $?" >> "$OUT/check.txt"
python -m pytest tests/grading/test_grade_sandbox.py -k real_chapter_cheats -n 0 -q -rA > "$OUT/ch04-cheats.txt" 2>&1
echo "pytest exit status $?" >> "$OUT/ch04-cheats.txt"
tail -n 3 "$OUT"/*.txt
