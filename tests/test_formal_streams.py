"""Formal checks of the stream-producing components' outputs (SymbiYosys, smtbmc with Yices;
see formal_helpers.py and docs/formal.md).

Each check is a bounded model check of every run from reset, :data:`STREAM_DEPTH` steps long
unless its group says otherwise (:data:`GROUPS`): every input is free in every cycle, except
that each input stream keeps the stream rules (its producer holds ``valid`` and the payload
until the transfer) and the configuration inputs a component names are held or stable; every
output stream must keep the stream rules: once ``valid`` is high it stays high, with the same
payload, until the cycle ``ready`` takes it.

Widths and parameters are small (the components steer, store and frame payloads; a narrow
payload shows what a wide one would): 8-bit beats for the packet plumbing, 64 where a
component takes only :data:`~nicoll.hw.params.DATA_WIDTHS` or a header must fit in a few beats.
Components whose checks do not slow each other down are checked side by side in one run
(most of a small check's time is the tools' start); a group that fails is checked again one
component at a time, so the report names the culprit.

- Mutants built here (a component behind a wrapper that changes the payload while the output
  waits, or withdraws ``valid`` while it waits) must fail, so the checks are shown able to
  fail.
- With NICOLL_FORMAL_STREAM_COVER set, a cover run shows that within the bound every output
  stream of every component has an offer that waits and is then taken (the case the rules
  are about).
"""

import os

import pytest
from amaranth.hdl import Assume, Cover, Elaboratable, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from nicoll.hw.alu.reduction import ReductionALU
from nicoll.hw.barrier.send import NoticeSender
from nicoll.hw.engine.packer import RowPacker
from nicoll.hw.engine.unpacker import RowUnpacker
from nicoll.hw.net.packet import (HeaderReceiver, HeaderSender, PacketArbiter, PacketDemux,
                                  PacketKind)
from nicoll.hw.net.switch import Switch
from nicoll.hw.ops import DType, ReduceOp
from nicoll.hw.repack.hub import MessagePacketizer
from nicoll.hw.sim.faults import FaultInjector
from nicoll.hw.sim.fcs import FcsAppend, FcsCheck

from formal_helpers import Past, implies, no_reset, run_sby, stream_sink_rules, \
    stream_source_rules


#: Steps of each bounded check unless its group says otherwise (steps 0 .. 9 from reset):
#: enough for a packet of the narrow widths here to be framed, stalled and sent; the cover
#: run finds the last component's first offer that waits and is then taken (ReductionALU's,
#: behind its pipeline and FIFO) at step 8.  NICOLL_FORMAL_STREAM_DEPTH runs every group to
#: that depth instead (docs/formal.md).
STREAM_DEPTH = 10


def _depth(default):
    value = os.environ.get("NICOLL_FORMAL_STREAM_DEPTH")
    return int(value) if value else default


class StreamSpec(Elaboratable):
    """The stream rules around ``dut``.

    ``sources``: the names of its input streams, each assumed to keep the stream rules.
    ``sinks``: the names of its output streams, each asserted to keep them.
    ``held``: ``{name: value}``, inputs assumed to equal a constant in every cycle.
    ``stable``: names of inputs assumed not to change after the first cycle (any value, the
    same throughout the run).  A name may reach into a struct: ``"config.seed"``.  Every
    other input is free in every cycle."""

    def __init__(self, dut, *, sources, sinks, held=None, stable=()):
        self.dut = dut
        self.sources = list(sources)
        self.sinks = list(sinks)
        self.held = dict(held or {})
        self.stable = list(stable)

    @property
    def ports(self):
        return [value for path, member, value in self.dut.signature.flatten(self.dut)
                if member.flow == In]

    def _member(self, name):
        value = self.dut
        for part in name.split("."):
            value = getattr(value, part)
        return Value.cast(value)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        past_valid = no_reset(m)
        for name, value in self.held.items():
            m.d.comb += Assume(self._member(name) == value)
        for name in self.stable:
            value = self._member(name)
            was = Past(m, value, name=f"{name}_was")
            m.d.comb += Assume(implies(past_valid, value == was))
        for name in self.sources:
            stream_source_rules(m, getattr(dut, name), past_valid)
        for name in self.sinks:
            port = getattr(dut, name)
            stream_sink_rules(m, port, past_valid)
            # For the cover run: an offer that waited (the case the rules are about) and is
            # then taken.
            waited = Past(m, port.valid & ~port.ready, name=f"{name}_waited")
            m.d.comb += Cover(past_valid & waited & port.valid & port.ready)
        return m


# ---- The components, small ---------------------------------------------------------------------

def _arbiter(registered_grant):
    return StreamSpec(PacketArbiter(2, 8, registered_grant=registered_grant),
                      sources=["i_0", "i_1"], sinks=["o"])


def _demux(input_slice):
    route = {PacketKind.BARRIER: 0, PacketKind.DATA: 1}
    return StreamSpec(PacketDemux(8, route, outputs=2, default=1, input_slice=input_slice),
                      sources=["i"], sinks=["o_0", "o_1"])


def _header_sender():
    # 200 header bits at 64 per beat: a packet of 4 beats.
    return StreamSpec(HeaderSender(64), sources=["header"], sinks=["packets"])


def _header_receiver():
    # node_id and peer_id only feed the to_node / from_peer flags, not the stream: free.
    return StreamSpec(HeaderReceiver(64), sources=["packets"], sinks=["header"])


def _switch():
    return StreamSpec(Switch(2, 8), sources=["rx_0", "rx_1"], sinks=["tx_0", "tx_1"])


def _packer():
    return StreamSpec(RowPacker(64), sources=["rows"], sinks=["beats"])


def _unpacker():
    # addr_width 8: 5 row bits (the row only travels along with the chunk).
    return StreamSpec(RowUnpacker(64, addr_width=8), sources=["beats", "chunks"],
                      sinks=["rows"])


def _alu():
    # One capability: 8-bit products, whose unit is one adder tree of three stages (a sum
    # or compare would build the shared compare unit for every type, which made the check
    # half again as slow).  The flow control and the output FIFO, what the stream rules
    # depend on, are the same in every build with the output FIFO.
    return StreamSpec(ReductionALU(64, capabilities={(ReduceOp.PROD, DType.UINT8)}),
                      sources=["a", "b"], sinks=["result"])


def _packetizer():
    # node_id is the headers' src: this node's id, set before traffic and kept (stable).
    return StreamSpec(MessagePacketizer(64, packet_beats=2), sources=["i"], sinks=["o"],
                      stable=["node_id"])


def _notice_sender():
    # Its inputs are the barrier unit's flops and configuration, all free here: tx comes
    # from its own registers.
    return StreamSpec(NoticeSender(max_nodes=4, max_children=2), sources=[], sinks=["tx"])


def _fault_injector():
    # The configuration is stable (see the test's docstring).  The seed is held too: with
    # the seed free, the solver must see that the draws made from the seed as it is
    # reloaded equal those made from the generator's registers a cycle later, two trees of
    # 32-bit XORs, and step 2 did not finish in two minutes.  The rates stay free,
    # so each draw still falls on either side of its rate: every fault can happen to every
    # packet of the run.
    return StreamSpec(FaultInjector(8, link=0, max_packet_beats=2), sources=["i"],
                      sinks=["o"], held={"config.seed": 0x1234_5678}, stable=["config"])


def _fcs_append():
    return StreamSpec(FcsAppend(8), sources=["i"], sinks=["o"])


def _fcs_check():
    return StreamSpec(FcsCheck(8, max_packet_beats=2), sources=["i"], sinks=["o"])


class SideBySide(Elaboratable):
    """Several property modules in one check: their designs share no signal, so the check
    holds exactly when each of theirs does, and one run of the tools costs less than one
    each (most of a small check's time is the tools' start)."""

    def __init__(self, specs):
        self.specs = list(specs)

    @property
    def ports(self):
        return [port for spec in self.specs for port in spec.ports]

    def elaborate(self, platform):
        m = Module()
        for k, spec in enumerate(self.specs):
            m.submodules[f"spec_{k}"] = spec
        return m


#: The components, by the group checked in one run: ``{group: (steps, {name: builder})}``.
#: Each run of the tools costs about 1.5 s of CPU time before the solver starts, so the
#: components are grouped, but only where the joint check costs no more than the parts:
#: FcsAppend's and FcsCheck's CRC logic made any group they joined several times slower, and
#: one run of seven packet components took longer than their seven runs apart.
GROUPS = {
    "steering": (STREAM_DEPTH, {
        "PacketDemux": lambda: _demux(False),
        "PacketDemux(input_slice=True)": lambda: _demux(True),
        "Switch": _switch,
        "NoticeSender": _notice_sender,
        "MessagePacketizer": _packetizer,
    }),
    "headers": (STREAM_DEPTH, {
        "HeaderSender": _header_sender,
        "HeaderReceiver": _header_receiver,
    }),
    "engine": (STREAM_DEPTH, {
        "RowPacker": _packer,
        "RowUnpacker": _unpacker,
        "ReductionALU": _alu,
    }),
    # 8 steps: a packet of two beats, its duplicate and the next packet's first beat fit;
    # 10 steps took twice as long.
    "faults": (8, {"FaultInjector": _fault_injector}),
    # FcsAppend is a wire with a CRC register beside it: 6 steps hold packets of several
    # beats, stalled, with the register moving on between them.  FcsCheck: 8 steps take a
    # packet of two beats in, commit it and send it under stalls while the next arrives.
    # Both CRCs are the slowest logic here per step.
    "fcs_append": (6, {"FcsAppend": _fcs_append}),
    "fcs_check": (8, {"FcsCheck": _fcs_check}),
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_output_stream_rules(group, tmp_path):
    """Bounded: every output stream of each component of the group keeps the stream rules.

    Held or stable while running, as the components' users keep them: MessagePacketizer's
    ``node_id`` (the node's own id, the headers' ``src``) and FaultInjector's ``config``
    (its rates, seed, epoch and target, set by the test harness before traffic; a change of
    ``epoch`` reloads the generator, and made while a first beat waits it would redraw that
    packet's faults, so this check covers runs in which the configuration does not change;
    its seed is held at one value, see :func:`_fault_injector`).  Every other input is free
    in every cycle."""
    steps, members = GROUPS[group]
    depth = _depth(steps)
    spec = SideBySide(build() for build in members.values())
    result = run_sby(spec, spec.ports, tmp_path / "group", mode="bmc", depth=depth,
                     timeout=None)
    if result.passed:
        return
    failed = []
    for k, (name, build) in enumerate(members.items()):
        alone = build()
        one = run_sby(alone, alone.ports, tmp_path / f"member_{k}", mode="bmc", depth=depth,
                      timeout=None)
        if not one.passed:
            failed.append(f"{name}: {one}")
    pytest.fail("\n\n".join(failed) or str(result))


@pytest.mark.skipif(not os.environ.get("NICOLL_FORMAL_STREAM_COVER"),
                    reason="set NICOLL_FORMAL_STREAM_COVER=1 to run (about 22 s)")
def test_output_waits_reached(tmp_path):
    """Cover: within :data:`STREAM_DEPTH` steps, every output stream of every component has
    an offer that waits a cycle and is then taken, so the bounds reach the case the rules
    are about (and the assumptions leave such runs: a contradiction among them would make
    sby end in ERROR, not PASS, in every check here)."""
    spec = SideBySide(build() for _, members in GROUPS.values()
                      for build in members.values())
    result = run_sby(spec, spec.ports, tmp_path, mode="cover", depth=STREAM_DEPTH,
                     timeout=None)
    assert result.passed, str(result)


# ---- PacketArbiter ------------------------------------------------------------------------------

def test_arbiter_output_stream_rules(tmp_path):
    """Bounded (:data:`STREAM_DEPTH` steps): PacketArbiter(2, 8), both forms side by side
    (``registered_grant`` False and True), under inputs that keep the stream rules and any
    ``o.ready``.  Before the grant was held from the cycle a first beat is offered, this
    failed at step 1 in each form: with no packet begun, i_0 offered a bulk beat that waited,
    i_1 then offered a control beat, and ``o`` showed i_1's beat in place of i_0's."""
    spec = SideBySide([_arbiter(False), _arbiter(True)])
    result = run_sby(spec, spec.ports, tmp_path, mode="bmc", depth=_depth(STREAM_DEPTH))
    assert result.passed, str(result)


# ---- Mutants: the checks can fail --------------------------------------------------------------

def _passage(data_width):
    # The plainest real stream component: a PacketDemux with one output passes every beat
    # through in the same cycle.  A mutant around it fails by its own change alone.
    return PacketDemux(data_width, {}, outputs=1, default=0)


class _Mutant(wiring.Component):
    """A one-output PacketDemux behind a wrapper; :meth:`alter` connects ``inner.o_0`` to
    ``o`` with the mutant's one change."""

    def __init__(self, data_width):
        self._inner = _passage(data_width)
        super().__init__({"i": In(self._inner.i.signature.flip()),
                          "o": Out(self._inner.o_0.signature)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = self._inner
        wiring.connect(m, wiring.flipped(self.i), inner.i)
        self.alter(m, inner.o_0)
        return m


class Fidgety(_Mutant):
    """While the output waits, the low data bit of the beat it offers flips every cycle."""

    def alter(self, m, inner):
        flip = Signal()
        m.d.sync += flip.eq(self.o.valid & ~self.o.ready & ~flip)
        m.d.comb += [self.o.valid.eq(inner.valid), inner.ready.eq(self.o.ready),
                     self.o.payload.eq(inner.payload),
                     self.o.payload.data[0].eq(inner.payload.data[0] ^ flip)]


class Withdrawing(_Mutant):
    """An output that has waited a cycle is withdrawn (``o.valid`` low) for one cycle, and
    offered again after."""

    def alter(self, m, inner):
        waited = Signal()
        m.d.sync += waited.eq(self.o.valid & ~self.o.ready)
        # Withdrawn, it is not taken either: ready goes back only with valid.
        m.d.comb += [self.o.valid.eq(inner.valid & ~waited),
                     inner.ready.eq(self.o.ready & ~waited),
                     self.o.payload.eq(inner.payload)]


@pytest.mark.parametrize("mutant", [Fidgety, Withdrawing])
def test_stream_mutant_fails(mutant, tmp_path):
    spec = StreamSpec(mutant(8), sources=["i"], sinks=["o"])
    result = run_sby(spec, spec.ports, tmp_path, mode="bmc", depth=STREAM_DEPTH)
    assert result.status == "FAIL", str(result)
    # The counterexample names an assertion of the spec, not an error of the flow.
    assert "failed assertion" in result.log_tail, str(result)
