"""cocotb bench of the CSR slave of one NicCore, against the device model as reference.

Random sequences of register writes (any strobe pattern, mapped, read-only and unmapped
addresses) and reads, issued back to back through cocotbext-axi's AxiLiteMaster, with and
without random pauses and backpressure on all five AXI4-Lite channels.  The device model
(:class:`nicoll.model.node.ModelNode`), which implements the same register map, predicts every
read value and response; only the cycle counter differs, and is checked for monotonicity.
The barrier block's status fields follow the barrier unit's state, which the model moves on
its own clock (random writes to CONTROL start, finish and release barriers at different
cycles on each side): of those registers only the software-written and constant bits are
compared here; the barrier's behaviour is checked by tests/test_barrier_cluster.py and
tests/test_barrier_cocotb.py.  The same holds for the engine block (random pushes and starts
run on each side's own timing, and the model's ALU has no latency): only its
software-written bits are compared; tests/test_collectives_*.py and tests/test_hw_engine_*.py
check the engine.  The repack block's CYCLES (the cycles the control tree spent on its latest
start) is not compared either: the model's exchanges take no time.  The core is built with
the small ALU of :data:`ALU_CAPABILITIES`, which the model is given too.

Parameters arrive in environment variables (set by tests/test_csr_cocotb.py):
NICOLL_DATA_WIDTH, NICOLL_MAX_NODES, NICOLL_MEM_SIZE, NICOLL_NODE_ID, NICOLL_SEED,
NICOLL_OPS (transactions per test).
"""

import itertools
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Combine, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.ops import DType, ReduceOp
from nicoll.model.node import ModelNode
from nicoll.hw.regmap import BusResponse
from nicoll.sim.session import split_strobe

__all__ = ["TB"]

CLOCK_NS = 10


def _param(name):
    return int(os.environ[f"NICOLL_{name}"])


#: The ALU pairs of the core under test (a build of one pair compiles quickly).
ALU_CAPABILITIES = frozenset({(ReduceOp.SUM, DType.INT32)})


class TB:
    """Clock, reset, an AxiLiteMaster on ``s_axil`` and the reference model."""

    def __init__(self, dut):
        self.dut = dut
        self.rng = random.Random(_param("SEED"))
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
        dut.node_id.value = _param("NODE_ID")
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.model = ModelNode(node_id=_param("NODE_ID"), data_width=_param("DATA_WIDTH"),
                               max_nodes=_param("MAX_NODES"), mem_size=_param("MEM_SIZE"),
                               alu_capabilities=ALU_CAPABILITIES)
        self.cycles = REGMAP.block("global").register("CYCLES")

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    def _channels(self):
        w, r = self.axil.write_if, self.axil.read_if
        return [w.aw_channel, w.w_channel, w.b_channel, r.ar_channel, r.r_channel]

    def set_pauses(self, enable):
        """Random idle cycles on the sources and backpressure on the sinks (or none)."""
        for k, channel in enumerate(self._channels()):
            if enable:
                rng = random.Random(self.rng.getrandbits(32) + k)
                channel.set_pause_generator(itertools.cycle(
                    [rng.random() < 0.4 for _ in range(257)]))
            else:
                channel.clear_pause_generator()

    def random_address(self):
        kind = self.rng.random()
        if kind < 0.15:
            return self.rng.choice([0x0FC, 0x108, 0x2F0, 0x3FC, REGMAP.size + 4 * self.rng.randrange(64),
                                    0xFFFC])
        reg = self.rng.choice(REGMAP.registers())
        return reg.address + 4 * self.rng.randrange(reg.words)

    @staticmethod
    def compared_bits(address):
        """Bits of the word at ``address`` that the model must predict."""
        hit = REGMAP.decode(address)
        if hit is None:
            return 0xFFFF_FFFF
        reg, word = hit
        if reg is REGMAP.block("repack").register("CYCLES"):
            # The cycles of the latest exchange's setup and run: the model's exchanges take
            # none, while the control tree spends a few on even a refused start.
            return 0
        if any(r is reg for r in REGMAP.block("engine").registers):
            mask = 0
            for f in reg.fields:
                if not f.hw_driven:
                    mask |= f.mask
            return (mask >> (32 * word)) & 0xFFFF_FFFF
        if not any(r is reg for r in REGMAP.block("barrier").registers):
            return 0xFFFF_FFFF
        mask = 0
        for f in reg.fields:
            if not f.hw_driven or reg.name == "CAPS":
                mask |= f.mask
        return (mask >> (32 * word)) & 0xFFFF_FFFF

    def is_cycle_counter(self, address):
        return self.cycles.address <= address & ~3 < self.cycles.address + 8

    async def write(self, address, data, strobe):
        """Issue one write whose strobe is ``strobe``: cocotbext-axi derives the strobe from
        the byte range, so a pattern with holes becomes one write per run of lanes."""
        raw = data.to_bytes(4, "little")
        events = []
        for first, end in split_strobe(strobe):
            self.model.write32(address, data, ((1 << end) - 1) & ~((1 << first) - 1))
            events.append(self.axil.init_write(address + first, raw[first:end]))
        return events

    async def run_sequence(self, count):
        """Alternate batches of back-to-back writes and back-to-back reads."""
        done = 0
        last_low = 0
        while done < count:
            writes = []
            for _ in range(self.rng.randrange(1, 8)):
                address = self.random_address()
                strobe = self.rng.choice([0xF, 0xF, 0x1, 0x2, 0x4, 0x8, 0x5, 0xA, 0x3, 0xC, 0x6])
                writes += await self.write(address, self.rng.getrandbits(32), strobe)
            for event in writes:
                await event.wait()
                expected = BusResponse.OKAY if REGMAP.decode(event.data.address) else BusResponse.DECERR
                assert int(event.data.resp) == expected, (hex(event.data.address), event.data)
            reads = [self.random_address() for _ in range(self.rng.randrange(1, 12))]
            events = [self.axil.init_read(a, 4) for a in reads]
            for address, event in zip(reads, events):
                await event.wait()
                got = int.from_bytes(event.data.data, "little")
                want, response = self.model.read32(address)
                assert int(event.data.resp) == response, (hex(address), event.data)
                if self.is_cycle_counter(address):
                    # The bench runs far fewer than 2**32 cycles: the low word only grows
                    # and the latched high word is 0.
                    if address & 4 == 0:
                        assert got > last_low, (got, last_low)
                        last_low = got
                    else:
                        assert got == 0, got
                else:
                    mask = self.compared_bits(address)
                    assert got & mask == want & mask, \
                        f"read {address:#x}: got {got:#010x}, model {want:#010x} (mask {mask:#010x})"
            done += len(writes) + len(reads)


@cocotb.test()
async def random_sequences_match_the_model(dut):
    tb = TB(dut)
    await tb.reset()
    await tb.run_sequence(_param("OPS") // 2)


@cocotb.test()
async def random_sequences_under_pauses_and_backpressure(dut):
    tb = TB(dut)
    await tb.reset()
    tb.set_pauses(True)
    await tb.run_sequence(_param("OPS") // 2)
    tb.set_pauses(False)


@cocotb.test()
async def back_to_back_transactions_keep_up(dut):
    """Without pauses, a burst of reads or writes completes at one per two cycles or better."""
    tb = TB(dut)
    await tb.reset()
    scratch = REGMAP.block("global").register("SCRATCH").address
    for kind in ("read", "write"):
        count = 64
        start = get_sim_time("ns")
        if kind == "read":
            events = [tb.axil.init_read(scratch, 4) for _ in range(count)]
        else:
            events = [tb.axil.init_write(scratch, k.to_bytes(4, "little")) for k in range(count)]
        await Combine(*(e.wait() for e in events))
        cycles = (get_sim_time("ns") - start) / CLOCK_NS
        dut._log.info("%d back-to-back %ss took %d cycles", count, kind, cycles)
        assert cycles <= 2 * count + 8, f"{count} {kind}s took {cycles} cycles"
    last = await tb.axil.read(scratch, 4)
    assert int.from_bytes(last.data, "little") == count - 1
