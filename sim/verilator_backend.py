"""The ``verilator`` backend: the cluster's Verilog under Verilator, with a C++ harness.

Build (:mod:`nicoll.sim.verilator_build`, whose names this module gives too): one executable
per configuration, cached under a hash of everything it is made from.

Run (:class:`VerilatorCluster`): the executable runs as a child process and toggles the clock
itself; the driver sends it one request per transaction (a register access, a memory burst,
the backdoor, a number of idle cycles) over a pipe and waits for the answer, so Python never
runs per clock edge.  Only the device-memory arrays are visible to VPI (for the backdoor);
activity traces are read from the cluster top's ``n<i>_activity`` ports by the harness.
Every wait has a wall-clock budget and notices a simulator that died, so no call hangs.

The cocotb benches of single blocks (:func:`build_design`, :func:`run_bench`) keep cocotb and
cocotbext-axi.

Waveforms: set ``NICOLL_WAVES=1`` before the build and the run; the build gains ``--trace``
(a separate cached build) and the VCD lands in the run folder whose path the error messages
and ``VerilatorCluster.run_dir`` give.
"""

import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from nicoll.errors import NicollError

from .session import SimCluster, reply_budget
from .verilator_build import (CLUSTER_VERILATOR_ARGS, EXECUTABLE, TOPLEVEL, VERILATOR_ARGS,
                              _tail, _waves, build_cluster, build_design, cluster_make_options,
                              sim_threads, source_digest)
from nicoll.hw.toolchain import apply_tool_env

__all__ = ["VerilatorCluster", "build_cluster", "build_design", "run_bench", "source_digest",
           "sim_threads", "cluster_make_options",
           "TOPLEVEL", "VERILATOR_ARGS", "CLUSTER_VERILATOR_ARGS"]

#: Seconds the simulator may take to start (construct the model, reset the cluster).
START_BUDGET = 120.0


# Requests and replies of the harness (cluster_server.cpp, "Requests").
_REQUEST = struct.Struct("<BIQQQI")
_REPLY = struct.Struct("<BQQI")
_OPS = {"read32": 1, "write32": 2, "mem_write": 3, "mem_read": 4, "mem_load": 5,
        "mem_dump": 6, "idle": 7, "trace_start": 8, "trace_stop": 9, "cycles": 10, "close": 11,
        "reset": 12, "faults_set": 13, "faults_get": 14}
_TRACE_RECORD = struct.Struct("<BBQQ")


class VerilatorCluster(SimCluster):
    """A running Verilator simulation of the cluster, reached over two pipes."""

    def __init__(self, config, *, progress=None):
        self.nodes = config.hw_nodes
        self.config = config
        self.build_dir = build_cluster(config, progress)
        self.run_dir = Path(tempfile.mkdtemp(prefix="nicoll-vl-"))
        self._log_path = self.run_dir / "sim.log"
        self._closed = False
        self._proc = None
        if progress:
            progress("starting the simulator")
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        vcd = str(self.run_dir / "dump.vcd") if _waves() else ""
        try:
            with open(self._log_path, "w") as log:
                self._proc = subprocess.Popen(
                    [str(self.build_dir / "obj" / EXECUTABLE), str(request_r), str(reply_w), vcd],
                    stdout=log, stderr=subprocess.STDOUT, cwd=self.run_dir,
                    pass_fds=(request_r, reply_w))
        finally:
            os.close(request_r)
            os.close(reply_w)
        try:
            self._call("cycles", 0, budget=START_BUDGET)
        except BaseException:
            self._kill()
            raise

    def _died(self):
        return NicollError(f"the verilator simulation exited (status {self._proc.returncode}); "
                           f"last lines of {self._log_path}:\n{_tail(self._log_path)}")

    def _read(self, n, deadline, op):
        chunks, left = [], n
        while left:
            ready, _, _ = select.select([self._reply_r], [], [], 0.5)
            if not ready:
                if self._proc.poll() is not None:
                    raise self._died()
                if time.monotonic() > deadline:
                    raise NicollError(f"the verilator simulation did not answer {op} within "
                                      f"{reply_budget():.0f} s; see {self._log_path}")
                continue
            chunk = os.read(self._reply_r, left)
            if not chunk:
                self._proc.wait()
                raise self._died()
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _call(self, op, node, a=0, b=0, c=0, data=b"", budget=None):
        if self._closed:
            raise NicollError("the verilator simulation is closed")
        message = _REQUEST.pack(_OPS[op], node, a, b, c, len(data)) + bytes(data)
        try:
            view = memoryview(message)
            while view:
                view = view[os.write(self._request_w, view):]
        except (BrokenPipeError, OSError):
            self._proc.wait()
            raise self._died() from None
        deadline = time.monotonic() + (reply_budget() if budget is None else budget)
        status, v0, v1, n = _REPLY.unpack(self._read(_REPLY.size, deadline, op))
        payload = self._read(n, deadline, op) if n else b""
        if status:
            raise NicollError(f"{op} on node {node} failed in the simulator: "
                              f"{payload.decode(errors='replace')}")
        return v0, v1, payload

    def request(self, op, node, *args):
        self._check_request(op, node)
        if op == "read32":
            data, response, _ = self._call(op, node, args[0])
            return data, response
        if op == "write32":
            address, data, strobe = args
            return self._call(op, node, address, data, strobe)[0]
        if op in ("mem_write", "mem_load"):
            address, data = args
            return self._call(op, node, address, data=data)[0]
        if op in ("mem_read", "mem_dump"):
            address, length = args
            _, response, data = self._call(op, node, address, length)
            return data, response
        if op == "idle":
            self._call(op, node, args[0])
            return None
        raise NicollError(f"the verilator simulation has no request {op!r}")

    traces = True

    def trace_start(self):
        self._call("trace_start", 0)

    def trace_stop(self):
        return self._trace(self._call("trace_stop", 0)[2])

    def _trace(self, raw):
        from nicoll.cluster import TRACE_LANES
        out = {node: {lane: [] for lane in TRACE_LANES} for node in range(self.nodes)}
        for node, lane, first, end in _TRACE_RECORD.iter_unpack(raw):
            out[node][TRACE_LANES[lane]].append((first, end))
        for lanes in out.values():
            for spans in lanes.values():
                spans.sort()
        return out

    def cycles(self):
        """Cycles simulated since reset (the harness's count, not a register read)."""
        return self._call("cycles", 0)[0]

    def reset(self):
        self._call("reset", 0)

    def faults_set(self, config):
        self._check_faults()
        self._call("faults_set", 0, data=config)

    def faults_get(self):
        self._check_faults()
        return self._call("faults_get", 0)[2]

    def _kill(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self):
        if self._closed:
            return
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._call("close", 0, budget=30)
                self._proc.wait(timeout=30)
        except (NicollError, subprocess.TimeoutExpired):
            pass
        finally:
            self._closed = True
            for fd in (self._request_w, self._reply_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._kill()
            if not _waves():
                shutil.rmtree(self.run_dir, ignore_errors=True)


def run_bench(folder, *, toplevel, module, test_dir, env=None, seed=1):
    """Run the cocotb test module ``module`` in the simulator built in ``folder``.

    Returns ``(tests, failed)`` from the results file; raises NicollError with the end of the
    log when the simulator produced no results.
    """
    apply_tool_env()
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    test_dir = Path(test_dir)
    test_dir.mkdir(parents=True, exist_ok=True)
    log = test_dir / "sim.log"
    results = test_dir / "results.xml"
    runner = get_runner("verilator")
    try:
        runner.test(test_module=module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                    build_dir=Path(folder) / "obj", test_dir=test_dir, waves=_waves(),
                    seed=seed, log_file=log, results_xml=str(results),
                    extra_env={"COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "INFO"),
                               **(env or {})})
    except SystemExit:
        pass        # the runner exits on failing tests; the results file tells which
    try:
        return get_results(results)
    except RuntimeError:
        raise NicollError(f"cocotb bench {module} produced no results; last lines of {log}:\n"
                          f"{_tail(log)}") from None
