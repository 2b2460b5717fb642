# Ref: seed 002 (ICT/CAS): collectives over any logical topology are schedules (data), run by
#      one engine that knows nothing of rings or trees.
# Ref: seed 000 (CN101206588): segment j+1 travels while segment j is reduced.
"""Engine block driver: lowers schedule steps into engine commands and runs one node's queue.

:class:`EngineDriver` is the block layer between the register access layer
(:mod:`nicoll.driver.regs`) and :class:`~nicoll.Device` (``Device.engine``); the same code
drives the device model, the Amaranth simulation and Verilator.

A :class:`~nicoll.schedule.Step` becomes one command of :data:`nicoll.hw.engine.COMMAND_LAYOUT`
(:func:`lower`), packed into the CMD words of the register map (:func:`pack`) and appended to
the engine's queue by CONTROL.push.  :meth:`EngineDriver.load` puts a whole
:class:`~nicoll.schedule.Schedule` in the queue; :meth:`~EngineDriver.arm` starts it at a
cycle of the node's clock, so every node of a cluster can start together; STATUS.done says
the queue ran to its end.

What the hardware makes of a step
---------------------------------
- Regions are walked in ascending address order, run by run; ``send_reversed`` and
  ``recv_reversed`` are not part of the command.  The sender and the receiver of one message
  always use the same order (the schedule format guarantees it), so piece j of the sent
  stream lands in piece j of the receive region either way: the bytes, and every element's
  reduction, are the same.  The order only changed which piece's reduction overlaps the next
  step's first exchange; the engine makes that overlap safe itself (a scoreboard of the
  memory rows being written, and ``fence``).
- ``segments`` become packets: ``packet_beats`` is a segment's beats (rounded up, at most the
  build's largest packet), so segment j+1 travels while segment j is reduced (seed 000).
- A contiguous region has ``run`` = ``stride`` = 0.
"""

from dataclasses import dataclass
import functools
import numbers
import re

from amaranth.lib import data

from nicoll.hw.engine import COMMAND_LAYOUT, COMMAND_WORDS

from nicoll.hw.regmap.generated import REGMAP
from ..errors import NicollError
from ..ops import check_op_dtype, numpy_dtype
from ..schedule import Schedule, Step

__all__ = ["EngineDriver", "EngineStatus", "ERROR_NAMES", "COUNTER_NAMES", "lower", "pack",
           "unpack", "error_text"]

_BLOCK = REGMAP.block("engine")
#: The ERRORS bits, in register order, as the register map names them.
ERROR_NAMES = tuple(f.name for f in _BLOCK.register("ERRORS").fields)
#: The performance counters: the block's registers holding one 32-bit ``count``.
COUNTER_NAMES = tuple(r.name for r in _BLOCK.registers
                      if [(f.name, f.width) for f in r.fields] == [("count", 32)])


def _error_texts():
    # What each bit means, cut out of the ERRORS description ("name: text.  name: text.") so
    # that the messages say what the register map says.
    desc = _BLOCK.register("ERRORS").desc
    parts = re.split(r"\b(" + "|".join(map(re.escape, ERROR_NAMES)) + r"): ", desc)
    return {parts[i]: parts[i + 1].strip().rstrip(".") for i in range(1, len(parts) - 1, 2)}


_ERROR_TEXT = _error_texts()
_U16 = (1 << 16) - 1
_U32 = (1 << 32) - 1
_U64 = (1 << 64) - 1


def error_text(names):
    """``"name (what it means); ..."`` for ERRORS bit names, for messages."""
    return "; ".join(f"{n} ({_ERROR_TEXT[n]})" if n in _ERROR_TEXT else n for n in names)


def _int(what, value, low, high):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise NicollError(f"{what} must be an int, not {value!r}")
    if not low <= value <= high:
        raise NicollError(f"{what} must be between {low} and {high}, not {value!r}")
    return int(value)


def _region(what, region, itemsize):
    if region is None:
        return {"offset": 0, "length": 0, "run": 0, "stride": 0}
    for name in ("offset", "length", "run", "stride"):
        value = getattr(region, name)
        _int(f"{what} region {name}", value, 0, _U32)
        if value % itemsize:
            raise NicollError(f"{what} region {region!r} does not fall on {itemsize}-byte "
                              f"element boundaries ({name} {value!r})")
    if region.contiguous:
        return {"offset": region.offset, "length": region.length, "run": 0, "stride": 0}
    return {"offset": region.offset, "length": region.length, "run": region.run,
            "stride": region.stride}


def lower(step, *, data_width, itemsize, max_packet_beats):
    """The :data:`~nicoll.hw.engine.COMMAND_LAYOUT` fields of a schedule step, as a dict.

    :param data_width: the build's data width in bits (a beat is ``data_width // 8`` bytes).
    :param itemsize: bytes per element; regions must fall on element boundaries.
    :param max_packet_beats: the build's largest packet (register PACKET).
    :raises NicollError: not a Step, a peer or tag that does not fit 16 bits, a region that
        does not fit 32 bits or is not element-aligned.

    ``packet_beats`` is a segment's beats, ``ceil(ceil(len(send) / W) / segments)`` with W the
    beat's bytes, capped at ``max_packet_beats``, so a step's segments become its packets
    (0 for a step that sends nothing).  ``send_reversed`` / ``recv_reversed`` are dropped:
    the engine walks every region in ascending order, and since the sender and the receiver
    of a message always walk it the same way, the data lands in the same place (see the
    module docstring).
    """
    if not isinstance(step, Step):
        raise NicollError(f"lower takes a nicoll.schedule.Step, not {step!r}")
    width = _int("data_width", data_width, 8, 1 << 16) // 8
    if data_width % 8:
        raise NicollError(f"data_width must be a whole number of bytes, not {data_width!r} bits")
    itemsize = _int("itemsize", itemsize, 1, _U32)
    max_packet_beats = _int("max_packet_beats", max_packet_beats, 1, _U16)
    fields = {
        "send": _region("send", step.send, itemsize),
        "recv": _region("recv", step.recv, itemsize),
        "send_to": 0 if step.send is None else _int("send_to", step.send_to, 0, _U16),
        "recv_from": 0 if step.recv is None else _int("recv_from", step.recv_from, 0, _U16),
        "send_tag": 0 if step.send is None else _int("send_tag", step.send_tag, 0, _U16),
        "recv_tag": 0 if step.recv is None else _int("recv_tag", step.recv_tag, 0, _U16),
        "packet_beats": 0,
        "action": int(step.action.value) if step.recv is not None else 0,
        "has_send": int(step.send is not None),
        "has_recv": int(step.recv is not None),
        "fence": int(step.fence),
        "barrier": int(step.barrier),
        "aggregate": 0,
    }
    if step.send is not None:
        beats = -(-step.send.length // width)
        fields["packet_beats"] = max(1, min(-(-beats // step.segments), max_packet_beats))
    return fields


def pack(fields):
    """The :data:`~nicoll.hw.engine.COMMAND_WORDS` 32-bit words of a command (CMD0 first).

    :param fields: COMMAND_LAYOUT's fields as nested dicts (as :func:`lower` gives them);
        fields left out are 0.
    :raises NicollError: a name the layout lacks, or a value that does not fit its field.
    """
    value = 0
    for path, value_of_leaf in _leaves(fields):
        value |= _leaf_bits(path, value_of_leaf)
    return [(value >> (32 * k)) & _U32 for k in range(COMMAND_WORDS)]


def _leaves(fields, prefix=()):
    """``(path, value)`` of every leaf given in ``fields``, checked against the layout."""
    if not isinstance(fields, dict):
        raise NicollError(f"command fields are a dict, not {fields!r}")
    out = []
    for name, value in fields.items():
        path = prefix + (name,)
        if path in _WIDTHS:
            width = _WIDTHS[path]
            if isinstance(value, numbers.Integral) and not 0 <= value < 1 << width:
                raise NicollError(f"command field {'.'.join(path)} is {width} bits wide; "
                                  f"{value!r} does not fit")
            out.append((path, value))
        elif any(p[:len(path)] == path for p in _WIDTHS):
            out.extend(_leaves(value, path))
        else:
            raise NicollError(f"COMMAND_LAYOUT has no field {'.'.join(path)!r}")
    return out


@functools.lru_cache(maxsize=1 << 16)
def _leaf_bits(path, value):
    # The layout packs one field at a time (a command is the OR of its fields), so each
    # (field, value) is packed once: COMMAND_LAYOUT.const walks the whole layout every call.
    fields = value
    for name in reversed(path):
        fields = {name: fields}
    try:
        return COMMAND_LAYOUT.const(fields).as_value().value
    except (TypeError, ValueError) as exc:
        raise NicollError(f"command field {'.'.join(path)} cannot be {value!r}: {exc}") from None


def _flatten(layout, base=0, prefix=()):
    out = []
    for name, field in layout:
        if isinstance(field.shape, data.StructLayout):
            out.extend(_flatten(field.shape, base + field.offset, prefix + (name,)))
        else:
            out.append((prefix + (name,), base + field.offset, field.width))
    return out


#: (path, bit offset, width) of every leaf field of COMMAND_LAYOUT.
_LEAVES = tuple(_flatten(COMMAND_LAYOUT))
_WIDTHS = {path: width for path, _, width in _LEAVES}


def unpack(words):
    """A command's fields (nested dicts of ints, as :func:`lower` gives them) from its words.

    Fields are taken as raw bits, so a reserved ``action`` (3) reads as 3."""
    words = list(words)
    if len(words) != COMMAND_WORDS:
        raise NicollError(f"a command is {COMMAND_WORDS} words, not {len(words)}")
    value = sum((int(w) & _U32) << (32 * k) for k, w in enumerate(words))
    out = {}
    for path, offset, width in _LEAVES:
        at = out
        for name in path[:-1]:
            at = at.setdefault(name, {})
        at[path[-1]] = (value >> offset) & ((1 << width) - 1)
    return out


@dataclass(frozen=True)
class EngineStatus:
    """One read of STATUS and STEP."""
    queued: int         # commands in the queue
    armed: bool         # waiting for START_AT
    busy: bool          # running
    done: bool          # the queue ran to its end
    error: bool         # some ERRORS bit is set; the engine stopped
    step: int           # commands finished since the start


class EngineDriver:
    """The collective engine of one node.

    :param regs: the node's :class:`~nicoll.driver.regs.Registers`.
    :param node_id: the node's id (its rank).
    :param data_width: the build's data width in bits.
    :param mem_size: bytes of device memory.

    Build parameters read from the registers: :attr:`depth` (commands the queue holds),
    :attr:`alu_latency` (cycles) and :attr:`packet_beats` (the largest packet).
    """

    def __init__(self, regs, *, node_id, data_width, mem_size):
        self._regs = regs.engine
        self._cycles = regs.global_.CYCLES
        self.node_id = node_id
        self.data_width = data_width
        self.mem_size = mem_size
        caps = self._regs.CAPS.read_fields()
        self.depth = caps["depth"]
        self.alu_latency = caps["alu_latency"]
        self.packet_beats = self._regs.PACKET.beats.read()
        try:
            self._words = [self._regs[f"CMD{k}"] for k in range(COMMAND_WORDS)]
        except KeyError:
            raise NicollError(f"COMMAND_LAYOUT takes {COMMAND_WORDS} words but the register "
                              f"map's engine block has fewer CMD registers") from None
        self._counters = [self._regs[name] for name in COUNTER_NAMES]

    lower = staticmethod(lower)
    pack = staticmethod(pack)

    def command(self, step, itemsize):
        """:func:`lower` with this build's data width and largest packet."""
        return lower(step, data_width=self.data_width, itemsize=itemsize,
                     max_packet_beats=self.packet_beats)

    # -- the queue ------------------------------------------------------------------------

    #: Cycles the pushes made may take to be judged (:meth:`wait_pushes`): the gateware
    #: checks a push in registered steps a few cycles behind its CONTROL write; the rest is
    #: room for the reads that poll.
    PUSH_BUDGET = 1000

    def push(self, fields):
        """Append one command (a COMMAND_LAYOUT field dict) to the queue.  The engine checks
        it; a refused command sets an ERRORS bit (see :meth:`check`) and is not queued.  The
        verdict shows some cycles after the push on the gateware (at once on the model):
        :meth:`wait_pushes` waits for it."""
        for register, word in zip(self._words, pack(fields)):
            register.write(word)
        self._regs.CONTROL.write_fields(push=1)

    def wait_pushes(self, queued):
        """Wait until every push made is judged: STATUS.queued reaches ``queued`` (the
        commands expected in the queue once all are taken) or an ERRORS bit is set.

        :raises NicollError: neither within :data:`PUSH_BUDGET` cycles.
        """
        start = self._cycles.read()
        while True:
            status = self._regs.STATUS.read_fields()
            if status["queued"] >= queued or status["error"]:
                return
            waited = self._cycles.read() - start
            if waited > self.PUSH_BUDGET:
                raise NicollError(f"engine of node {self.node_id} judged its pushes in no "
                                  f"{self.PUSH_BUDGET} cycles: {status['queued']} of {queued} "
                                  f"commands queued and no error after {waited} cycles")

    def load(self, schedule, op=None, dtype=None):
        """Empty the queue (CONTROL.clear), set REDUCTION and push every step of ``schedule``.

        :param op, dtype: the reduction (names or :mod:`nicoll.hw.ops` members); needed when
            a step reduces, and ``dtype`` must have the schedule's element size.
        :raises NicollError: a schedule for another rank, longer than the queue, with a
            buffer larger than device memory, or with a step that does not lower — all before
            anything is written; then any ERRORS bit the pushes set.
        """
        if not isinstance(schedule, Schedule):
            raise NicollError(f"load takes a nicoll.schedule.Schedule, not {schedule!r}")
        if schedule.rank != self.node_id:
            raise NicollError(f"the schedule is rank {schedule.rank}'s; this is node "
                              f"{self.node_id}")
        if len(schedule.steps) > self.depth:
            raise NicollError(f"rank {self.node_id}'s schedule has {len(schedule.steps)} steps; "
                              f"the engine's queue holds {self.depth} (CAPS.depth)")
        if schedule.buffer_bytes > self.mem_size:
            raise NicollError(f"rank {self.node_id}'s schedule needs a {schedule.buffer_bytes}"
                              f"-byte buffer; device memory holds {self.mem_size} bytes")
        reduces = any(step.action.reduces for step in schedule.steps)
        op_code = dtype_code = 0
        if reduces or op is not None or dtype is not None:
            if op is None or dtype is None:
                raise NicollError("the schedule reduces: give both op and dtype")
            op, dtype = check_op_dtype(op, dtype)
            size = numpy_dtype(dtype).itemsize
            if size != schedule.itemsize:
                raise NicollError(f"dtype {dtype.numpy_name} has {size}-byte elements; the "
                                  f"schedule has {schedule.itemsize}-byte ones")
            op_code, dtype_code = op.value, dtype.value
        commands = [self.command(step, schedule.itemsize) for step in schedule.steps]
        self.clear()
        self._regs.REDUCTION.write_fields(op=op_code, dtype=dtype_code)
        for fields in commands:
            self.push(fields)
        self.wait_pushes(len(commands))
        self.check()

    # -- running --------------------------------------------------------------------------

    def arm(self, cycle):
        """Run the queue in the first cycle CYCLES ≥ ``cycle``."""
        self._regs.START_AT.write(_int("cycle", cycle, 0, _U64))
        self._regs.CONTROL.write_fields(arm=1)

    def go(self):
        """Run the queue now."""
        self._regs.CONTROL.write_fields(go=1)

    def clear(self):
        """Empty the queue, clear STATUS, ERRORS and the counters; stops a running queue."""
        self._regs.CONTROL.write_fields(clear=1)

    # -- status ---------------------------------------------------------------------------

    def status(self):
        s = self._regs.STATUS.read_fields()
        return EngineStatus(queued=s["queued"], armed=bool(s["armed"]), busy=bool(s["busy"]),
                            done=bool(s["done"]), error=bool(s["error"]),
                            step=self._regs.STEP.count.read())

    def errors(self):
        """The names of the ERRORS bits that are set (a frozenset)."""
        bits = self._regs.ERRORS.read_fields()
        return frozenset(name for name in ERROR_NAMES if bits[name])

    def check(self):
        """Raise :class:`NicollError` naming every ERRORS bit that is set."""
        names = self.errors()
        if names:
            ordered = [n for n in ERROR_NAMES if n in names]
            raise NicollError(f"engine of node {self.node_id} reports {', '.join(ordered)}: "
                              f"{error_text(ordered)}")

    def packets_received(self):
        """PACKETS_RECEIVED alone: a wait's cheap sign of progress."""
        return self._regs.PACKETS_RECEIVED.read()

    def counters(self):
        """The performance counters, by lower-case register name (``bytes_sent``, ...)."""
        return {register.spec.name.lower(): register.read() for register in self._counters}

    def started_at(self):
        """The cycle the queue last started."""
        return self._regs.STARTED_AT.read()

    def finished_at(self):
        """The cycle the queue last ran to its end."""
        return self._regs.FINISHED_AT.read()

    def cycles(self):
        return self._cycles.read()

    def __repr__(self):
        return (f"<EngineDriver node {self.node_id}: queue of {self.depth}, packets of "
                f"{self.packet_beats} beats>")
