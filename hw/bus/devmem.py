# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E): A3.2 (handshake), A3.3.1 (channel
#      dependencies), A3.4.1 (burst length, size and type; address of each transfer),
#      A3.4.3 (write strobes), A3.4.4 (read and write response structure).
"""On-chip device memory behind an AXI4 subordinate port.

This is the memory a node's collectives read and write; the host reaches it through the
node's AXI4 port.  On a board it would be external DRAM behind a controller with the same
port.

Behaviour of the port:

- INCR and FIXED bursts of any length (1..256 beats) and any transfer size up to the bus
  width.  The address of each beat follows IHI0022E A3.4.1: the first beat uses the start
  address, each later INCR beat the next multiple of the transfer size.  A beat reaches the
  memory row ``address // (data_width // 8)`` and writes the byte lanes whose strobe is set,
  so narrow and unaligned transfers work as long as the manager's strobes select the right
  lanes (A3.4.3).  A read beat returns the whole row; the manager picks its lanes.
- WRAP bursts, the reserved burst type and transfer sizes wider than the bus answer SLVERR:
  such a write changes nothing and such a read returns zeros.
- A beat whose address is at or beyond ``size`` is out of range.  An out-of-range write beat
  is dropped (the burst's other beats are written) and the burst's single write response is
  DECERR.  An out-of-range read beat returns zero data with RRESP DECERR; the other beats of
  the burst return their data with OKAY (A3.4.4 allows a response per read beat).
- Writes take one beat per clock after a one-cycle address phase; a beat reaches the memory
  through a register stage, a cycle after it is taken (later while the engine writes), and
  the response follows the last beat's write.  The next burst's address is taken in the
  cycle its predecessor's response is taken.  Reads return one beat per
  clock: the synchronous memory read is followed by a two-entry register slice, which
  absorbs the beat still in flight when RREADY drops, so backpressure loses nothing, and the
  read stage holds its beat (the memory port keeps its data) while the slice is full.
- AW and AR each enter through a two-entry register slice (AWREADY and ARREADY come from
  flops, and a request's decode starts at flops), a cycle of latency on each burst.
- The write and read channels are independent; a read issued after a write's response has
  been received sees that write.
- AxLOCK, AxCACHE, AxPROT and AxQOS are ignored; an exclusive access is answered OKAY, which
  tells the manager exclusive accesses are not supported (A7.2.4).
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory, MemoryData
from amaranth.lib.wiring import In, Out

from ..regmap import BusResponse
from .axi import AXI4Signature, BURST_FIXED, BURST_INCR
from ..lib.memattrs import COLLISIONS_DONT_CARE
from ..params import DATA_WIDTHS, check_data_width, is_int
from ..lib.skid import SkidBuffer


__all__ = ["DeviceMemory", "MemoryReadSignature", "MemoryWriteSignature"]


class MemoryReadSignature(wiring.Signature):
    """A synchronous read port of device memory, as its user sees it: ``data`` shows row
    ``addr`` in the cycle after one with ``en`` set, and keeps it while ``en`` is low."""

    def __init__(self, row_bits, data_width):
        super().__init__({"addr": Out(row_bits), "en": Out(1), "data": In(data_width)})


class MemoryWriteSignature(wiring.Signature):
    """A write port of device memory: byte lane k of ``data`` lands in row ``addr`` in a cycle
    with bit k of ``en`` set.

    ``issue`` is set in every cycle in which ``en`` has a bit set (it may also be set with an
    empty ``en``): the memory gives the port priority over its host bus in those cycles.  It
    comes from a flop beside ``en``, so the arbitration reads one bit, not an OR over the
    lanes (that OR was on the routed critical path of the 256-bit core)."""

    def __init__(self, row_bits, data_width):
        super().__init__({"addr": Out(row_bits), "en": Out(data_width // 8),
                          "data": Out(data_width), "issue": Out(1)})


#: A 32-bit memory too (a register-bus-wide test memory), besides the cores' widths.
_DATA_WIDTHS = (32,) + DATA_WIDTHS


class DeviceMemory(wiring.Component):
    """``size`` bytes of on-chip memory, ``data_width`` bits per row, behind an AXI4 port.

    Parameters
    ----------
    size : int
        Bytes of memory: a power of two and a multiple of ``data_width // 8``.
    data_width : int
        Width of the data bus and of a memory row: 32, 64, 128, 256 or 512.
    addr_width : int
        Width of the AXI byte address; must reach every byte.
    id_width : int
        Width of the AXI ID signals.
    engine_ports : bool
        Add the collective engine's ports: two read ports (the bytes it sends and the local
        operands of its reductions) and a write port (what it receives), so the engine
        moves a beat per clock on each while the host port stays usable.  The host should
        not write rows the engine is using while a schedule runs.  Both share the memory's
        write port: a host write beat waits in any cycle the engine writes.

    Members
    -------
    axi : ``In(AXI4Signature(addr_width, data_width, id_width))``
    send_rd, local_rd : ``In(MemoryReadSignature(row_bits, data_width))``
        With ``engine_ports`` only; ``row_bits`` is ``log2(size // (data_width // 8))``.
    engine_wr : ``In(MemoryWriteSignature(row_bits, data_width))``
        With ``engine_ports`` only.

    Attributes
    ----------
    data : :class:`amaranth.lib.memory.MemoryData`
        The memory contents, for simulation testbenches (``ctx.get(mem.data[row])``).
    """

    def __init__(self, size, data_width, *, addr_width=32, id_width=8, engine_ports=False):
        check_data_width(data_width, widths=_DATA_WIDTHS)
        beat_bytes = data_width // 8
        if not is_int(size):
            raise TypeError(f"Memory size must be an integer, not {size!r}")
        if size <= 0 or size & (size - 1) or size % beat_bytes:
            raise ValueError(f"Memory size must be a power of two and a multiple of "
                             f"{beat_bytes} bytes, not {size!r}")
        if not is_int(addr_width):
            raise TypeError(f"Address width must be an integer, not {addr_width!r}")
        if not 1 <= addr_width <= 64 or size > 1 << addr_width:
            raise ValueError(f"Address width must be between 1 and 64 and reach {size} bytes, "
                             f"not {addr_width!r}")
        if not is_int(id_width):
            raise TypeError(f"ID width must be an integer, not {id_width!r}")
        if id_width < 1:
            raise ValueError(f"ID width must be at least 1, not {id_width!r}")
        self._size = size
        self._data_width = data_width
        self._beat_bytes = beat_bytes
        self._depth = size // beat_bytes
        self._addr_width = addr_width
        self._id_width = id_width
        self.data = MemoryData(shape=data_width, depth=self._depth, init=[])
        members = {"axi": In(AXI4Signature(addr_width, data_width, id_width))}
        self._engine_ports = bool(engine_ports)
        if engine_ports:
            bits = self.row_bits
            members.update({"send_rd": In(MemoryReadSignature(bits, data_width)),
                            "local_rd": In(MemoryReadSignature(bits, data_width)),
                            "engine_wr": In(MemoryWriteSignature(bits, data_width))})
        super().__init__(members)

    @property
    def row_bits(self):
        """Bits of a row number."""
        return max(1, (self._depth - 1).bit_length())

    @property
    def size(self):
        return self._size

    @property
    def data_width(self):
        return self._data_width

    @property
    def depth(self):
        return self._depth

    def elaborate(self, platform):
        m = Module()
        offset_bits = self._beat_bytes.bit_length() - 1     # byte-in-row bits
        size_bits = self._size.bit_length() - 1             # bits of an in-range address

        # No read port meets a write of the same row in one cycle where it matters (the two
        # comments below), so synthesis may leave such collisions undefined.
        m.submodules.mem = mem = Memory(data=self.data, attrs=COLLISIONS_DONT_CARE)
        wr_port = mem.write_port(granularity=8)
        # Reads and writes are unordered AXI channels, so a read racing a write to the same
        # row may see either value: no bypass logic is needed.
        rd_port = mem.read_port(domain="sync", transparent_for=())
        # The engine's writes share the one write port: a write beat of the host waits in a
        # cycle the engine writes, so the memory keeps a single write port and each read
        # port can be a copy of a dual-port block RAM.
        engine_writes = Const(0)
        if self._engine_ports:
            engine_writes = self.engine_wr.issue
            for port in (self.send_rd, self.local_rd):
                # Not transparent: the engine's scoreboard keeps a read from a row whose
                # write is still on its way.
                rd = mem.read_port(domain="sync", transparent_for=())
                m.d.comb += [rd.addr.eq(port.addr), rd.en.eq(port.en), port.data.eq(rd.data)]

        def row(addr):
            return addr[offset_bits:size_bits]

        def in_range(addr):
            if size_bits >= len(addr):
                return Const(1)
            return addr[size_bits:] == 0

        def beat_bytes(size):
            # Number_Bytes = 2 ** size, and its low mask, decoded from the request's AxSIZE
            # as the burst is taken: the address steps then add and mask with flops (a
            # shift by a register on the way to the next address was the 64-bit core's
            # critical path).
            return (Cat(size == i for i in range(8)), Cat(size > i for i in range(8)))

        def next_address(addr, step, low, burst):
            # Ref: A3.4.1 "Address_N = Aligned_Address + (N - 1) x Number_Bytes" for INCR;
            # FIXED repeats the start address.  Aligned + Number_Bytes, step = Number_Bytes
            # and low = Number_Bytes - 1.
            n = min(len(low), len(addr))
            aligned = Cat(addr[:n] & ~low[:n], addr[n:])
            incr = aligned + step
            return Mux(burst == BURST_FIXED, addr, incr[:len(addr)])

        def next_in_range(addr, step, low, burst):
            # in_range(next_address(...)) without the full sum in front of the compare: the
            # high bits of an INCR step's address are addr's plus the carry out of the low
            # size_bits, so they are zero when addr's are and there is no carry, or when
            # addr's are all ones and there is (the 32-bit wrap).  The two compares of addr
            # run beside the low bits' carry chain; through the whole sum, the range check
            # was the 64-bit core's one late pin at seed 3 of a1fd74a (w_low -> the
            # 32-bit carry chain -> w_ok, 15 levels, 6.69 ns).
            n = min(len(low), len(addr))
            if size_bits >= len(addr) or n > size_bits:
                return in_range(next_address(addr, step, low, burst))
            aligned_low = Cat(addr[:n] & ~low[:n], addr[n:size_bits])
            carry = (aligned_low + step)[size_bits]
            high = addr[size_bits:]
            incr_ok = Mux(carry, high == (1 << len(high)) - 1, high == 0)
            return Mux(burst == BURST_FIXED, in_range(addr), incr_ok)

        def burst_error(burst, size):
            # WRAP and the reserved type are not implemented; a size wider than the bus is
            # illegal (A3.4.1).
            return ((burst != BURST_INCR) & (burst != BURST_FIXED)) | (size > offset_bits)

        self._write_channel(m, wr_port, engine_writes, row, in_range, beat_bytes, next_address,
                            next_in_range, burst_error)
        self._read_channel(m, rd_port, row, in_range, beat_bytes, next_address, burst_error)
        return m

    def _address_slice(self, m, channel):
        """AW or AR (``channel`` ``"aw"`` or ``"ar"``) through a two-entry register slice:
        returns its output stream.  Taken straight from the port, the request's decode (the
        burst's count, address and checks, loaded on the take) started at the manager's
        valid: the 64-bit core's late pins ``r_count`` and ``r_final`` at seed 2 of 4c92990
        (7.4 ns) and ``bresp``."""
        axi = self.axi
        fields = ("addr", "size", "burst", "len", "id")
        layout = data.StructLayout({name: len(getattr(axi, channel + name)) for name in fields})
        buffer = SkidBuffer(layout)
        m.submodules[f"{channel}_slice"] = buffer
        m.d.comb += [buffer.i.valid.eq(getattr(axi, channel + "valid")),
                     getattr(axi, channel + "ready").eq(buffer.i.ready)]
        m.d.comb += [getattr(buffer.i.payload, name).eq(getattr(axi, channel + name))
                     for name in fields]
        return buffer.o

    def _write_channel(self, m, wr_port, engine_writes, row, in_range, beat_bytes,
                       next_address, next_in_range, burst_error):
        axi = self.axi
        aw = self._address_slice(m, "aw")
        # ---- Write channel ------------------------------------------------------------------
        w_busy  = Signal()                      # an AW has been taken; its W beats are due
        w_addr  = Signal(self._addr_width)
        # in_range(w_addr) as a flop, loaded with w_addr: the compare of its high bits was in
        # front of the beat's byte enables (the 64-bit core's late pins `h_en`, `s_en` at
        # both seeds of 3089b59, 6.8 to 7.2 ns).  Tests check it against the compare.
        w_ok = Signal(init=1)
        w_step  = Signal(8)                     # Number_Bytes of the burst
        w_low   = Signal(8)                     # Number_Bytes - 1
        w_burst = Signal(2)
        w_bad   = Signal()
        w_count = Signal(8)                     # beats left after the current one

        # A host write beat is registered (`h_*`: its row, data and byte enables, range and
        # burst checks already applied) before it meets the memory, so the write port's
        # address, data and enables come from flops through the one host/engine mux: the
        # beat's range compare and the bank decode were in series (the 64-bit core's critical
        # path, w_addr -> block RAM, 5 levels).  The stage writes in any cycle the engine does
        # not; the burst's response follows its last beat's write, so a read issued after the
        # response sees the burst.
        h_valid = Signal()
        h_last = Signal()
        h_row = Signal(len(wr_port.addr))
        h_data = Signal(len(wr_port.data), reset_less=True)
        h_en = Signal(len(wr_port.en))
        h_write = h_valid & ~engine_writes
        stage_free = ~h_valid | ~engine_writes
        # A second entry (`s_*`) takes a beat that arrives while the stage waits for the
        # engine, so WREADY is a flop (`~s_valid`), not the engine's write: that write,
        # through WREADY and the beat's take into the stage's enables, was the 64-bit core's
        # routed path at seed 1 of dce7502 (the engine's issue -> ... -> h_en, 7.34 ns).
        # The stage loads from the second entry first, so beats keep their order.
        s_valid = Signal()
        s_last = Signal()
        s_row = Signal(len(wr_port.addr))
        s_data = Signal(len(wr_port.data), reset_less=True)
        s_en = Signal(len(wr_port.en))

        # A new burst is taken when none is running, the stage holds none of the last one's
        # beats, and the B slot is (or is becoming) free.
        m.d.comb += aw.ready.eq(~w_busy & ~h_valid & ~s_valid & (~axi.bvalid | axi.bready))
        with m.If(axi.bvalid & axi.bready):
            m.d.sync += axi.bvalid.eq(0)
        with m.If(aw.valid & aw.ready):
            bad = burst_error(aw.payload.burst, aw.payload.size)
            m.d.sync += [
                w_busy.eq(1),
                w_addr.eq(aw.payload.addr),
                w_ok.eq(in_range(aw.payload.addr)),
                Cat(w_step, w_low).eq(Cat(*beat_bytes(aw.payload.size))),
                w_burst.eq(aw.payload.burst),
                w_count.eq(aw.payload.len),
                w_bad.eq(bad),
                axi.bid.eq(aw.payload.id),
                axi.bresp.eq(Mux(bad, BusResponse.SLVERR, BusResponse.OKAY)),
            ]

        # While a burst runs, bvalid is low (it was taken before the burst's AW), so a W beat
        # is taken whenever the stage is free.  The burst ends on the beat count of AWLEN;
        # WLAST is not needed to find it.
        m.d.comb += [
            axi.wready.eq(w_busy & ~s_valid),
            wr_port.addr.eq(h_row),
            wr_port.data.eq(h_data),
        ]
        with m.If(h_write):
            m.d.comb += wr_port.en.eq(h_en)
            with m.If(h_last):
                m.d.sync += axi.bvalid.eq(1)
        if self._engine_ports:
            with m.If(engine_writes):
                m.d.comb += [wr_port.addr.eq(self.engine_wr.addr),
                             wr_port.data.eq(self.engine_wr.data),
                             wr_port.en.eq(self.engine_wr.en)]
        # The beat as it would enter: its payload moves into the stage (or the second entry)
        # whether or not a beat is taken, and only the valid flags see the take.
        w_take = axi.wvalid & axi.wready
        w_next = next_address(w_addr, w_step, w_low, w_burst)
        self.mirrors = [(w_ok, in_range(w_addr))]
        beat = [w_count == 0, row(w_addr), axi.wdata, Mux(w_ok & ~w_bad, axi.wstrb, 0)]
        with m.If(stage_free):
            m.d.sync += [Cat(h_last, h_row, h_data, h_en).eq(
                            Mux(s_valid, Cat(s_last, s_row, s_data, s_en), Cat(*beat))),
                         h_valid.eq(s_valid | w_take), s_valid.eq(0)]
        with m.Elif(~s_valid):
            m.d.sync += [Cat(s_last, s_row, s_data, s_en).eq(Cat(*beat)), s_valid.eq(w_take)]
        with m.If(w_take):
            with m.If(~w_ok & ~w_bad):
                m.d.sync += axi.bresp.eq(BusResponse.DECERR)
            m.d.sync += [
                w_addr.eq(w_next),
                w_ok.eq(next_in_range(w_addr, w_step, w_low, w_burst)),
                w_count.eq(w_count - 1),
            ]
            with m.If(w_count == 0):
                m.d.sync += w_busy.eq(0)

    def _read_channel(self, m, rd_port, row, in_range, beat_bytes, next_address, burst_error):
        """The AXI read channel: an address phase, the memory read, its register, a two-entry
        slice to R."""
        axi = self.axi
        ar = self._address_slice(m, "ar")
        # ---- Read channel -------------------------------------------------------------------
        r_busy  = Signal()                      # an AR has been taken; beats are being issued
        r_addr  = Signal(self._addr_width)
        r_step  = Signal(8)
        r_low   = Signal(8)
        r_burst = Signal(2)
        r_bad   = Signal()
        r_id    = Signal(self._id_width)
        r_count = Signal(8)
        # `r_count == 0` as a flop of its own, set beside the count: the compare sat between
        # the count and AR's ready, which loads the count again (the routed 64-bit core's
        # path r_count -> r_count, 5 levels).
        r_final = Signal()

        # Stage 1: the beat whose row the memory read port holds.  The stage stalls when the
        # buffer after it is full: the port is then not enabled, so it keeps its data.
        p1_valid = Signal()
        p1_zero  = Signal()
        p1_resp  = Signal(2)
        p1_last  = Signal()
        p1_id    = Signal(self._id_width)

        # Stage 2: the block RAM's word in a register of its own, before any logic (the rule
        # of docs/architecture.md: the zeroing of an error beat sat between the read port
        # and the slice's input multiplexer, the routed 64-bit core's seed-3 path at 7acef53).
        p2_valid = Signal()
        p2_zero  = Signal()
        p2_data  = Signal(self._data_width, reset_less=True)   # meaningful only with p2_valid
        p2_resp  = Signal(2)
        p2_last  = Signal()
        p2_id    = Signal(self._id_width)

        # Stage 3: two-entry register slice in front of the R channel.  Its ready comes from
        # a flop, so RREADY reaches no further than the slice.
        r_layout = data.StructLayout({
            "data": self._data_width, "resp": 2, "last": 1, "id": self._id_width,
        })
        m.submodules.r_buffer = r_buffer = SkidBuffer(r_layout)
        advance2 = ~p2_valid | r_buffer.i.ready
        advance = ~p1_valid | advance2
        issue = r_busy & advance
        last_issue = issue & r_final

        m.d.comb += [
            ar.ready.eq(~r_busy | last_issue),
            rd_port.addr.eq(row(r_addr)),
            rd_port.en.eq(issue),
        ]
        with m.If(advance):
            m.d.sync += p1_valid.eq(issue)
        with m.If(advance2):
            m.d.sync += [
                p2_valid.eq(p1_valid),
                p2_zero.eq(p1_zero),
                p2_data.eq(rd_port.data),
                p2_resp.eq(p1_resp),
                p2_last.eq(p1_last),
                p2_id.eq(p1_id),
            ]
        with m.If(issue):
            ok = in_range(r_addr)
            m.d.sync += [
                p1_zero.eq(r_bad | ~ok),
                p1_resp.eq(Mux(r_bad, BusResponse.SLVERR,
                               Mux(ok, BusResponse.OKAY, BusResponse.DECERR))),
                p1_last.eq(r_final),
                p1_id.eq(r_id),
                r_addr.eq(next_address(r_addr, r_step, r_low, r_burst)),
                r_count.eq(r_count - 1),
                r_final.eq(r_count == 1),
            ]
            with m.If(r_final):
                m.d.sync += r_busy.eq(0)
        with m.If(ar.valid & ar.ready):
            request = ar.payload
            m.d.sync += [
                r_busy.eq(1),
                r_addr.eq(request.addr),
                Cat(r_step, r_low).eq(Cat(*beat_bytes(request.size))),
                r_burst.eq(request.burst),
                r_count.eq(request.len),
                r_final.eq(request.len == 0),
                r_bad.eq(burst_error(request.burst, request.size)),
                r_id.eq(request.id),
            ]

        m.d.comb += [
            r_buffer.i.valid.eq(p2_valid),
            r_buffer.i.payload.data.eq(Mux(p2_zero, 0, p2_data)),
            r_buffer.i.payload.resp.eq(p2_resp),
            r_buffer.i.payload.last.eq(p2_last),
            r_buffer.i.payload.id.eq(p2_id),
            axi.rvalid.eq(r_buffer.o.valid),
            axi.rdata.eq(r_buffer.o.payload.data),
            axi.rresp.eq(r_buffer.o.payload.resp),
            axi.rlast.eq(r_buffer.o.payload.last),
            axi.rid.eq(r_buffer.o.payload.id),
            r_buffer.o.ready.eq(axi.rready),
        ]
