#!/bin/bash
# The merged tree of stop 9 (issues 10, 13, 15) on one H200: nbval over every chapter and the unit tests with the
# GPU-only sizes, side by side. Run from the repository root of the device copy, with carry [".whl"].
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/code:$PYTHONPATH
# added after the run: what the bare image lacks for the tests that need a Jupyter kernel or nbconvert's templates
export JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --user --name softmax-lab --display-name "Softmax Lab (Python 3)" > /dev/null
date -u > $OUT/env.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/env.txt
python3 -c "import torch, triton, numpy, numba; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'numba', numba.__version__)" >> $OUT/env.txt
CFG=code/softmax_lab/course/data/nbval_sanitize.cfg
( timeout 400 python3 -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env --nbval-sanitize-with $CFG \
    --nbval-cell-timeout 150 -n 7 --dist loadscope solutions/ > $OUT/nbval.log 2>&1; echo "rc=$?" >> $OUT/nbval.log ) &
( timeout 400 python3 -m pytest -p no:cacheprovider tests --ignore=tests/ui --ignore=tests/test_grade.py \
    --ignore=tests/test_grade_sandbox.py --ignore=tests/test_install.py --ignore=tests/test_workspace.py \
    -m "gpu or not gpu" -n 8 --dist loadscope -q -rfE > $OUT/unit.log 2>&1; echo "rc=$?" >> $OUT/unit.log ) &
wait
tail -n 3 $OUT/nbval.log $OUT/unit.log
