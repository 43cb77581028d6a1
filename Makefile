# Softmax Lab. Two commands: `make lab` (open the course) and `make test` (run every test).
# Each creates .venv if missing, installs the pinned dependencies and this package (editable),
# and registers the Jupyter kernel "softmax-lab". Re-running is fast: the stamp file skips the install.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8888
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= 2

# JupyterLab refuses root without --allow-root; open a browser only where there is a display.
ROOT_FLAG    := $(if $(filter 0,$(shell id -u)),--allow-root,)
BROWSER_FLAG := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)

.PHONY: lab test test-unit test-notebooks test-ui test-gpu notebooks bench doctor clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	$(BIN)/python -m ipykernel install --sys-prefix --name softmax-lab --display-name "Softmax Lab (Python 3)"
	touch $@

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.port=$(PORT) --ServerApp.port_retries=0 $(ROOT_FLAG) $(BROWSER_FLAG)

test: test-unit test-notebooks test-ui

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests -n $(JOBS) --dist loadscope --ignore=tests/ui

# nbval over the solution notebooks on this machine (CPU interpreter without a GPU).
test-notebooks: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout 300 \
	  -n $(JOBS) --dist loadscope solutions/

# JupyterLab + Chromium end to end (tests/ui): chapters 1, 2, 5 run in the browser, steppers clicked, one exercise
# pasted in. Installs Debian's chromium when missing (root); screenshots in test-output/ui/.
test-ui: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider tests/ui -m ui

# On a CUDA machine, with its own CUDA torch (no .venv): unit tests including the GPU-only sizes, then nbval
# over the solutions. Needs triton 3.6.0 and, for nbval, the Jupyter packages (README, "Running on a GPU").
GPU_PYTHON ?= python3
test-gpu:
	PYTHONPATH=$(CURDIR)/code:$$PYTHONPATH $(GPU_PYTHON) -m pytest -p no:cacheprovider tests --ignore=tests/ui \
	  -m "gpu or not gpu" -n 8 --dist loadscope
	PYTHONPATH=$(CURDIR)/code:$$PYTHONPATH $(GPU_PYTHON) -m pytest -p no:cacheprovider --nbval-lax --nbval-current-env \
	  --nbval-sanitize-with tests/nbval_sanitize.cfg -n 8 --dist loadscope solutions/

notebooks: $(STAMP)
	$(BIN)/softmax-lab build

bench: $(STAMP)
	$(BIN)/softmax-lab bench

doctor: $(STAMP)
	$(BIN)/softmax-lab doctor

clean:
	rm -rf $(VENV) .pytest_cache test-output
