"""cocotb bench of the ReductionALU under Verilator, against nicoll.ops.combine.

For every (op, dtype) pair the build computes, NICOLL_ALU_VECTORS element pairs drawn by
nicoll.sim.vectors (edges, cancellation, overflow, underflow, random bits) go through the
ALU as packets of beats, with random pauses on both operand streams and random
backpressure on the result stream; every result element must equal the reference bit for
bit (NaN for NaN).  Pairs MPI leaves undefined, and pairs the build leaves out, must come
back flagged with zero data.

Environment (set by tests/test_alu_cocotb.py): NICOLL_DATA_WIDTH, NICOLL_SEED,
NICOLL_ALU_VECTORS, NICOLL_ALU_CAPS (comma-separated "op:dtype" names of the build),
NICOLL_ALU_PAIRS (optional: only these "op:dtype" pairs).
"""

import itertools
import logging
import os
import random

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from nicoll.hw.ops import DType, ReduceOp, op_supported_for
from nicoll.ops import combine, numpy_dtype
from nicoll.sim.vectors import operand_pairs, results_match

__all__ = ["TB", "parse_pairs", "format_pairs"]

#: Beats per packet sent through the ALU (the last one carries tlast).
PACKET_BEATS = 64


def format_pairs(pairs):
    return ",".join(f"{op.mpi_name}:{dtype.numpy_name}" for op, dtype in pairs)


def parse_pairs(text):
    pairs = []
    for item in filter(None, text.split(",")):
        op, dtype = item.split(":")
        pairs.append((ReduceOp[op.upper()], DType[dtype.upper()]))
    return pairs


class TB:
    def __init__(self, dut):
        self.dut = dut
        self.width = int(os.environ["NICOLL_DATA_WIDTH"])
        self.rng = random.Random(int(os.environ["NICOLL_SEED"]))
        Clock(dut.clk, 10, unit="ns").start()
        self.a = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_a"), dut.clk, dut.rst)
        self.b = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_b"), dut.clk, dut.rst)
        self.out = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_result"), dut.clk, dut.rst)
        # cocotbext-axi logs every frame at INFO: gigabytes over a long run.
        for port in (self.a, self.b, self.out):
            port.log.setLevel(logging.WARNING)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 1)

    def set_pauses(self, enable):
        for k, port in enumerate((self.a, self.b, self.out)):
            if enable:
                rng = random.Random(self.rng.getrandbits(32) + k)
                port.set_pause_generator(itertools.cycle([rng.random() < 0.3 for _ in range(211)]))
            else:
                port.clear_pause_generator()

    async def run_pair(self, op, dtype, count):
        """Send ``count`` element pairs of (op, dtype); return (results, a, b) as arrays."""
        per_beat = self.width // dtype.bits
        count = max(per_beat, count - count % per_beat)
        a, b = operand_pairs(op, dtype, count, self.rng)
        # Without tkeep, cocotbext-axi moves data_width / 8 bytes per beat, in memory order.
        raw_a, raw_b = a.tobytes(), b.tobytes()
        packet = PACKET_BEATS * self.width // 8
        user = op.value | dtype.value << 4
        out, errors = bytearray(), []
        for start in range(0, len(raw_a), packet):
            await self.a.send(AxiStreamFrame(raw_a[start:start + packet], tuser=user))
            await self.b.send(AxiStreamFrame(raw_b[start:start + packet]))
            frame = await self.out.recv()
            assert len(frame.tdata) == len(raw_a[start:start + packet]), "a packet changed length"
            out += frame.tdata
            tuser = frame.tuser if isinstance(frame.tuser, list) else [frame.tuser]
            errors += [int(u) for u in tuser]
        return np.frombuffer(bytes(out), dtype=numpy_dtype(dtype)), errors, a, b


def _pairs_to_run():
    built = set(parse_pairs(os.environ["NICOLL_ALU_CAPS"]))
    chosen = os.environ.get("NICOLL_ALU_PAIRS")
    every = [(op, dtype) for dtype in DType for op in ReduceOp]
    pairs = parse_pairs(chosen) if chosen else every
    return built, pairs


@cocotb.test()
async def every_pair_bit_exact_under_backpressure(dut):
    tb = TB(dut)
    await tb.reset()
    tb.set_pauses(True)
    built, pairs = _pairs_to_run()
    count = int(os.environ["NICOLL_ALU_VECTORS"])
    checked = 0
    for op, dtype in pairs:
        computed = (op, dtype) in built
        n = count if computed else tb.width // dtype.bits * 2
        got, errors, a, b = await tb.run_pair(op, dtype, n)
        if not computed:
            assert all(errors), f"{op.mpi_name} on {dtype.numpy_name} was not flagged"
            assert not got.view(np.uint8).any(), f"{op.mpi_name} on {dtype.numpy_name} gave data"
            assert op_supported_for(op, dtype) or (op, dtype) not in built
            continue
        assert not any(errors), f"{op.mpi_name} on {dtype.numpy_name} flagged an error"
        want = combine(op, a, b)
        bad = results_match(got, want)
        if len(bad):
            k = bad[0]
            raise AssertionError(
                f"{op.mpi_name} on {dtype.numpy_name}: {len(bad)} of {len(want)} wrong; first "
                f"at {k}: {a[k]!r} ∘ {b[k]!r} gave {got[k]!r}, reference {want[k]!r} "
                f"(bits {a[k:k+1].tobytes().hex()} ∘ {b[k:k+1].tobytes().hex()} -> "
                f"{got[k:k+1].tobytes().hex()}, want {want[k:k+1].tobytes().hex()})")
        checked += len(want)
        dut._log.info("%s on %s: %d element pairs bit-exact", op.mpi_name, dtype.numpy_name,
                      len(want))
    tb.set_pauses(False)
    dut._log.info("checked %d element pairs in all", checked)
