"""The collective engine as a block of the NIC core: the engine with its registers (block
``engine`` of the register map), which it owns; NicCore connects the block's ``csr`` to the
register slave and its ports to device memory and the network."""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .command import COMMAND_LAYOUT, COMMAND_WORDS, ENGINE_ERROR_LAYOUT
from .engine import COUNTERS, Engine
from ..bus.csr import drive_fields, register_signature
from ..net.packet import DEST_WIDTH, packet_stream
from ..regmap.generated import REGMAP

__all__ = ["EngineBlock"]


class EngineBlock(wiring.Component):
    """The engine and its registers.

    Parameters
    ----------
    The :class:`~nicoll.hw.engine.Engine`'s, passed on to it.

    Members
    -------
    csr : ``Out(register_signature(REGMAP.block("engine")))``
        The engine's registers (fields it reads: ``In``; fields it drives: ``Out``).
    now : ``In(64)``; node_id : ``In(DEST_WIDTH)``
        The cycle counter and the node's id.
    send_rd, local_rd, wr, tx, rx, barrier_seq, barrier_done, barrier_done_seq
        The engine's ports of the same names.

    Attributes
    ----------
    engine : :class:`~nicoll.hw.engine.Engine`
    """

    def __init__(self, **params):
        from ..bus.devmem import MemoryReadSignature, MemoryWriteSignature
        self._engine = engine = Engine(**params)
        width, row_bits = params.get("data_width", 256), engine.row_bits
        super().__init__({
            "csr": Out(register_signature(REGMAP.block("engine"))),
            "now": In(64), "node_id": In(DEST_WIDTH),
            "send_rd": Out(MemoryReadSignature(row_bits, width)),
            "local_rd": Out(MemoryReadSignature(row_bits, width)),
            "wr": Out(MemoryWriteSignature(row_bits, width)),
            "tx": Out(packet_stream(width)), "rx": In(packet_stream(width)),
            "barrier_seq": In(16), "barrier_done": Out(1), "barrier_done_seq": Out(16),
        })

    @property
    def engine(self):
        return self._engine

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self._engine
        regs = self.csr
        words = Cat(*(getattr(regs, f"cmd{k}").bits for k in range(COMMAND_WORDS)))
        # Every register field the engine reads passes a register at its boundary, all of
        # them together, so the engine sees the register file as it stood a cycle before
        # (a write and what it acts on never part).  CONTROL.clear resets most of the
        # engine: from the register file's own flop, its route to the ALU's write enables
        # was the 256-bit core's routed path at seeds 1 and 2 of d5c4b8b (CONTROL.clear ->
        # two LUTs -> res_en's reset, 8.23-8.34 ns, 7.6 of it routing).
        m.d.sync += [
            engine.cmd.eq(words[:COMMAND_LAYOUT.size]),
            engine.push.eq(regs.control.push),
            engine.go.eq(regs.control.go),
            engine.arm.eq(regs.control.arm),
            engine.clear.eq(regs.control.clear),
            engine.start_at.eq(regs.start_at.cycle),
            engine.op.eq(regs.reduction.op),
            engine.dtype.eq(regs.reduction.dtype),
        ]
        m.d.comb += [engine.now.eq(self.now), engine.node_id.eq(self.node_id),
                     engine.barrier_seq.eq(self.barrier_seq),
                     self.barrier_done.eq(engine.barrier_done),
                     self.barrier_done_seq.eq(engine.barrier_done_seq)]
        for name in ("send_rd", "local_rd", "wr", "tx"):
            wiring.connect(m, getattr(engine, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.rx), engine.rx)
        values = {
            ("CAPS", "depth"): engine.queue_depth,
            ("CAPS", "alu_latency"): engine.alu.latency,
            ("PACKET", "beats"): engine.packet_beats,
            ("STATUS", "queued"): engine.queued,
            ("STATUS", "armed"): engine.armed,
            ("STATUS", "busy"): engine.busy,
            ("STATUS", "done"): engine.done,
            ("STATUS", "error"): engine.errors.as_value().any(),
            ("STEP", "count"): engine.step,
            ("STARTED_AT", "cycle"): engine.started_at,
            ("FINISHED_AT", "cycle"): engine.finished_at,
        }
        for name in ENGINE_ERROR_LAYOUT.members:
            values["ERRORS", name] = getattr(engine.errors, name)
        for name in COUNTERS:
            values[name.upper(), "count"] = getattr(engine, name)
        drive_fields(m, regs, REGMAP.block("engine"), values)
        return m
