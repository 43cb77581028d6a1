# Softmax Lab. Two commands: `make lab` (open the course) and `make test` (run every test).
# Each creates .venv if missing and installs the locked dependencies (requirements/lab.txt for the course,
# requirements/test.txt adds the test tools) and this package (editable), with the Jupyter kernel
# "softmax-lab". Re-running is fast: stamp files skip the install until a lock file changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
JOBS   ?= 2
LAB_STAMP  := $(VENV)/.stamp-lab
TEST_STAMP := $(VENV)/.stamp-test
export PYTHON

VENV_PATH  := $(abspath $(BIN)):$(PATH)

.PHONY: lab workspace site test test-unit test-notebooks test-ui test-gpu notebooks lock bench doctor clean

$(LAB_STAMP): requirements/lab.txt pyproject.toml tools/install.sh
	tools/install.sh $(VENV) requirements/lab.txt
	touch $@

$(TEST_STAMP): requirements/test.txt $(LAB_STAMP)
	tools/install.sh $(VENV) requirements/test.txt
	touch $@

# Learners work in workspace/ (not tracked by git): the first run copies the chapters there; later runs add new
# chapters and never overwrite one you have (`softmax-lab workspace --help`).
workspace: $(LAB_STAMP)
	$(BIN)/softmax-lab workspace

# `softmax-lab lab` (code/softmax_lab/lab.py): refuses an occupied port, fills workspace/, then runs JupyterLab
# on it with chapter 0 open, only the course kernel, no news pop-up, and this venv first on PATH.
lab: $(LAB_STAMP)
	$(BIN)/softmax-lab lab --port $(PORT)

test: test-unit test-notebooks test-ui

test-unit: $(TEST_STAMP)
	$(BIN)/python -m pytest tests -n $(JOBS) --dist loadscope --ignore=tests/ui --durations=12

# nbval over the solution notebooks in Triton's interpreter, with the README's switch SOFTMAX_LAB_DEVICE=cpu set,
# so every chapter is run as a learner comparing with the CPU runs it (make test-gpu runs them on a GPU).
test-notebooks: $(TEST_STAMP)
	SOFTMAX_LAB_DEVICE=cpu $(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-sanitize-with code/softmax_lab/data/nbval_sanitize.cfg --nbval-cell-timeout 300 \
	  -n $(JOBS) --dist loadscope solutions/

# JupyterLab + Chromium end to end (tests/ui): chapters 1, 2, 5 run in the browser, steppers clicked, one exercise
# pasted in. Installs Debian's chromium when missing (root); screenshots in test-output/ui/.
test-ui: $(TEST_STAMP)
	PATH="$(VENV_PATH)" $(BIN)/python -m pytest -p no:cacheprovider tests/ui -m ui

# On a CUDA machine, with its own CUDA torch (no .venv): unit tests including the GPU-only sizes, then nbval
# over the solutions. Needs triton 3.6.0 and, for nbval, the Jupyter packages (README, "Running on a GPU").
GPU_PYTHON ?= python3
test-gpu:
	PYTHONPATH=$(CURDIR)/code:$$PYTHONPATH $(GPU_PYTHON) -m pytest -p no:cacheprovider tests --ignore=tests/ui \
	  -m "gpu or not gpu" -n 8 --dist loadscope
	PYTHONPATH=$(CURDIR)/code:$$PYTHONPATH $(GPU_PYTHON) -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-sanitize-with code/softmax_lab/data/nbval_sanitize.cfg -n 8 --dist loadscope solutions/

# Authors: regenerate notebooks/ (the learner versions, tracked) from solutions/. Never touches workspace/, and
# refuses to overwrite a notebook in notebooks/ that someone edited by hand (names it; --force to overwrite).
notebooks: $(LAB_STAMP)
	$(BIN)/softmax-lab build

# The web edition: solutions/ with stored outputs and no answers, as a static book in site/ (Sphinx + MyST-NB, which
# come with the test tools; tests/test_web.py builds it and reads it in Chromium in `make test`).
site: $(TEST_STAMP)
	$(BIN)/softmax-lab site

# Authors: re-resolve the lock files from pyproject.toml against PyPI alone (Linux x86-64, Python 3.11+).
UV_VERSION := 0.13.9
UV_COMPILE := env -u PIP_FIND_LINKS -u UV_INDEX_URL -u UV_EXTRA_INDEX_URL UV_NO_CONFIG=1 .lock-venv/bin/uv pip compile \
  --index-url https://pypi.org/simple --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --generate-hashes --custom-compile-command "make lock" -q
lock:
	test -x .lock-venv/bin/uv || { $(PYTHON) -m venv .lock-venv && PIP_CONFIG_FILE=/dev/null .lock-venv/bin/pip install -q uv==$(UV_VERSION); }
	$(UV_COMPILE) pyproject.toml -o requirements/lab.txt
	$(UV_COMPILE) pyproject.toml --extra test -c requirements/lab.txt -o requirements/test.txt

bench: $(LAB_STAMP)
	$(BIN)/softmax-lab bench

doctor: $(LAB_STAMP)
	$(BIN)/softmax-lab doctor

# Deletes the environment and test output only; workspace/ (your notebooks) is never touched.
clean:
	rm -rf $(VENV) .pytest_cache test-output .lock-venv site
