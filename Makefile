# The two commands of the README:
#   make run    set up (once) and run the main job end to end into runs/default
#   make test   set up (once) and run the test suite
PY ?= python3
OUT ?= runs/default
STAMP := .setup-stamp

.PHONY: setup run test gpu-test bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	@$(PY) -c "import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith(('2.11', '2.12', '2.13')) else f'torch {v} was changed by a dependency')"
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	kernelmill run --out $(OUT)

# two workers (pytest-xdist), each taking whole test files, so a module's fixtures are built once (tests/conftest.py:
# what the workers share)
test: $(STAMP)
	$(PY) -m pytest -q -m "not gpu" -n 2 --dist loadfile --durations=25

gpu-test:
	$(PY) -m pytest -q -m gpu tests/gpu

clean:
	rm -rf $(STAMP) runs build .pytest_cache
