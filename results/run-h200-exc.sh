#!/bin/bash
# helper exc (issue 13): chapter 7 on one H200 - the notebook executed with its GPU cells, and the targets' figures.
# run from the repository root of the device copy, with carry [".wt/exc", ".whl"]
cd .wt/exc && export PYTHONPATH=$PWD/code
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ../../.whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PYTHONPATH
date -u > $OUT/env.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/env.txt
python3 -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__)" >> $OUT/env.txt
timeout 130 python3 - <<'PY' > $OUT/nb07.log 2>&1
import nbformat, time
from nbclient import NotebookClient
t = time.time()
nb = nbformat.read("solutions/07_performance.ipynb", 4)
try:
    NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": "solutions"}}).execute()
    print("executed without error")
except Exception as err:
    print("ERROR", type(err).__name__, str(err)[-3000:])
nbformat.write(nb, "/tmp/nb07_gpu.ipynb")
print(f"{time.time() - t:.0f} s")
PY
cp /tmp/nb07_gpu.ipynb $OUT/ 2>/dev/null
timeout 60 python3 results/exc_gpu_figures.py $OUT/h200-exc-targets.json > $OUT/figures.log 2>&1
echo done
