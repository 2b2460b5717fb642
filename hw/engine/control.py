# Ref: seed 002 (ICT/CAS): the engine runs a rank's schedule of step commands.
# Ref: seed 001, S23: a barrier between batches; seed 003, step 7.6: an aggregate's end.
"""The engine's control: arm and start, then fetch, load, decode and dispatch each queued
command in turn, wait at a barrier or through an aggregate command, and finish when the last
command's data is sent and taken."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .command import COMMAND_LAYOUT, StepAction
from ..lib.deadline import Deadline

__all__ = ["EngineControl"]


class EngineControl(wiring.Component):
    """The engine's state machine and the run's registers (STEP, START_AT, the stamps).

    Members
    -------
    clear, go, arm : ``In(1)``
        CONTROL's strobes.
    start_at, now : ``In(64)``
        START_AT and the cycle counter.
    error : ``In(1)``
        An error stands (a flop): a run stops, a start does nothing but disarm.
    queued : ``In(16)``; queue_empty, queue_checking : ``In(1)``; queue_data : ``In(COMMAND_LAYOUT)``
        The command queue: commands held, none, a push in its checks; the command at
        ``queue_addr`` (a registered read).
    queue_addr : ``Out(16)``
    tx_busy, rx_busy, writes_empty : ``In(1)``
        The halves are busy; no write is in flight.
    agg_sends, agg_finals : ``In(16)``; agg_in_flight, agg_started, agg_done_seen : ``In(1)``
        The aggregate sender's counts and step in flight, an aggregate packet's receive
        starting, the hub's DONE notice (a strobe).
    sender_busy, tx_valid : ``In(1)``
        A clear-to-send or registration is offered; the engine's packet output is valid.
    reg_sent : ``In(1)``
        The registration (or a clear-to-send) left.
    barrier_seq : ``In(16)``
        The barrier unit's current barrier number.
    command : ``Out(COMMAND_LAYOUT)``
        The command being run (loaded after its FETCH; held until the next).
    running, armed, done, loading, in_aggregate : ``Out(1)``
        A run is under way; START_AT is armed; the run is done; a command is being loaded or
        decoded; an aggregate command runs (a flop).
    restart : ``Out(1)``
        A start from IDLE or DONE (the counters clear).
    tx_start, rx_start : ``Out(1)``
        The command's send or receive starts (flops, a cycle after its dispatch).
    reg_pending : ``Out(1)``
        An aggregate command's registration is due.
    barrier_done : ``Out(1)``
        A barrier command is reached.
    step : ``Out(16)``; started_at, finished_at : ``Out(64)``
    """

    def __init__(self):
        super().__init__({
            "clear": In(1), "go": In(1), "arm": In(1), "start_at": In(64), "now": In(64),
            "error": In(1),
            "queued": In(16), "queue_empty": In(1), "queue_checking": In(1),
            "queue_data": In(COMMAND_LAYOUT), "queue_addr": Out(16),
            "tx_busy": In(1), "rx_busy": In(1), "writes_empty": In(1),
            "agg_sends": In(16), "agg_finals": In(16), "agg_in_flight": In(1),
            "agg_started": In(1), "agg_done_seen": In(1),
            "sender_busy": In(1), "tx_valid": In(1), "reg_sent": In(1),
            "barrier_seq": In(16),
            "command": Out(COMMAND_LAYOUT),
            "running": Out(1), "armed": Out(1), "done": Out(1), "loading": Out(1),
            "in_aggregate": Out(1), "restart": Out(1),
            "tx_start": Out(1), "rx_start": Out(1), "reg_pending": Out(1),
            "barrier_done": Out(1),
            "step": Out(16), "started_at": Out(64), "finished_at": Out(64),
        })

    def elaborate(self, platform):
        m = Module()
        state = Signal(range(10))
        names = ("IDLE", "FETCH", "LOAD", "DISPATCH", "BARRIER", "FINISH", "DONE", "STOPPED",
                 "AGGREGATE", "DECODE")
        s = dict(zip(names, range(10)))
        m.d.comb += [self.running.eq((state != s["IDLE"]) & (state != s["DONE"])
                                     & (state != s["STOPPED"])),
                     self.loading.eq((state == s["LOAD"]) | (state == s["DECODE"]))]
        p = self._waits(m, state, s)
        start = self._start(m, state, s, p)
        self._state_machine(m, state, s, p, start)
        return m

    def _waits(self, m, state, s):
        """What DISPATCH, AGGREGATE and FINISH wait for, registered."""
        cur = self.command
        # The command waits for every earlier write (cur is a flop, loaded in LOAD).
        drain = (cur.fence | cur.barrier | cur.aggregate
                 | (cur.has_recv & (cur.action == StepAction.COPY)))
        tx_busy, rx_busy = self.tx_busy, self.rx_busy
        agg_done = Signal()             # the hub's DONE heard
        barrier_moved = self._barrier_wait(m, state == s["DISPATCH"], state == s["BARRIER"])
        # What DISPATCH, AGGREGATE and FINISH wait for, likewise registered from their own
        # state's cycles (and DECODE's, before DISPATCH), so the decisions read one flop each
        # and not a tree over the transmit arbiter, the scoreboard and 16-bit counts.  A flag
        # is a cycle old when read; each is safe because what it waits on, once true in these
        # states, stays true until the state acts: only DISPATCH starts a send or a receive
        # (tx_busy rises two cycles later, before the next DECODE), rows enter the write
        # pipeline only while rx_busy, and an aggregate's counts only fall.
        dispatch_ok = Signal()
        aggregate_ok = Signal()
        # An aggregate packet's receive starts a cycle after the parser's decision (a
        # strobe, `agg_started`): until then rx_busy is low, so the AGGREGATE check counts it.
        finish_ok = Signal()
        m.d.sync += [
            dispatch_ok.eq(((state == s["DECODE"]) | (state == s["DISPATCH"])) & ~tx_busy
                           & ~rx_busy & (~drain | self.writes_empty)),
            aggregate_ok.eq((state == s["AGGREGATE"]) & (self.agg_sends == 0)
                            & (self.agg_finals == 0) & agg_done & ~tx_busy & ~rx_busy
                            & ~self.agg_started & ~self.reg_pending & ~self.agg_in_flight),
            finish_ok.eq((state == s["FINISH"]) & ~tx_busy & ~rx_busy & ~self.tx_start
                         & ~self.rx_start & self.writes_empty & ~self.sender_busy
                         & ~self.tx_valid),
        ]
        return {"agg_done": agg_done, "barrier_moved": barrier_moved,
                "dispatch_ok": dispatch_ok, "aggregate_ok": aggregate_ok,
                "finish_ok": finish_ok}

    def _start(self, m, state, s, p):
        """GO, or START_AT reached while armed; returns the start."""
        armed = Signal()
        m.d.comb += self.armed.eq(armed)
        p["armed"] = armed
        # A start waits while a push is in its checks (pushed, checked: flops), so it acts
        # after every push strobed before it: a GO strobed meanwhile is kept (go_wait), an
        # armed start stays armed.
        push_in_flight = self.queue_checking
        go_wait = Signal()
        with m.If(self.clear | ~push_in_flight):
            m.d.sync += go_wait.eq(0)
        with m.Elif(self.go):
            m.d.sync += go_wait.eq(1)
        with m.If(self.clear):
            m.d.sync += armed.eq(0)
        with m.Elif(self.arm & ~self.running):      # an arm while running is ignored
            m.d.sync += armed.eq(1)
        # START_AT reached, from a flop (a 64-bit compare in front of the state machine).
        m.submodules.start_deadline = start_deadline = Deadline()
        m.d.comb += [start_deadline.now.eq(self.now), start_deadline.at.eq(self.start_at)]
        start = ((self.go | go_wait | (armed & start_deadline.reached)) & ~push_in_flight
                 & ~self.clear)
        m.d.comb += self.restart.eq(start & ((state == s["IDLE"]) | (state == s["DONE"])))
        return start

    def _state_machine(self, m, state, s, p, start):
        """The states and their moves."""
        IDLE, FETCH, LOAD, DISPATCH, BARRIER, FINISH, DONE, STOPPED, AGGREGATE, DECODE = (
            s[name] for name in ("IDLE", "FETCH", "LOAD", "DISPATCH", "BARRIER", "FINISH",
                                 "DONE", "STOPPED", "AGGREGATE", "DECODE"))
        cur, armed, agg_done = self.command, p["armed"], p["agg_done"]
        tx_start, rx_start, reg_pending = self.tx_start, self.rx_start, self.reg_pending
        # state == AGGREGATE as a flop, kept with the moves into and out of it: the packet
        # parser's decision reads it, and decoding the state there was on the engine's
        # critical path.
        in_aggregate = self.in_aggregate
        idx = Signal(16)                # the next command to fetch
        finished = Signal(16)           # commands finished (STEP)
        counted = Signal()              # the last data command dispatched is not yet counted
        m.d.comb += [self.done.eq(state == DONE), self.step.eq(finished)]
        m.d.comb += self.queue_addr.eq(idx)
        self._load_command(m, cur, self.queue_data, state == FETCH)
        next_is_last, at_end = self._queue_position(m, idx, self.queued)

        starting = self._start_clears(m, finished, counted, self.now, self.started_at)
        m.d.sync += [tx_start.eq(0), rx_start.eq(0)]
        with m.If(self.clear):
            m.d.sync += [state.eq(IDLE), idx.eq(0), finished.eq(0), counted.eq(0),
                         in_aggregate.eq(0)]
        with m.Elif(self.error & self.running):
            m.d.sync += [state.eq(STOPPED), in_aggregate.eq(0)]
        with m.Else():
            with m.Switch(state):
                with m.Case(IDLE, DONE):
                    # A start with an error standing does nothing (but disarms).
                    with m.If(start & self.error):
                        m.d.sync += armed.eq(0)
                    with m.Elif(start):
                        m.d.sync += [armed.eq(0), starting.eq(1),
                                     state.eq(Mux(self.queue_empty, FINISH, FETCH))]
                        # Counters and STEP clear a cycle later; idx stands at 0.
                with m.Case(FETCH):
                    m.d.sync += state.eq(LOAD)
                with m.Case(LOAD):
                    m.d.sync += state.eq(DECODE)
                with m.Case(DECODE):
                    # dispatch_ok is first computed in this cycle (from cur, not from the
                    # queue's block-RAM output).
                    m.d.sync += state.eq(DISPATCH)
                with m.Case(DISPATCH):
                    with m.If(p["dispatch_ok"]):
                        # The previous data command finished: every beat sent and taken.
                        m.d.sync += [idx.eq(idx + 1), finished.eq(finished + counted),
                                     counted.eq(~cur.barrier & ~cur.aggregate)]
                        with m.If(cur.aggregate):
                            m.d.sync += [state.eq(AGGREGATE), in_aggregate.eq(1),
                                         agg_done.eq(0), reg_pending.eq(1)]
                        with m.Elif(cur.barrier):
                            m.d.comb += self.barrier_done.eq(1)
                            m.d.sync += state.eq(BARRIER)
                        with m.Else():
                            # Registered: the DISPATCH decision drives two flops, not every
                            # register a send or receive start loads. `cur` holds until the
                            # next LOAD, two cycles on.
                            m.d.sync += [tx_start.eq(cur.has_send), rx_start.eq(cur.has_recv)]
                            m.d.sync += state.eq(Mux(next_is_last, FINISH, FETCH))
                with m.Case(BARRIER):
                    # Ref: seed 001, S23: the batch ends when every rank reached the barrier.
                    with m.If(p["barrier_moved"]):
                        m.d.sync += [state.eq(Mux(at_end, FINISH, FETCH)),
                                     finished.eq(finished + 1)]
                with m.Case(AGGREGATE):
                    # Ref: seed 003, step 7.6: complete once every message is sent, every
                    # message received and the control tree has said DONE.
                    with m.If(p["aggregate_ok"]):
                        m.d.sync += [state.eq(Mux(at_end, FINISH, FETCH)),
                                     finished.eq(finished + 1), in_aggregate.eq(0)]
                with m.Case(FINISH):
                    with m.If(p["finish_ok"]):
                        m.d.sync += [state.eq(DONE),
                                     finished.eq(finished + counted), counted.eq(0), idx.eq(0)]
        self._finish_stamp(m, state == FINISH)
        # The hub's DONE notice; the registration leaves (after the state machine's moves,
        # which they override).
        with m.If(self.agg_done_seen):
            m.d.sync += agg_done.eq(1)
        with m.If(self.clear):
            m.d.sync += reg_pending.eq(0)
        with m.Elif(self.reg_sent):
            m.d.sync += reg_pending.eq(0)


    def _finish_stamp(self, m, finishing):
        """finished_at follows `now` through FINISH and so holds, from DONE on, the cycle the
        run ended in (its last FINISH cycle).  Its 64 enables are then a state decode, not
        the finish decision behind the error and clear priorities (the 256-bit engine's
        latest pin at seed 2 of 72197bf: the state -> finish_ok -> finished_at's enables,
        5.71 ns).  What it shows during FINISH, or after a clear or an error there, means
        nothing, as before a run is done."""
        with m.If(finishing):
            m.d.sync += self.finished_at.eq(self.now)

    def _barrier_wait(self, m, dispatching, waiting):
        """Whether the barrier unit moved on from the sequence number the BARRIER state waits
        on: registered (a 16-bit compare of another block's register, not in front of the
        state machine), from BARRIER cycles only, so the state leaves a cycle after the
        release.  The number waited on is the unit's in the cycle BARRIER is entered from,
        the last of DISPATCH: loaded in every DISPATCH cycle, its 16 enables are a state
        decode, not the dispatch decision (the 256-bit engine's latest pin at seed 3 of
        95ebed1: the state -> dispatch_ok -> barrier_seq's enables, 5.63 ns)."""
        barrier_seq = Signal(16)
        barrier_moved = Signal()
        m.d.sync += barrier_moved.eq(waiting & (self.barrier_seq != barrier_seq))
        with m.If(dispatching):
            m.d.sync += barrier_seq.eq(self.barrier_seq)
        return barrier_moved

    @staticmethod
    def _start_clears(m, finished, counted, now, started_at):
        """A start clears STEP's count and `counted` a cycle later (the strobe returned, set
        by the start), and finds idx at 0 (set where a run ends, as at a clear): set by the
        start, behind the GO strobe and the state's checks, their enables were the 64-bit
        engine's latest pins alone at seed 2 of f250adc (go -> 5 LUTs -> step's CE, 5.56
        ns; idx's CE, 5.39 ns).  Nothing reads them in that cycle: the state is then FETCH,
        or FINISH with `finish_ok` (made in the start's cycle) low; the first DISPATCH is
        three cycles on.

        ``started_at`` takes the start's cycle likewise, from a copy of ``now`` made every
        cycle: loaded by the start, its 64 enables were the 64-bit engine's critical path
        alone at seed 3 of c2dace3 (the state -> the start's checks -> started_at, 5.38
        ns).  The register shows the start a cycle later; the host reads it after a run."""
        starting = Signal()
        now_then = Signal.like(now)
        m.d.sync += [starting.eq(0), now_then.eq(now)]
        with m.If(starting):
            m.d.sync += [finished.eq(0), counted.eq(0), started_at.eq(now_then)]
        return starting

    @staticmethod
    def _queue_position(m, idx, queued):
        """Where the run is in the queue, ``(idx + 1 == queued, idx == queued)``, from flops
        computed a cycle before the state machine reads them (two 16-bit compares were in
        front of its state register).  Exact when read: idx moves only at a run's end and in
        DISPATCH, queued only outside a run (a push while running is refused) or at a clear;
        DISPATCH comes three cycles after a start or the last DISPATCH, and BARRIER and
        AGGREGATE act on flags of their own cycles, so no earlier than their second.  A start
        reads `queue_empty` instead, kept with every change of queued."""
        next_is_last = Signal()
        at_end = Signal()
        # queued - 1 as a flop of its own, so neither compare follows an adder (idx + 1 ==
        # queued was a carry chain in front of the compare, 5.60 ns at seed 3 of 447ddd7's
        # 64-bit engine). 17 bits: for an empty queue it is all ones, which idx never is.
        queued_less = Signal(len(queued) + 1)
        m.d.sync += [queued_less.eq(queued - 1),
                     next_is_last.eq(idx == queued_less), at_end.eq(idx == queued)]
        return next_is_last, at_end

    @staticmethod
    def _load_command(m, cur, queue_data, fetching):
        """`cur` loads in every cycle after a FETCH, outside the state machine's priorities:
        its enable is one flop, where the state decode behind CONTROL.clear and the error
        stop fanned out to every bit of it (the 64-bit core's critical path, 7.68 ns, 2.6 of
        it the fan-out).  A clear or an error in that cycle leaves the state in IDLE or
        STOPPED, where nothing reads `cur`; the next start fetches again."""
        load_cur = Signal()
        m.d.sync += load_cur.eq(fetching)
        with m.If(load_cur):
            m.d.sync += cur.eq(queue_data)
