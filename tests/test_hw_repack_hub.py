"""The repack hub on its packet port (Amaranth simulator): what it must never hold up."""

from amaranth.sim import Simulator

from nicoll.hw.packet import PacketKind, header_beats, packet_header_layout
from nicoll.hw.repack import OrderList, RepackError
from nicoll.hw.repack_hub import RepackHub
from nicoll.sim.testbench import PERIOD, watchdog

WIDTH = 64


def _registration(rank):
    header = packet_header_layout().const({"kind": PacketKind.REPACK_REGISTER, "src": rank,
                                           "dst": 0})
    bits = header.as_value().value
    beats = header_beats(WIDTH)
    return [(bits >> (k * WIDTH)) & ((1 << WIDTH) - 1) for k in range(beats)]


def test_registrations_are_taken_while_notices_cannot_leave():
    """Six ranks in two subgroups of three.  The first sub-matrix starts as soon as ranks
    0..2 have registered, and its SEND notices cannot leave (tx held).  The later ranks'
    registrations must still be taken at once: on a NIC a notice for the hub's own rank comes
    back through this port, so a registration held here would deadlock the exchange."""
    hub = RepackHub(data_width=WIDTH, max_ranks=8, units=1, max_group=4, capacity_bytes=512)
    groups = [(0, 1, 2), (3, 4, 5)]
    stalls = []
    notices = []

    async def bench(ctx):
        ctx.set(hub.tx.ready, 0)
        for which in (OrderList.SRC, OrderList.DST):
            index = 0
            for group in groups:
                for k, rank in enumerate(group):
                    ctx.set(hub.order.payload, {"list": which, "index": index, "rank": rank,
                                                "end": int(k == len(group) - 1)})
                    ctx.set(hub.order.valid, 1)
                    await ctx.tick().until(hub.order.ready)
                    index += 1
        ctx.set(hub.order.valid, 0)
        ctx.set(hub.start.payload, {"n": 6, "budget": 64, "timeout": 5000})
        ctx.set(hub.start.valid, 1)
        await ctx.tick().until(hub.start.ready)
        ctx.set(hub.start.valid, 0)
        for rank in range(6):
            beats = _registration(rank)
            for k, data in enumerate(beats):
                ctx.set(hub.rx.payload, {"data": data, "keep": 0xFF,
                                         "last": k == len(beats) - 1, "dest": 0,
                                         "control": 1})
                ctx.set(hub.rx.valid, 1)
                waited = 0
                while not ctx.get(hub.rx.ready):
                    await ctx.tick()
                    waited += 1
                    if waited > 50:
                        stalls.append(rank)
                        return
                await ctx.tick()
            ctx.set(hub.rx.valid, 0)
            for _ in range(30):         # the tree scans, pairs and tries to send
                await ctx.tick()
        # Now let the notices out: the first sub-matrix's SENDs go to ranks 0..2 (the one
        # unit takes no other sub-matrix before that one's messages, which never come here).
        ctx.set(hub.tx.ready, 1)
        for _ in range(400):
            if ctx.get(hub.tx.valid) and ctx.get(hub.tx.payload.last):
                notices.append(ctx.get(hub.tx.payload.dest))
            await ctx.tick()
        assert ctx.get(hub.status) == RepackError.OK

    sim = Simulator(hub)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(20_000), background=True)
    sim.add_testbench(bench)
    sim.run()
    assert stalls == [], f"the hub held the registration of rank {stalls} in its port"
    assert notices == [0, 1, 2], notices
