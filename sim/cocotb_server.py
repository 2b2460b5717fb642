"""The cocotb test that serves driver requests inside the Verilator simulation.

Started by :mod:`nicoll.sim.verilator_backend` (never by hand): it resets the cluster, puts
a cocotbext-axi AxiLiteMaster on each node's CSR port and an AxiMaster on each node's
device-memory port, listens on the Unix socket named by ``NICOLL_SOCKET`` and answers
requests ``(op, node, *args)`` (see :data:`nicoll.sim.session.OPS`) until the host sends
``("close",)`` or hangs up.  While it waits for a request the simulation does not advance.
"""

import os
from multiprocessing.connection import Listener

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiMaster

from cocotb.handle import Immediate
from cocotb.triggers import First, ReadOnly

from nicoll.cluster import TRACE_LANES

from .session import bytes_from_rows, rows_for_load, split_strobe

__all__ = ["serve", "LANE_SIGNALS"]

#: The simulated clock's period (only cycle counts matter).
CLOCK_PERIOD_NS = 10
#: Cycles reset is held at the start.
RESET_CYCLES = 4


async def _read32(masters, node, address):
    response = await masters[node].read(address & ~3, 4)
    return int.from_bytes(response.data, "little"), int(response.resp)


async def _write32(masters, node, address, data, strobe):
    # cocotbext-axi states a partial write by its byte range; one write per run of lanes.
    raw = int(data).to_bytes(4, "little")
    worst = 0
    for start, end in split_strobe(strobe):
        response = await masters[node].write((address & ~3) + start, raw[start:end])
        worst = max(worst, int(response.resp))
    return worst


async def _mem_write(memories, node, address, data):
    response = await memories[node].write(address, data)
    return int(response.resp)


async def _mem_read(memories, node, address, length):
    response = await memories[node].read(address, length)
    return bytes(response.data), int(response.resp)


async def _call(function):
    return function()


def _memory(dut, node):
    """Node ``node``'s device-memory array (the Verilog ``mem`` of its DeviceMemory)."""
    return getattr(dut, f"node{node}").core.devmem.mem


def _row_reader(array):
    def read(row):
        return array[row].value.to_unsigned()
    return read


async def _mem_load(arrays, row_bytes, node, address, data):
    array = arrays[node]
    for row, value in rows_for_load(address, data, row_bytes, _row_reader(array)):
        array[row].value = Immediate(value)
    return 0        # BusResponse.OKAY: the device checked the range


async def _mem_dump(arrays, row_bytes, node, address, length):
    return bytes_from_rows(address, length, row_bytes, _row_reader(arrays[node])), 0


#: What an activity trace watches on each node: lane -> (valid, ready) signal paths below the
#: node's instance.  A lane is active in every cycle both are high (a beat moves).
LANE_SIGNALS = {
    "send": ("net_tx__tvalid", "net_tx__tready"),           # packets into the switch
    "receive": ("net_rx__tvalid", "net_rx__tready"),        # packets out of the switch
    "reduce": ("core.engine.a__valid", "core.engine.a__ready"),   # operand pairs into the ALU
}


def _signal(node_handle, path):
    handle = node_handle
    for name in path.split("."):
        handle = getattr(handle, name)
    return handle


class _Tracer:
    """Intervals in which each (node, lane) moved a beat, in the cycles of the node's counter.

    One coroutine per lane wakes only when its valid or ready changes (never per clock), so a
    trace costs time in proportion to the number of bursts, not of cycles.
    """

    def __init__(self, dut, nodes):
        self._lanes = []
        for node in range(nodes):
            handle = getattr(dut, f"node{node}")
            now = handle.core.engine.now
            for lane in TRACE_LANES:
                valid, ready = LANE_SIGNALS[lane]
                self._lanes.append((node, lane, _signal(handle, valid), _signal(handle, ready),
                                    now))
        self._tasks = []
        self._intervals = {}
        self._open = {}

    def start(self):
        self.stop()
        self._intervals = {(node, lane): [] for node, lane, *_ in self._lanes}
        self._open = {}
        for node, lane, valid, ready, now in self._lanes:
            key = (node, lane)
            if valid.value == 1 and ready.value == 1:
                self._open[key] = now.value.to_unsigned()
            self._tasks.append(cocotb.start_soon(self._watch(key, valid, ready, now)))

    async def _watch(self, key, valid, ready, now):
        while True:
            await First(valid.value_change, ready.value_change)
            await ReadOnly()        # the cycle's settled values
            on = valid.value == 1 and ready.value == 1
            cycle = now.value.to_unsigned()
            if on and key not in self._open:
                self._open[key] = cycle
            elif not on and key in self._open:
                self._intervals[key].append((self._open.pop(key), cycle))

    def stop(self, end=None):
        """Stop watching; return ``{node: {lane: [(first cycle, end cycle), ...]}}``."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        for key, first in self._open.items():
            self._intervals[key].append((first, end if end is not None else first + 1))
        self._open = {}
        out = {}
        for (node, lane), spans in self._intervals.items():
            out.setdefault(node, {})[lane] = spans
        return out


@cocotb.test()
async def serve(dut):
    nodes = int(os.environ["NICOLL_NODES"])
    Clock(dut.clk, CLOCK_PERIOD_NS, unit="ns").start()
    dut.rst.value = 1
    csr = [AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"n{i}_s_axil", bus_separator="__"),
                         dut.clk, dut.rst) for i in range(nodes)]
    mem = [AxiMaster(AxiBus.from_prefix(dut, f"n{i}_s_axi", bus_separator="__"),
                     dut.clk, dut.rst) for i in range(nodes)]
    arrays = [_memory(dut, i) for i in range(nodes)]
    tracer = _Tracer(dut, nodes)
    row_bytes = len(dut.n0_s_axi__wdata) // 8
    await ClockCycles(dut.clk, RESET_CYCLES)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 1)

    handlers = {
        "read32": lambda node, a: _read32(csr, node, a),
        "write32": lambda node, a, d, s: _write32(csr, node, a, d, s),
        "mem_write": lambda node, a, d: _mem_write(mem, node, a, d),
        "mem_read": lambda node, a, n: _mem_read(mem, node, a, n),
        "mem_load": lambda node, a, d: _mem_load(arrays, row_bytes, node, a, d),
        "mem_dump": lambda node, a, n: _mem_dump(arrays, row_bytes, node, a, n),
        "trace_start": lambda node: _call(tracer.start),
        "trace_stop": lambda node: _call(
            lambda: tracer.stop(dut.node0.core.engine.now.value.to_unsigned())),
    }
    with Listener(os.environ["NICOLL_SOCKET"], family="AF_UNIX") as listener:
        with listener.accept() as conn:
            while True:
                try:
                    request = conn.recv()
                except EOFError:
                    return
                if request[0] == "close":
                    conn.send("closed")
                    return
                op, node, *args = request
                try:
                    result = await handlers[op](node, *args)
                except Exception as exc:
                    result = RuntimeError(f"{op} on node {node} failed in the simulator: {exc!r}")
                conn.send(result)
