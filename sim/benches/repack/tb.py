# Ref: seed 003 (CN111614581): all-to-all as a transpose of the block matrix through repack
#      units; issue 5, "Verify (cocotb + Verilator)" and "Bad input".
"""The driver of the repack bench (:mod:`nicoll.sim.benches.repack`): :class:`TB` holds the
clock, the reset and the cocotbext-axi ports of the Verilog top
(:class:`nicoll.hw.sim.repack_top.RepackArrayTop`); :func:`within` bounds every wait in
cycles; :func:`parse_config` reads the build's parameters."""

import itertools
import logging
import os
import random

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, SimTimeoutError, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamSink, AxiStreamSource

from nicoll.hw.repack import NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, REGISTRATION_LAYOUT, START_LAYOUT
from nicoll.hw.sim.repack_top import control_tdata_width

__all__ = ["CLOCK_NS", "TB", "within", "parse_config"]

#: Clock period of the bench.
CLOCK_NS = 10


def parse_config(text):
    """``(max_ranks, units, max_group, data_width, capacity_bytes)`` from
    NICOLL_REPACK_CONFIG."""
    values = tuple(int(v) for v in text.split(","))
    if len(values) != 5:
        raise ValueError(f"NICOLL_REPACK_CONFIG must hold five integers, not {text!r}")
    return values


async def within(awaitable, cycles, what):
    """Await ``awaitable`` for at most ``cycles`` clock cycles; fail naming ``what``."""
    try:
        return await with_timeout(awaitable, cycles * CLOCK_NS, "ns")
    except SimTimeoutError:
        raise AssertionError(f"{what}: not within its budget of {cycles} cycles") from None


def _bus(dut, prefix):
    # cocotbext-axi logs its banner and every frame at INFO: quiet it before it starts.
    logging.getLogger(f"cocotb.{dut._name}.{prefix}").setLevel(logging.WARNING)
    return AxiStreamBus.from_prefix(dut, prefix)


class TB:
    """Clock, reset and the cocotbext-axi ports of a ``nicoll_repack`` top."""

    def __init__(self, dut):
        self.dut = dut
        (self.max_ranks, self.units, self.max_group, self.width,
         self.capacity) = parse_config(os.environ["NICOLL_REPACK_CONFIG"])
        self.beat_bytes = self.width // 8
        self.rng = random.Random(int(os.environ.get("NICOLL_SEED", "1")))
        Clock(dut.clk, CLOCK_NS, unit="ns").start()

        def control(cls, prefix, layout):
            return cls(_bus(dut, prefix), dut.clk, dut.rst,
                       byte_size=control_tdata_width(layout))
        self.order = control(AxiStreamSource, "s_axis_order", ORDER_WRITE_LAYOUT)
        self.start = control(AxiStreamSource, "s_axis_start", START_LAYOUT)
        self.reg = control(AxiStreamSource, "s_axis_reg", REGISTRATION_LAYOUT)
        self.notice = control(AxiStreamSink, "m_axis_notice", NOTICE_LAYOUT)
        self.i = [AxiStreamSource(_bus(dut, f"s_axis_i{k}"), dut.clk, dut.rst)
                  for k in range(self.units)]
        self.o = [AxiStreamSink(_bus(dut, f"m_axis_o{k}"), dut.clk, dut.rst)
                  for k in range(self.units)]

    @property
    def sources(self):
        return [self.order, self.start, self.reg, *self.i]

    @property
    def sinks(self):
        return [self.notice, *self.o]

    def cycle(self):
        return int(get_sim_time("ns")) // CLOCK_NS

    async def reset(self):
        """Reset the array and empty every port queue (a clean slate between cases)."""
        for port in self.sources + self.sinks:
            port.clear()
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    def set_pauses(self, stall):
        """Random pauses on every input and backpressure on every output, each port idle
        with probability ``stall`` in a cycle (0: none)."""
        for port in self.sources + self.sinks:
            if stall:
                rng = random.Random(self.rng.getrandbits(32))
                port.set_pause_generator(itertools.cycle(
                    [rng.random() < stall for _ in range(rng.randrange(97, 251))]))
            else:
                # Stopping the generator leaves the last value; a paused port would stay so.
                port.clear_pause_generator()
                port.pause = False

    def counter(self, name):
        return int(getattr(self.dut, name).value)

    def unit_busy_cycles(self):
        return [self.counter(f"unit{k}_busy_cycles") for k in range(self.units)]
