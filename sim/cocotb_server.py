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

from .session import bytes_from_rows, rows_for_load, split_strobe

__all__ = ["serve"]

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


def _memory(dut, node):
    """Node ``node``'s device-memory array (the Verilog ``mem`` of its DeviceMemory)."""
    return getattr(dut, f"node{node}").core.devmem.mem


async def _mem_load(arrays, row_bytes, node, address, data):
    array = arrays[node]
    read = lambda row: array[row].value.to_unsigned()
    for row, value in rows_for_load(address, data, row_bytes, read):
        array[row].value = Immediate(value)
    return 0        # BusResponse.OKAY: the device checked the range


async def _mem_dump(arrays, row_bytes, node, address, length):
    array = arrays[node]
    return bytes_from_rows(address, length, row_bytes,
                           lambda row: array[row].value.to_unsigned()), 0


@cocotb.test()
async def serve(dut):
    nodes = int(os.environ["NICOLL_NODES"])
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    csr = [AxiLiteMaster(AxiLiteBus.from_prefix(dut, f"n{i}_s_axil", bus_separator="__"),
                         dut.clk, dut.rst) for i in range(nodes)]
    mem = [AxiMaster(AxiBus.from_prefix(dut, f"n{i}_s_axi", bus_separator="__"),
                     dut.clk, dut.rst) for i in range(nodes)]
    arrays = [_memory(dut, i) for i in range(nodes)]
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
