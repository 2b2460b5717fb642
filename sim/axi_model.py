# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E): A3.2 (handshake), A3.4 (bursts,
#      4 KiB boundary, strobes), B1 (AXI4-Lite).
"""AXI4 / AXI4-Lite manager models for Amaranth simulator testbenches.

Each function drives one interface of a design under simulation from an async testbench
(``ctx`` is the :class:`amaranth.sim.SimulatorContext`) and returns when its transaction has
completed.  Cycles pass only through ``await ctx.tick()``; every channel handshake is judged
on the values sampled at the clock edge, so the models stay correct under any ready/valid
timing of the subordinate.  They keep the number of ticks small: address and data channels
are driven together, and a long transfer issues its bursts back to back.

``bus`` is the interface object of the port, e.g. ``dut.s_axil`` or ``dut.bus``, with members
named as :class:`nicoll.hw.bus.axi.AXI4LiteSignature` / :class:`nicoll.hw.bus.axi.AXI4Signature`.
A response is an AXI response code (:class:`nicoll.hw.regmap.BusResponse` values); functions that
move several bursts return the worst one (the largest code).
"""

__all__ = ["axil_read", "axil_write", "axi_write", "axi_read", "axi_bursts"]


# AxBURST INCR; Ref: IHI0022E, A3.4.1, Table A3-3.
_BURST_INCR = 0b01
# Ref: IHI0022E, A3.4.1: a burst must not cross a 4 KiB boundary, and an INCR burst has at
# most 256 beats.
_BOUNDARY = 4096
_MAX_BEATS = 256


async def axil_read(ctx, bus, addr):
    """Read one 32-bit word; returns ``(data, resp)``."""
    ctx.set(bus.araddr, addr)
    ctx.set(bus.arvalid, 1)
    while True:
        *_, arready = await ctx.tick().sample(bus.arready)
        if arready:
            break
    ctx.set(bus.arvalid, 0)
    # RREADY goes up only now, so a response can only be this read's.
    ctx.set(bus.rready, 1)
    while True:
        *_, rvalid, rdata, rresp = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp)
        if rvalid:
            break
    ctx.set(bus.rready, 0)
    return rdata, rresp


async def axil_write(ctx, bus, addr, data, strb=0xF):
    """Write one 32-bit word with byte strobes ``strb``; returns the response code."""
    ctx.set(bus.awaddr, addr)
    ctx.set(bus.awvalid, 1)
    ctx.set(bus.wdata, data)
    ctx.set(bus.wstrb, strb)
    ctx.set(bus.wvalid, 1)
    aw_pending = w_pending = True
    while aw_pending or w_pending:
        *_, awready, wready = await ctx.tick().sample(bus.awready, bus.wready)
        if aw_pending and awready:
            aw_pending = False
            ctx.set(bus.awvalid, 0)
        if w_pending and wready:
            w_pending = False
            ctx.set(bus.wvalid, 0)
    ctx.set(bus.bready, 1)
    while True:
        *_, bvalid, bresp = await ctx.tick().sample(bus.bvalid, bus.bresp)
        if bvalid:
            break
    ctx.set(bus.bready, 0)
    return bresp


def axi_bursts(addr, length, beat_bytes):
    """Split ``length`` bytes at ``addr`` into INCR bursts of full-width beats.

    Returns a list of ``(start_address, beats)``; ``beats`` is a list of
    ``(data_offset, lane, count)``: ``count`` bytes starting at ``data_offset`` of the buffer
    travel in byte lanes ``lane .. lane+count-1`` of that beat.  No burst crosses a 4 KiB
    boundary or exceeds 256 beats.
    """
    if addr < 0 or length < 0:
        raise ValueError(f"Address and length must be non-negative, not {addr!r}, {length!r}")
    bursts = []
    end = addr + length
    start = addr
    while start < end:
        row = start - start % beat_bytes
        limit = min(end, (start // _BOUNDARY + 1) * _BOUNDARY, row + _MAX_BEATS * beat_bytes)
        beats = []
        pos = start
        while pos < limit:
            lane = pos % beat_bytes
            count = min(beat_bytes - lane, limit - pos)
            beats.append((pos - addr, lane, count))
            pos += count
        bursts.append((start, beats))
        start = limit
    return bursts


def _beat_size(bus):
    beat_bytes = len(bus.wdata if hasattr(bus, "wdata") else bus.rdata) // 8
    return beat_bytes, beat_bytes.bit_length() - 1


def _drive_address(ctx, bus, ch, start, beats, size):
    ctx.set(getattr(bus, f"{ch}addr"), start)
    ctx.set(getattr(bus, f"{ch}len"), len(beats) - 1)
    ctx.set(getattr(bus, f"{ch}size"), size)
    ctx.set(getattr(bus, f"{ch}burst"), _BURST_INCR)
    ctx.set(getattr(bus, f"{ch}valid"), 1)


async def axi_write(ctx, bus, addr, data):
    """Write the bytes ``data`` at byte address ``addr``; returns the worst response code."""
    data = bytes(data)
    beat_bytes, size = _beat_size(bus)
    bursts = axi_bursts(addr, len(data), beat_bytes)
    if not bursts:
        return 0
    # Every W beat in order, with its burst's last flag.
    w_beats = []
    for _start, beats in bursts:
        for index, (offset, lane, count) in enumerate(beats):
            value = int.from_bytes(data[offset:offset + count], "little") << (8 * lane)
            strb = ((1 << count) - 1) << lane
            w_beats.append((value, strb, index == len(beats) - 1))

    def drive_w(beat):
        value, strb, last = beat
        ctx.set(bus.wdata, value)
        ctx.set(bus.wstrb, strb)
        ctx.set(bus.wlast, last)

    ctx.set(bus.awid, 0)
    _drive_address(ctx, bus, "aw", *bursts[0], size)
    drive_w(w_beats[0])
    ctx.set(bus.wvalid, 1)
    ctx.set(bus.bready, 1)
    aw_next = w_next = responses = 0
    worst = 0
    while responses < len(bursts):
        *_, awready, wready, bvalid, bresp = await ctx.tick().sample(
            bus.awready, bus.wready, bus.bvalid, bus.bresp)
        if aw_next < len(bursts) and awready:
            aw_next += 1
            if aw_next < len(bursts):
                _drive_address(ctx, bus, "aw", *bursts[aw_next], size)
            else:
                ctx.set(bus.awvalid, 0)
        if w_next < len(w_beats) and wready:
            w_next += 1
            if w_next < len(w_beats):
                drive_w(w_beats[w_next])
            else:
                ctx.set(bus.wvalid, 0)
        if bvalid:
            responses += 1
            worst = max(worst, bresp)
    ctx.set(bus.bready, 0)
    return worst


async def axi_read(ctx, bus, addr, length):
    """Read ``length`` bytes at byte address ``addr``; returns ``(bytes, worst response)``."""
    beat_bytes, size = _beat_size(bus)
    bursts = axi_bursts(addr, length, beat_bytes)
    out = bytearray(length)
    if not bursts:
        return bytes(out), 0
    r_beats = [beat for _start, beats in bursts for beat in beats]
    ctx.set(bus.arid, 0)
    _drive_address(ctx, bus, "ar", *bursts[0], size)
    ctx.set(bus.rready, 1)
    ar_next = r_next = 0
    worst = 0
    while r_next < len(r_beats):
        *_, arready, rvalid, rdata, rresp = await ctx.tick().sample(
            bus.arready, bus.rvalid, bus.rdata, bus.rresp)
        if ar_next < len(bursts) and arready:
            ar_next += 1
            if ar_next < len(bursts):
                _drive_address(ctx, bus, "ar", *bursts[ar_next], size)
            else:
                ctx.set(bus.arvalid, 0)
        if rvalid:
            offset, lane, count = r_beats[r_next]
            out[offset:offset + count] = (rdata >> (8 * lane)).to_bytes(
                beat_bytes, "little")[:count]
            worst = max(worst, rresp)
            r_next += 1
    ctx.set(bus.rready, 0)
    return bytes(out), worst
