# Two commands for a newcomer: `make demo` and `make test`. Both set up .venv first and are idempotent.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Test processes: the suite is single-threaded tests on a 2-core machine (CI's); `make test TEST_WORKERS=1` runs
# them in one process.
TEST_WORKERS ?= 2

.PHONY: demo test test-fast test-slow lint format bench experiments clean

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools<80" wheel
	# torch first, at its pin in constraints.txt: an unpinned torch drags in GBs of CUDA wheels.
	$(PY) -m pip install -q -c constraints.txt torch
	# Every extra: dev is the tools plus sim, train, research and ray (setup.py); ros the rclpy wheels.
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,ros]"
	touch $(STAMP)

demo: $(STAMP)
	# --quiet: the summary, not a line per control step (drop it to watch each step).
	$(VENV)/bin/mnemo-mpc demo --quiet --out out/demo

# Test tiers (markers in pytest.ini, given by module in tests/conftest.py): unit, integration, ros; slow on top.
test: $(STAMP) lint
	# Every tier but slow, in TEST_WORKERS processes (pytest-xdist). One BLAS/torch thread per process: tiny ops
	# gain nothing from threads, and oversubscription on a busy machine made single tests 20x slower.
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS)

test-fast: $(STAMP) lint
	# The unit tier alone: in-process, no simulator, DDS or subprocess; under a minute.
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -m "unit and not slow" -n $(TEST_WORKERS)

test-slow: $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m pytest -q -m slow

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(VENV)/bin/mnemo-mpc bench sqp --out out/bench_sqp.json

experiments: $(STAMP)
	# One BLAS/torch thread, as for `test`: the studies' small tensors gain nothing from threads (lemma1_pgd --quick
	# took 41.8 s with the default threads on a busy 2-core machine, 9.1 s with one).
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(PY) -m mnemo_mpc.experiments run all --quick --out out/experiments

clean:
	rm -rf $(VENV) build install log out *.egg-info
