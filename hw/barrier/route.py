"""The barrier unit's route table: which child slot's subtree holds each node id, the subtree
sizes counted as entries are written, N of the subtree, and the table as vectors of flops
(each slot's routed ids, the ids routed anywhere, the subtree's members)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .gates import below, check_int, index_bits
from .layouts import MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT
from ..net.packet import DEST_WIDTH


__all__ = ["RouteTable"]


class RouteTable(wiring.Component):
    """Route table and subtree sizes of one barrier unit.

    Parameters
    ----------
    max_nodes : int
        Node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    route_we : ``In(1)``; route_addr : ``In(16)``; route_data : ``In(route_width)``
        The table's write port (0: the id is not below this node; j + 1: it is in the subtree
        of child slot j).  A write lands three clock edges after the cycle it is made in.
    route_rdata : ``Out(route_width)``
        The entry at ``route_addr``.
    route_clear : ``In(1)``
        Empties the table (and the sizes), landing as a write does.
    child_valid : ``In(max_children)``
        Which child slots hold a child.
    node_id : ``In(16)``
        This node's id, registered (the unit's ``node_id_q``).
    write_bad : ``Out(1)``
        A write in this cycle with an address >= max_nodes or an entry > max_children.
    size : ``Out(ArrayLayout(range(max_nodes + 1), max_children))``
        Ids routed to each slot.
    total : ``Out(16)``
        N of this subtree (the valid slots' sizes and this node), two register stages behind
        the sizes.
    routed_to : ``Out(ArrayLayout(max_nodes, max_children))``; routed_any : ``Out(max_nodes)``
        Each slot's routed ids as a bit vector, and the ids routed anywhere: flops, a cycle
        behind the table.
    member : ``Out(max_nodes)``
        The members of this subtree (routed below, or this node itself): flops.
    """

    def __init__(self, max_nodes, max_children):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_nodes = max_nodes
        self._max_children = max_children
        self._route_width = bits_for(max_children)
        super().__init__({
            "route_we": In(1),
            "route_addr": In(DEST_WIDTH),
            "route_data": In(self._route_width),
            "route_rdata": Out(self._route_width),
            "route_clear": In(1),
            "child_valid": In(max_children),
            "node_id": In(DEST_WIDTH),
            "write_bad": Out(1),
            "size": Out(data.ArrayLayout(range(max_nodes + 1), max_children)),
            "total": Out(16),
            "routed_to": Out(data.ArrayLayout(max_nodes, max_children)),
            "routed_any": Out(max_nodes),
            "member": Out(max_nodes),
        })

    @property
    def route_width(self):
        """Bits of one route entry: 0 = not below this node, j + 1 = under child slot j."""
        return self._route_width

    def elaborate(self, platform):
        m = Module()
        n, k, rw = self._max_nodes, self._max_children, self._route_width
        ibits, lo = index_bits(n)
        # Flops rather than a memory: the local tree checks read it at several ids at once.
        route = Signal(n * rw)

        def route_at(x):
            return Mux(below(x, n), route.word_select(x[:ibits], rw), 0)

        # size[j]: ids routed to slot j, kept up to date at every write (no re-count).  A
        # write is registered first and lands two cycles later: the entry it replaces is
        # read from flops.
        size = [Signal(range(n + 1), name=f"size_{j}") for j in range(k)]
        m.d.comb += [self.size[j].eq(size[j]) for j in range(k)]
        m.d.comb += self.route_rdata.eq(route_at(self.route_addr))
        write_ok = below(self.route_addr, n) & (self.route_data <= k)
        m.d.comb += self.write_bad.eq(self.route_we & ~self.route_clear & ~write_ok)
        w_clear, w_we = Signal(), Signal()
        w_addr, w_data = Signal(ibits), Signal(rw)
        m.d.sync += [w_clear.eq(self.route_clear), w_we.eq(self.route_we & write_ok),
                     w_addr.eq(self.route_addr[:ibits]), w_data.eq(self.route_data)]
        # A second stage registers the entry the write replaces and which counts go up and
        # down, as one-hot slot vectors; it then writes the entry and steps the counts.  The
        # replaced entry is read from flops as the write enters the first stage (`w_old`,
        # with the write the second stage makes in that cycle forwarded), and the write the
        # second stage makes in the next cycle is forwarded by a flag compared then too
        # (`w_same`): the n:1 read and the address compare are not in the cycle that
        # decodes the entry (a 64-id table's read was the unit's critical path).
        x_clear, x_we = Signal(), Signal()
        x_addr, x_data = Signal(ibits), Signal(rw)
        x_inc, x_dec = Signal(k), Signal(k)
        # The read is split over the two stages like the notices' lookups (NoticeDecoder's
        # boundary): the first registers the part of the table the address's high bits
        # select (2**lo entries, the write in flight forwarded into it), the second selects
        # the entry by the low bits.  The whole 64:1 read from the port into the first stage
        # was a late pin of the 64-node unit alone at seed 1 of the thirty-second pass
        # (route_addr -> the read -> w_old, 5 levels, 5.26 ns).
        w_part, w_same = Signal(rw << lo), Signal()
        in_addr = self.route_addr[:ibits]
        padded = Cat(route, Const(0, ((1 << ibits) - n) * rw))
        part = padded.word_select(in_addr[lo:], rw << lo) if ibits > lo else padded
        hi_same = x_we & (x_addr[lo:] == in_addr[lo:])
        m.d.sync += [w_part.word_select(e, rw).eq(
                         Mux(x_clear, 0, Mux(hi_same & (x_addr[:lo] == e), x_data,
                                             part.word_select(e, rw))))
                     for e in range(1 << lo)]
        m.d.sync += w_same.eq(w_we & ~w_clear & (w_addr == in_addr))
        old = Signal(rw)
        m.d.comb += old.eq(Mux(x_clear, 0, Mux(w_same, x_data,
                                               w_part.word_select(w_addr[:lo], rw))))
        m.d.sync += [x_clear.eq(w_clear), x_we.eq(w_we & ~w_clear), x_addr.eq(w_addr),
                     x_data.eq(w_data),
                     x_inc.eq(Cat(w_data == j + 1 for j in range(k))),
                     x_dec.eq(Cat(old == j + 1 for j in range(k)))]
        with m.If(x_clear):
            m.d.sync += [route.eq(0), *[size[j].eq(0) for j in range(k)]]
        with m.Elif(x_we):
            m.d.sync += route.word_select(x_addr, rw).eq(x_data)
            for j in range(k):
                inc, dec = x_inc[j], x_dec[j]
                m.d.sync += size[j].eq(Mux(inc & ~dec, size[j] + 1,
                                           Mux(dec & ~inc, size[j] - 1, size[j])))

        # N of this subtree (the whole tree at the root): a balanced adder tree in two
        # register stages, the pairs' sums and then the rest (one stage of eight counts'
        # tree was the 8-node unit's critical path).  The tree is static while barriers run.
        def tree(terms):
            while len(terms) > 1:
                terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                         for i in range(0, len(terms), 2)]
            return terms[0]
        terms = [Mux(self.child_valid[j], size[j], 0) for j in range(k)] + [Const(1)]
        pairs = [Signal(range(2 * n + 2), name=f"total_part_{i}")
                 for i in range(0, len(terms), 2)]
        m.d.sync += [p.eq(tree(terms[2 * i:2 * i + 2])) for i, p in enumerate(pairs)]
        m.d.sync += self.total.eq(tree(list(pairs)))

        # Each slot's routed ids as a vector of flops, and the ids routed anywhere: the
        # notices' decode (NoticeDecoder) and the local tree checks select one bit of these
        # where they would select a whole entry of the table and compare it.  They follow a
        # table write a cycle after it lands: writes are configuration, made while no barrier
        # of the tree runs.
        routed_to = [Signal(n, name=f"routed_to_{j}") for j in range(k)]
        m.d.sync += [routed_to[j].eq(Cat(route.word_select(x, rw) == j + 1 for x in range(n)))
                     for j in range(k)]
        m.d.comb += [self.routed_to[j].eq(routed_to[j]) for j in range(k)]
        m.d.sync += self.routed_any.eq(Cat(route.word_select(x, rw) != 0 for x in range(n)))

        # Members of this subtree, for the abort log: routed below, or this node itself.
        # Flops, as the vectors above (the configuration is static while barriers run): the
        # id compares and the entries' tests in front of the log's write data were the
        # 64-node unit's latest pins at seed 2 of 618a409 on the 85F (node_id_q -> the
        # log's distributed RAM, 5.89 ns against 5 ns).
        m.d.sync += self.member.eq(Cat((route.word_select(i, rw) != 0) | (self.node_id == i)
                                       for i in range(n)))
        return m
