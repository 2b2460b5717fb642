# Ref: seed 003 (CN111614581, Mellanox), steps 7.1-7.2: each rank registers; a subgroup is
#      ready when all its members have.
"""The repack control tree's registrations: :class:`Registrations`, a three-stage pipeline of
its own beside the state machine.
"""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .control_states import check_tree, in_group, state_members
from .formats import RANK_WIDTH, REGISTRATION_LAYOUT, RepackError


__all__ = ["Registrations"]


class Registrations(wiring.Component):
    """Registrations, a three-stage pipeline of its own beside the FSM (it never waits):
    take (and compare the rank with n); read and set the rank's `registered` bit and read
    its groups; count the rank off in both groups.  A group whose count reaches 0 is
    ready for the scan.  Each stage writes what the next registration's same stage reads
    a cycle later, so back-to-back registrations of one rank or group see each other.

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.

    Members
    -------
    reg : ``In(stream.Signature(REGISTRATION_LAYOUT))``
        Registrations (arrivals), taken while an exchange runs.
    running_q, all_done : ``In(1)``
        An exchange runs; every sub-matrix is done.
    n : ``In(16)``
        The exchange's number of ranks.
    st_clear, i : ``In(1)``, ``In(range(max_ranks + 1))``
        CLEAR's flag and index (CLEAR clears the `registered` bits).
    regd_r_data, sgrp_r_data, dgrp_r_data : ``In``
        The rank's `registered` bit and groups.
    regd_r_addr, sgrp_r_addr, dgrp_r_addr, regd_w_en, regd_w_addr, regd_w_data : ``Out``
        Their ports (the `registered` table is set here and cleared in CLEAR).
    r1_valid, r1_sgrp, r1_dgrp : ``Out``
        The third stage: the groups to count down (their `left` tables are written by
        :class:`~.control_setup.ControlSetup`), read at ``sleft_r_addr`` and ``dleft_r_addr``.
    rerr, rerr_code : ``Out(1)``, ``Out(RepackError)``
        A registration's error (OUTSIDE_GROUP, DUPLICATE) in this cycle.
    """

    def __init__(self, max_ranks):
        check_tree(max_ranks)
        R, RB = max_ranks, (max_ranks - 1).bit_length()
        self._max_ranks = R
        super().__init__({
            "reg": In(stream.Signature(REGISTRATION_LAYOUT)),
            "running_q": In(1), "all_done": In(1), "n": In(16),
            **state_members("CLEAR"), "i": In(range(R + 1)),
            "regd_r_data": In(1), "sgrp_r_data": In(RB), "dgrp_r_data": In(RB),
            "regd_r_addr": Out(RB), "sgrp_r_addr": Out(RB), "dgrp_r_addr": Out(RB),
            "regd_w_en": Out(1), "regd_w_addr": Out(RB), "regd_w_data": Out(1),
            "r1_valid": Out(1), "r1_sgrp": Out(RB), "r1_dgrp": Out(RB),
            "sleft_r_addr": Out(RB), "dleft_r_addr": Out(RB),
            "rerr": Out(1), "rerr_code": Out(RepackError),
        })

    def elaborate(self, platform):
        m = Module()
        reg = self.reg
        # Taken while an exchange runs and not every sub-matrix is done (then every rank has
        # registered; later ones are left for the next exchange).
        m.d.comb += reg.ready.eq(self.running_q & ~self.all_done)
        r0_valid, r0_ok = Signal(), Signal()
        r0_rank = Signal(RANK_WIDTH)
        m.d.sync += [r0_valid.eq(reg.valid & reg.ready), r0_rank.eq(reg.payload.rank),
                     r0_ok.eq(in_group(reg.payload.rank, self.n, self._max_ranks))]

        r1_valid = self.r1_valid
        r1_sgrp, r1_dgrp = self.r1_sgrp, self.r1_dgrp
        m.d.comb += [self.regd_r_addr.eq(r0_rank), self.sgrp_r_addr.eq(r0_rank),
                     self.dgrp_r_addr.eq(r0_rank)]
        m.d.sync += [r1_valid.eq(0), r1_sgrp.eq(self.sgrp_r_data), r1_dgrp.eq(self.dgrp_r_data)]
        with m.If(r0_valid):
            # Ref: seed 003, steps 7.1-7.2: each rank registers; a subgroup is ready when all
            # its members have.
            with m.If(~r0_ok):
                m.d.comb += [self.rerr.eq(1), self.rerr_code.eq(RepackError.OUTSIDE_GROUP)]
            with m.Elif(self.regd_r_data):
                m.d.comb += [self.rerr.eq(1), self.rerr_code.eq(RepackError.DUPLICATE)]
            with m.Else():
                m.d.comb += self.regd_w_en.eq(1)
                m.d.sync += r1_valid.eq(1)

        m.d.comb += [self.sleft_r_addr.eq(r1_sgrp), self.dleft_r_addr.eq(r1_dgrp)]
        # The `registered` bits: set here, cleared in CLEAR.
        m.d.comb += [self.regd_w_addr.eq(Mux(self.st_clear, self.i, r0_rank)),
                     self.regd_w_data.eq(~self.st_clear)]
        with m.If(self.st_clear):
            m.d.comb += self.regd_w_en.eq(1)
        return m
