# amaranth: UnusedElaboratable=no
"""BarrierUnit tests' shared pieces (seed 004): the unit's documented latencies, notices as
field dicts, and a single unit with its cycle counter, configured and started from a
testbench.
"""

from amaranth.hdl import Elaboratable, Module, Signal

from nicoll.hw.barrier import BarrierUnit, BARRIER_ERROR_LAYOUT, BarrierNoticeKind


#: Cycles a notice spends in the test router at least: taken at one edge, offered the next
#: cycle, taken by the receiver at the edge after.  A wire would be 0.
LINK = 1
#: The unit's own forwarding latency, as documented in nicoll.hw.barrier: it registers a
#: notice at its boundary as it takes it, decodes it in the next cycle and acts on it in the
#: one after (`ACT` cycles after the take), then sends.
UNIT = 4
ACT = 2
#: The host's done strobe skips the boundary register: it is decoded in the cycle it comes
#: and acts in the next.
DONE_ACT = 1
HOP = LINK + UNIT

SEQ_MASK = 0xffff


def notice_dict(payload):
    return {"kind": BarrierNoticeKind(payload.kind), "seq": payload.seq, "src": payload.src,
            "dst": payload.dst, "subject": payload.subject, "estimate": payload.estimate}


class Single(Elaboratable):
    def __init__(self, max_nodes=8, max_children=2):
        self.unit = BarrierUnit(max_nodes, max_children)
        self.now = Signal(64)

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        m.d.sync += self.now.eq(self.now + 1)
        m.d.comb += self.unit.now.eq(self.now)
        return m


async def setup_node(ctx, u, *, node, parent, children, routes):
    ctx.set(u.node_id, node)
    ctx.set(u.has_parent, parent is not None)
    ctx.set(u.parent_id, parent or 0)
    ids = [0] * u.max_children
    for slot, ch in enumerate(children):
        ids[slot] = ch
    ctx.set(u.child_id, ids)
    ctx.set(u.child_valid, (1 << len(children)) - 1)
    for addr, value in routes.items():
        ctx.set(u.route_we, 1)
        ctx.set(u.route_addr, addr)
        ctx.set(u.route_data, value)
        await ctx.tick()
    ctx.set(u.route_we, 0)
    await ctx.tick()                # the last write lands in the table,
    await ctx.tick()                # then in the routed-id vectors
    ctx.set(u.start, 1)
    await ctx.tick()
    ctx.set(u.start, 0)
    await ctx.tick()


def error_bits(ctx, u):
    errors = ctx.get(u.errors)
    return {name for name in dict(BARRIER_ERROR_LAYOUT) if getattr(errors, name)}


# Node 1 of BarrierTree.binary(7): parent 0, children 3 (slot 0) and 4 (slot 1).
GOOD = {"node": 1, "parent": 0, "children": [3, 4], "routes": {3: 1, 4: 2}}


async def start_good_node(ctx, u):
    """Configure ``u`` as GOOD with barrier 0 started, tx always ready, and wait out the tree
    checks' two register stages."""
    await setup_node(ctx, u, **GOOD)
    ctx.set(u.tx.ready, 1)
    await ctx.tick().repeat(2)


def notice(kind, seq, src, dst, subject=0, estimate=0):
    return {"kind": kind, "seq": seq, "src": src, "dst": dst, "subject": subject,
            "estimate": estimate}


async def send_rx(ctx, u, x):
    ctx.set(u.rx.payload, x)
    ctx.set(u.rx.valid, 1)
    await ctx.tick()
    ctx.set(u.rx.valid, 0)
