"""The ``amaranth`` backend: the cluster gateware in the Amaranth simulator.

The simulator runs in a thread of its own.  One async testbench serves driver requests: it
takes each request from a queue, performs it on the node's AXI4-Lite or AXI4 port with the
bus models of :mod:`nicoll.sim.axi_model`, and hands back the result.  While no request is
pending the testbench blocks on the queue, so simulated time stands still: cycle counts
depend only on the requests, not on how fast the host issues them.

Waveforms: set ``NICOLL_WAVES=1`` to write ``<build root>/waves/amaranth_<config>.vcd``.
"""

import os
import queue
import threading

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from nicoll.errors import NicollError

from . import axi_model
from .session import SimCluster, bytes_from_rows, reply_budget, rows_for_load
from nicoll.hw.toolchain import build_root

__all__ = ["AmaranthCluster", "CLOCK_PERIOD"]

#: Simulated clock period in seconds (100 MHz; only the cycle count matters).
CLOCK_PERIOD = 10e-9
#: Cycles reset() holds the cluster in reset (as the Verilator harness does).
RESET_CYCLES = 4

_STOP = object()


class AmaranthCluster(SimCluster):
    def __init__(self, config):
        from nicoll.hw.sim.cluster import ClusterTop
        self.nodes = config.hw_nodes
        self.config = config
        self.top = ClusterTop(**config.hw_kwargs())
        self._requests = queue.Queue()
        self._replies = queue.Queue()
        self._failure = None
        self._closed = False
        # The top in a domain of our own, so reset() can hold its reset.
        wrapper = Module()
        wrapper.domains.sync = self._domain = ClockDomain("sync")
        wrapper.submodules.top = self.top
        sim = Simulator(wrapper)
        sim.add_clock(CLOCK_PERIOD)
        sim.add_testbench(self._serve)
        self._sim = sim
        self._thread = threading.Thread(target=self._run, name="nicoll-amaranth-sim", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            if os.environ.get("NICOLL_WAVES"):
                path = build_root() / "waves" / f"amaranth_{self.config.slug()}.vcd"
                path.parent.mkdir(parents=True, exist_ok=True)
                with self._sim.write_vcd(str(path)):
                    self._sim.run()
            else:
                self._sim.run()
        except BaseException as exc:   # reported to the waiting request, never swallowed
            self._failure = exc
            self._replies.put(exc)

    async def _serve(self, ctx):
        top = self.top
        handlers = {
            "read32": lambda node, address: axi_model.axil_read(
                ctx, getattr(top, f"n{node}_s_axil"), address),
            "write32": lambda node, address, data, strobe: axi_model.axil_write(
                ctx, getattr(top, f"n{node}_s_axil"), address, data, strobe),
            "mem_write": lambda node, address, data: axi_model.axi_write(
                ctx, getattr(top, f"n{node}_s_axi"), address, data),
            "mem_read": lambda node, address, length: axi_model.axi_read(
                ctx, getattr(top, f"n{node}_s_axi"), address, length),
            "mem_load": lambda node, address, data: self._load(ctx, node, address, data),
            "mem_dump": lambda node, address, length: self._dump(ctx, node, address, length),
            "idle": lambda node, cycles: self._idle(ctx, cycles),
            "reset": lambda node: self._reset(ctx),
            "faults_set": lambda node, config: self._faults_set(ctx, config),
            "faults_get": lambda node: self._faults_get(ctx),
        }
        while True:
            request = self._requests.get()
            if request is _STOP:
                return
            op, node, args = request
            try:
                result = await handlers[op](node, *args)
            except Exception as exc:
                result = exc
            self._replies.put(result)

    @staticmethod
    async def _idle(ctx, cycles):
        if cycles > 0:
            await ctx.tick().repeat(cycles)

    async def _reset(self, ctx):
        # ctx.tick() refuses to wait while its domain is held in reset: wait on the clock.
        ctx.set(self._domain.rst, 1)
        for _ in range(RESET_CYCLES):
            await ctx.posedge(self._domain.clk)
        ctx.set(self._domain.rst, 0)
        await ctx.tick()

    async def _faults_set(self, ctx, config):
        ctx.set(self.top.fault_config.as_value(), int.from_bytes(config, "little"))

    async def _faults_get(self, ctx):
        counters = self.top.fault_counters.as_value()
        return ctx.get(counters).to_bytes(-(-len(counters) // 8), "little")

    def reset(self):
        self._submit("reset", 0, ())

    def faults_set(self, config):
        self._check_faults()
        self._submit("faults_set", 0, (bytes(config),))

    def faults_get(self):
        self._check_faults()
        return self._submit("faults_get", 0, ())

    def _row_reader(self, ctx, node):
        memory = self.top.cores[node].devmem.data
        return lambda row: ctx.get(memory[row])

    async def _load(self, ctx, node, address, data):
        memory = self.top.cores[node].devmem.data
        for row, value in rows_for_load(address, data, self.config.data_width // 8,
                                        self._row_reader(ctx, node)):
            ctx.set(memory[row], value)
        return 0        # BusResponse.OKAY: the device checked the range

    async def _dump(self, ctx, node, address, length):
        return bytes_from_rows(address, length, self.config.data_width // 8,
                               self._row_reader(ctx, node)), 0

    def request(self, op, node, *args):
        self._check_request(op, node)
        return self._submit(op, node, args)

    def _submit(self, op, node, args):
        if self._closed:
            raise NicollError("the amaranth simulation is closed")
        if self._failure is not None:
            raise NicollError(f"the amaranth simulation stopped: {self._failure!r}")
        self._requests.put((op, node, args))
        try:
            result = self._replies.get(timeout=reply_budget())
        except queue.Empty:
            raise NicollError(f"the amaranth simulation did not answer {op} on node {node} "
                              f"within {reply_budget():.0f} s") from None
        if isinstance(result, BaseException):
            raise NicollError(f"the amaranth simulation failed during {op} on node {node}: "
                              f"{result!r}") from result
        return result

    def close(self):
        if not self._closed:
            self._closed = True
            self._requests.put(_STOP)
            self._thread.join(timeout=reply_budget())
