# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E), B1 "AMBA AXI4-Lite";
#      A3.3 (channel handshakes and their dependencies); A3.4.4 (RRESP/BRESP encoding).
"""AXI4-Lite control/status register slave, generated from the register map.

:class:`CSRSlave` walks a :class:`nicoll.hw.regmap.RegisterMap` when it is built and elaborated:
the address decoder, the reset values, the storage of software-writable fields and the ports
of hardware-driven fields all come from the map, so no register offset appears here.  The
access rules are those written in :mod:`nicoll.hw.regmap`.

Fields become, according to their access properties:

=====================  ======================================================================
``sw=r``, ``hw=na``    a constant, the field's reset value;
``sw=r``, ``hw=w``     an input port of the field's width, sampled when the bus reads it;
``sw=rw`` or ``w``     a flop initialised to the reset value, written by the bus; with
                       ``hw=r`` it is also an output port of the same name.
=====================  ======================================================================

Any other combination is refused with :exc:`ValueError` when the slave is built.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ..regmap import BusResponse, RegisterMap
from ..regmap.generated import REGMAP
from .axi import AXI4LiteSignature
from ..lib.skid import SkidBuffer


__all__ = ["register_signature", "drive_fields", "CSRSlave"]


# The bus is 32 bits wide (nicoll.hw.regmap): bits [1:0] of an address select a byte in a word.
_WORD_BYTES = 4


def _runs(mask, width):
    """Yield ``(lsb, length)`` of each run of set bits in ``mask`` below bit ``width``."""
    lsb = None
    for bit in range(width + 1):
        is_set = bit < width and (mask >> bit) & 1
        if is_set and lsb is None:
            lsb = bit
        elif not is_set and lsb is not None:
            yield lsb, bit - lsb
            lsb = None


#: Words per group of the read multiplexer's first stage (see CSRSlave._read_path).
_READ_GROUP = 16
# Reads the output queue holds: enough for one read a cycle, AR to R and the credit back.
_READ_SLOTS = 8


def _or_all(values):
    """OR of ``values`` as a balanced tree."""
    values = list(values)
    while len(values) > 1:
        values = [values[k] | values[k + 1] if k + 1 < len(values) else values[k]
                  for k in range(0, len(values), 2)]
    return values[0]


def register_signature(block):
    """The registers of ``block`` (a :class:`nicoll.hw.regmap.Block`) as its gateware sees
    them: one member per register with ports, in lower case, each a signature of its fields.
    A field the block drives (``hw=w``) is ``Out``; a field it reads (``sw=rw``/``w``,
    ``hw=r``) is ``In``; a ``swmod`` field adds an ``In(1)`` ``<field>_swmod`` pulse.

    The block has a member ``Out(register_signature(block))`` (``csr``) and
    :class:`CSRSlave` one ``In(...)`` of it per block, named by the block, so the two connect
    with :func:`amaranth.lib.wiring.connect`.  Returns None for a block with no ports.
    """
    registers = {}
    for reg in block.registers:
        fields = {}
        for field in reg.fields:
            if field.hw_driven:
                fields[field.name.lower()] = Out(field.width)
            elif field.sw_writable and field.hw == "r":
                fields[field.name.lower()] = In(field.width)
            if field.swmod and field.sw_writable:
                fields[f"{field.name.lower()}_swmod"] = In(1)
        if fields:
            registers[reg.name.lower()] = Out(wiring.Signature(fields))
    return wiring.Signature(registers) if registers else None


def drive_fields(m, registers, block, values):
    """Drive every field of ``block`` that hardware drives, on ``registers`` (the block's
    :func:`register_signature` interface, either side), from ``values``: a mapping of
    ``(register, field)`` names as in the map to values.  Every such field must have a value
    and every value a field, so a field added to the map cannot be left floating (or a value
    outlive its field): NotImplementedError otherwise."""
    values = dict(values)
    for reg in block.registers:
        for field in reg.fields:
            if not field.hw_driven:
                continue
            if (reg.name, field.name) not in values:
                raise NotImplementedError(f"Field {block.name}.{reg.name}.{field.name} of the "
                                          f"register map is not driven")
            port = getattr(getattr(registers, reg.name.lower()), field.name.lower())
            m.d.comb += port.eq(values.pop((reg.name, field.name)))
    if values:
        raise NotImplementedError(f"Block {block.name} of the register map lacks fields "
                                  f"{sorted(values)}")


class CSRSlave(wiring.Component):
    """AXI4-Lite slave exposing the registers of ``regmap``.

    Parameters
    ----------
    regmap : :class:`nicoll.hw.regmap.RegisterMap`
        The register map to implement; the generated ``nicoll.hw.regmap.generated.REGMAP`` by default.
    addr_width : int
        Width of the bus byte address, at least ``regmap.addr_width`` and at most 32.  Address
        bits above the map still decode: an address beyond the map is unmapped.

    Members
    -------
    bus : ``In(AXI4LiteSignature(addr_width))``
        The register bus.  AW and W are accepted independently and in either order; one
        write and one read can complete every cycle; a response is held until it is taken.
        Read data comes two cycles after AR is taken (a two-stage registered multiplexer;
        hardware-driven fields are sampled in the first cycle); AW and W each wait in a
        two-entry register slice, and a write commits the cycle after both AW and W are taken
        (the address is decoded as AW is taken) and its response shows the cycle after that.
    <block> : ``In(register_signature(block))``
        Per block of the map, its registers' ports (:func:`register_signature`): an input per
        hardware-driven field and an output per hardware-readable storage field, as
        ``<block>.<register>.<field>`` in lower case (:meth:`port`).  A ``singlepulse``
        field's output is high for the one cycle after a write of 1; a ``swmod`` field's
        ``<field>_swmod`` output for the one cycle after software wrote a byte of it.
    """

    def port(self, block, register, field, *, swmod=False):
        """The port of field ``block.register.field`` (names as in the map, any case), or
        its ``_swmod`` pulse."""
        for what, value in (("Block", block), ("Register", register), ("Field", field)):
            if not isinstance(value, str):
                raise TypeError(f"{what} name must be a string, not {value!r}")
        name = field.lower() + ("_swmod" if swmod else "")
        try:
            return getattr(getattr(getattr(self, block.lower()), register.lower()), name)
        except AttributeError:
            raise ValueError(f"The register map has no port for field "
                             f"{block}.{register}.{field}{' (swmod)' if swmod else ''}") \
                from None

    def __init__(self, regmap=REGMAP, *, addr_width=16):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"Register map must be a RegisterMap, not {regmap!r}")
        if not isinstance(addr_width, int) or isinstance(addr_width, bool):
            raise TypeError(f"Address width must be an integer, not {addr_width!r}")
        if not regmap.addr_width <= addr_width <= 32:
            raise ValueError(f"Address width must be between {regmap.addr_width} (to reach "
                             f"every register) and 32, not {addr_width!r}")
        self._regmap = regmap
        self._addr_width = addr_width

        members = {"bus": In(AXI4LiteSignature(addr_width))}
        for block in regmap.blocks:
            signature = register_signature(block)
            if signature is not None:
                members[block.name.lower()] = In(signature)
        # (block, register, field, port key or None) for every field, in address order: the
        # key names the port (:meth:`port`).
        self._fields = []
        for block in regmap.blocks:
            for reg in block.registers:
                if reg.width % 32 or reg.address % _WORD_BYTES:
                    raise ValueError(f"Register {block.name}.{reg.name} must be a whole "
                                     f"number of aligned 32-bit words")
                for field in reg.fields:
                    name = None
                    if field.hw_driven:
                        name = (block.name, reg.name, field.name)
                    elif field.sw_writable and field.hw in ("na", "r"):
                        if field.hw == "r":
                            name = (block.name, reg.name, field.name)
                        elif field.singlepulse:
                            raise ValueError(f"Single-pulse field {block.name}.{reg.name}."
                                             f"{field.name} must be readable by hardware")
                    elif field.is_constant:
                        if field.reset is None:
                            raise ValueError(f"Constant field {block.name}.{reg.name}."
                                             f"{field.name} has no reset value")
                    else:
                        raise ValueError(f"Field {block.name}.{reg.name}.{field.name} has "
                                         f"unsupported access sw={field.sw!r} hw={field.hw!r}")
                    self._fields.append((block, reg, field, name))
        super().__init__(members)

    @property
    def regmap(self):
        return self._regmap

    @property
    def addr_width(self):
        return self._addr_width

    def elaborate(self, platform):
        m = Module()
        bus = self.bus

        # Per register: its read value (as software sees it), its storage flop (or None), and
        # the mask of software-writable bits.
        regs = {}
        for block, reg, field, name in self._fields:
            entry = regs.setdefault(reg.address, {"reg": reg, "block": block.name,
                                                  "writable": 0, "init": 0})
            if field.sw_writable:
                entry["writable"] |= field.mask
                entry["init"] |= ((field.reset or 0) << field.lsb) & field.mask
        for entry in regs.values():
            reg = entry["reg"]
            storage = None
            if entry["writable"]:
                storage = Signal(reg.width, init=entry["init"],
                                 name=f"{entry['block']}_{reg.name}".lower())
            entry["storage"] = storage
            parts = []
            cursor = 0
            for block, r, field, name in self._fields:
                if r is not reg:
                    continue
                if field.lsb > cursor:
                    parts.append(Const(0, field.lsb - cursor))
                bits = slice(field.lsb, field.lsb + field.width)
                if field.hw_driven:
                    parts.append(self.port(*name))
                elif field.sw_writable:
                    if name is not None:
                        m.d.comb += self.port(*name).eq(storage[bits])
                    # A write-only field reads as zero.
                    parts.append(storage[bits] if field.sw_readable else Const(0, field.width))
                else:
                    parts.append(Const(field.reset, field.width))
                cursor = field.lsb + field.width
            if reg.width > cursor:
                parts.append(Const(0, reg.width - cursor))
            entry["value"] = Cat(*parts)
            # Upper words of a wide register, latched when its lowest word is read.
            entry["shadow"] = (Signal(reg.width - 32,
                                      name=f"{entry['block']}_{reg.name}_shadow".lower())
                               if reg.words > 1 else None)

        # Single-pulse fields fall back to 0 the cycle after a write; swmod pulses likewise.
        # (These defaults come first: a write in the same cycle overrides them.)
        self._pulses = {}
        for block, reg, field, name in self._fields:
            entry = regs[reg.address]
            if field.singlepulse:
                m.d.sync += entry["storage"][field.lsb:field.lsb + field.width].eq(0)
            if field.swmod:
                pulse = self.port(block.name, reg.name, field.name, swmod=True)
                m.d.sync += pulse.eq(0)
                self._pulses.setdefault(reg.address, []).append((field, pulse))

        # ---- Write path -------------------------------------------------------------------
        # AW and W each go through a register slice, so either may arrive first (IHI0022E,
        # A3.3.1: the slave may accept them in any order) and their ready signals are flops.
        # The address is decoded as it enters its slice, into one select bit per word, so the
        # write itself reads flops only.  It commits in a cycle both slices hold an entry and
        # the B channel can take a new response: the cycle after the later of the two was
        # taken; one write a cycle when both keep coming.
        words = [(entry, word, (entry["reg"].address >> 2) + word)
                 for entry in regs.values() for word in range(entry["reg"].words)]
        m.submodules.aw_slice = aw_slice = SkidBuffer(data.StructLayout({
            "sel": len(words),                  # the word the address names, one-hot
            "hit": 1,                           # it names a register
        }))
        m.submodules.w_slice = w_slice = SkidBuffer(data.StructLayout({"data": 32, "strb": 4}))
        sel = Cat(bus.awaddr[2:] == number for _, _, number in words)
        m.d.comb += [
            aw_slice.i.valid.eq(bus.awvalid),
            bus.awready.eq(aw_slice.i.ready),
            aw_slice.i.payload.sel.eq(sel),
            aw_slice.i.payload.hit.eq(sel.any()),
            w_slice.i.valid.eq(bus.wvalid),
            bus.wready.eq(w_slice.i.ready),
            w_slice.i.payload.data.eq(bus.wdata),
            w_slice.i.payload.strb.eq(bus.wstrb),
        ]
        aw_sel, aw_hit = aw_slice.o.payload.sel, aw_slice.o.payload.hit
        w_data, w_strb = w_slice.o.payload.data, w_slice.o.payload.strb
        commit = aw_slice.o.valid & w_slice.o.valid & (~bus.bvalid | bus.bready)
        m.d.comb += [aw_slice.o.ready.eq(commit), w_slice.o.ready.eq(commit)]
        with m.If(bus.bready):
            m.d.sync += bus.bvalid.eq(0)
        with m.If(commit):
            m.d.sync += [
                bus.bvalid.eq(1),
                # A write to a read-only word is accepted and changes nothing.
                bus.bresp.eq(Mux(aw_hit, BusResponse.OKAY, BusResponse.DECERR)),
            ]
            for k, (entry, word, _) in enumerate(words):
                with m.If(aw_sel[k]):
                    self._write_word(m, entry, word, w_data, w_strb)
                    for field, pulse in self._pulses.get(entry["reg"].address, ()):
                        lanes = [lane for lane in range(_WORD_BYTES)
                                 if (field.mask >> (32 * word + 8 * lane)) & 0xff]
                        if lanes:
                            m.d.sync += pulse.eq(Cat(w_strb[lane] for lane in lanes).any())

        self._read_path(m, regs)
        return m

    def _read_path(self, m, regs):
        """The read channel: a register slice, two registered stages and an output queue.

        AR goes through a register slice.  Decode: the slice's address is compared with every
        word's and the results registered, one select bit per word, grouped by
        :data:`_READ_GROUP` words (each bit fans out only to its own word's 32 bits, where one
        address would fan out to every word).  Gather: each group's selected word (an AND-OR
        of its words) is registered, with a hit bit; a wide register's upper words are latched
        into its shadow then, so the words a host reads one after the other all come from the
        same cycle.  Out: the hit group's word enters an output queue (a group that missed
        holds zero) whose head drives RDATA; a read is taken from the AR slice only while the
        queue has a place for it (a credit), so no stage ever waits.  A read takes five cycles
        from AR to RVALID; reads still complete one per cycle, and RVALID stays up until
        RREADY (IHI0022E, A3.2.1).
        """
        bus = self.bus
        words = []      # (word address, value, entry if it is the low word) in address order
        for entry in regs.values():
            reg, value, shadow = entry["reg"], entry["value"], entry["shadow"]
            for word in range(reg.words):
                source = value[:32] if word == 0 else shadow[32 * (word - 1):32 * word]
                words.append(((reg.address >> 2) + word, source, entry if word == 0 else None))
        words.sort(key=lambda w: w[0])
        groups = [words[k:k + _READ_GROUP] for k in range(0, len(words), _READ_GROUP)]

        # Admission by credits: a read is taken only while the output queue has a place for
        # it, counting the reads still in the stages, so the stages never wait and RREADY
        # reaches only the queue.  (Stalling each stage on the next chained RREADY through
        # the stages into the AR slice, across the widest enables of the block: the 64-bit
        # core's critical path.)
        m.submodules.r_queue = r_queue = SyncFIFOBuffered(width=32 + len(bus.rresp),
                                                          depth=_READ_SLOTS)
        credits = Signal(range(_READ_SLOTS + 1), init=_READ_SLOTS)
        credit_ok = Signal(init=1)              # credits != 0, as a flop
        g_valid = Signal()                      # gather stage
        g_hit = Signal(len(groups))
        g_data = [Signal(32, name=f"rd_group_{g}") for g in range(len(groups))]
        d_valid = Signal()                      # decode stage
        d_sel = [Signal(len(group), name=f"rd_select_{g}") for g, group in enumerate(groups)]

        m.submodules.ar_slice = ar = SkidBuffer(len(bus.araddr))
        m.d.comb += [ar.i.valid.eq(bus.arvalid), ar.i.payload.eq(bus.araddr),
                     bus.arready.eq(ar.i.ready), ar.o.ready.eq(credit_ok)]
        admit = ar.o.valid & credit_ok
        returned = bus.rvalid & bus.rready
        credits_next = credits - admit + returned
        m.d.sync += [credits.eq(credits_next), credit_ok.eq(credits_next != 0)]

        m.d.sync += d_valid.eq(admit)
        for g, group in enumerate(groups):
            # Zero unless a read is decoded, so the later stages need no valid gate.
            m.d.sync += d_sel[g].eq(Cat(admit & (ar.o.payload[2:] == address)
                                        for address, _, _ in group))
        m.d.sync += g_valid.eq(d_valid)
        for g, group in enumerate(groups):
            m.d.sync += [
                g_hit[g].eq(d_sel[g].any()),
                g_data[g].eq(_or_all([Mux(d_sel[g][i], source, 0)
                                      for i, (_, source, _) in enumerate(group)])),
            ]
            for i, (_, _, entry) in enumerate(group):
                if entry is not None and entry["shadow"] is not None:
                    with m.If(d_sel[g][i]):
                        m.d.sync += entry["shadow"].eq(entry["value"][32:])
        m.d.comb += [
            r_queue.w_en.eq(g_valid),
            r_queue.w_data.eq(Cat(_or_all(g_data),
                                  Mux(g_hit.any(), BusResponse.OKAY, BusResponse.DECERR))),
            bus.rvalid.eq(r_queue.r_rdy),
            Cat(bus.rdata, bus.rresp).eq(r_queue.r_data),
            r_queue.r_en.eq(bus.rready),
        ]

    @staticmethod
    def _write_word(m, entry, word, wr_data, wr_strb):
        """Update the writable bits of one 32-bit word of a register, lane by lane."""
        storage = entry["storage"]
        if storage is None:
            return
        word_mask = (entry["writable"] >> (32 * word)) & 0xffff_ffff
        for lane in range(_WORD_BYTES):
            lane_mask = (word_mask >> (8 * lane)) & 0xff
            if not lane_mask:
                continue
            with m.If(wr_strb[lane]):
                for lsb, length in _runs(lane_mask, 8):
                    bit = 8 * lane + lsb
                    m.d.sync += storage[32 * word + bit:32 * word + bit + length].eq(
                        wr_data[bit:bit + length])
