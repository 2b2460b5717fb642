"""The argument parser of the ``nicoll`` command, and :func:`main`, which runs the subcommand
the arguments name (each in a module of this package)."""

import argparse
import sys

from ..config import BACKENDS, DATA_WIDTHS
from ..errors import NicollError
from .bench import bench_command
from .demo import demo_command
from .regmap import regmap_command
from .serve import serve_command
from .synth import SYNTH_BLOCKS, SYNTH_TARGETS_MHZ, synth_command

__all__ = ["main"]


def _seeds(text):
    """``--seed``: one or more distinct non-negative integers, comma-separated."""
    try:
        seeds = [int(item, 10) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a seed list is integers separated by commas, such as 1,2,3, not {text!r}") from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(
            f"seeds must be distinct and non-negative, not {text!r}")
    return seeds


def _size(text):
    units = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text, 0)


def _parser():
    parser = argparse.ArgumentParser(prog="nicoll", description="nicoll collective-offload engine")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="an 8-node Verilator cluster runs the collectives: "
                                       "results, cycles, efficiency and two pictures")
    demo.add_argument("--nodes", type=int, default=8)
    demo.add_argument("--size", type=_size, default=1 << 20,
                      help="bytes per rank of the allreduce and reduce_scatter (default 1M)")
    demo.add_argument("--straggler", type=int, default=5000,
                      help="cycles the last rank arrives late at the barrier (default 5000)")
    demo.add_argument("--clock-mhz", type=float, default=None,
                      help="clock for the µs column (default: the NIC core's recorded Fmax)")
    demo.add_argument("--out", default="build/demo", help="folder for the pictures")
    demo.set_defaults(func=demo_command)

    regmap = sub.add_parser("regmap", help="register-map outputs generated from the SystemRDL source")
    group = regmap.add_mutually_exclusive_group(required=True)
    group.add_argument("--format", choices=("md", "h", "rdl", "py"))
    group.add_argument("--write", action="store_true", help="regenerate the generated files")
    group.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    regmap.set_defaults(func=regmap_command)

    synth = sub.add_parser("synth", help="synthesize the NIC core and report utilization and Fmax")
    from nicoll.hw.synth import BOARDS
    synth.add_argument("--board", choices=sorted(BOARDS), default="versa_ecp5",
                       help="versa_ecp5: LFE5UM-45F, the 64-bit core's board (default); "
                            "ecpix5_85: LFE5UM5G-85F, the 256-bit core's")
    synth.add_argument("--block", choices=SYNTH_BLOCKS,
                       default="niccore",
                       help="what to synthesize: the whole NIC core, or one unit alone")
    synth.add_argument("--seed", type=_seeds, default=[1], metavar="N[,N...]",
                       help="nextpnr placement seed; a list (1,2,3) runs one place and route "
                            "per seed, reports each and keeps the best (every seed's Fmax "
                            "goes into the record)")
    synth.add_argument("--jobs", type=int, default=1, metavar="N",
                       help="place and route up to N seeds at once (each is a yosys and a "
                            "nextpnr process of one core; default 1)")
    synth.add_argument("--target-mhz", type=float, default=None,
                       help="clock to time the design against (default: "
                            + ", ".join(f"{k} {v:g}" for k, v in SYNTH_TARGETS_MHZ.items())
                            + "; a block alone uses 'block')")
    from nicoll.hw.synth import ROUTERS
    synth.add_argument("--router", choices=ROUTERS, default="router1", help="nextpnr router")
    synth.add_argument("--timing-weight", type=int, metavar="N",
                       help="nextpnr placer's weight of timing against wire length "
                            "(--placer-heap-timingweight; nextpnr's default 10)")
    synth.add_argument("--nowidelut", action="store_true",
                       help="pass -nowidelut to yosys synth_ecp5 (no PFU wide multiplexers)")
    synth.add_argument("--alu-pairs", metavar="OP:DTYPE,...",
                       help="alu / niccore: the ALU pairs to build (default every pair)")
    synth.add_argument("--without", metavar="OP:DTYPE,...",
                       help="alu / niccore: ALU pairs to leave out, e.g. prod:float64")
    synth.add_argument("--repack-units", type=int, default=1,
                       help="niccore: repack units (default 1)")
    synth.add_argument("--estimate", action="store_true",
                       help="yosys only: estimated worst paths in seconds (no place and route)")
    synth.add_argument("--paths", type=int, default=10,
                       help="with --estimate: how many paths to print")
    synth.add_argument("--record", action="store_true",
                       help="add the result to docs/synthesis.json and docs/synthesis.md")
    synth.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=256)
    synth.add_argument("--max-nodes", type=int, default=64)
    synth.add_argument("--mem-size", type=_size, default=16 << 10,
                       help="device memory in bytes (on-chip block RAM; default 16k)")
    synth.add_argument("--max-children", type=int, default=8,
                       help="barrier: child slots of one unit (default 8)")
    synth.add_argument("--capacity", type=_size, default=4 << 10,
                       help="repack: buffer bytes of one unit (default 4k)")
    synth.add_argument("--max-group", type=int, default=8,
                       help="repack: largest source / destination subgroup (default 8)")
    synth.set_defaults(func=synth_command)
    bench = sub.add_parser("bench", help="OSU-style sweep of one collective: cycles, "
                                         "bandwidth and efficiency against the bound")
    bench.add_argument("collective", choices=("allreduce", "reduce", "reduce_scatter",
                                              "allgather", "alltoall"))
    bench.add_argument("--nodes", type=int, default=8)
    bench.add_argument("--sizes", default="1:1M",
                       help="bytes per rank: LOW:HIGH doubling, or a list (default 1:1M); "
                            "sizes below one element run as one element")
    bench.add_argument("--algorithm", default="auto",
                       help="algorithm, or several separated by commas (default auto)")
    bench.add_argument("--backend", choices=BACKENDS, default="verilator")
    bench.add_argument("--dtype", default="float32")
    bench.add_argument("--op", default="sum")
    bench.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=256)
    bench.add_argument("--mem-size", type=_size, default=None,
                       help="device memory per node (default: what the largest size needs)")
    bench.add_argument("--clock-mhz", type=float, default=None,
                       help="clock for the µs and bandwidth columns (default: the recorded Fmax "
                            "of the NIC core of that data width in docs/synthesis.json, else "
                            "a nominal 125)")
    bench.add_argument("--repack-node", action="store_true",
                       help="put the repack units in the switch, each on a port of its own, "
                            "with their control tree on a node after the ranks, instead of "
                            "on node 0's port")
    bench.add_argument("--repack-units", type=int, default=1,
                       help="repack units of each node; node 0's serve alltoall 'aggregate' "
                            "(default 1)")
    bench.add_argument("--fabric", default="ideal",
                       help="the network between the NICs and the switch: a profile of "
                            "nicoll.FABRICS (ideal, roce100; default ideal), converted to "
                            "cycles at the --clock-mhz clock")
    bench.add_argument("--csv", help="also write the rows to this CSV file")
    bench.add_argument("--mpi", action="store_true",
                       help="under mpiexec: each rank runs allreduce through nicoll.mpi.Comm "
                            "against a running `nicoll serve`; rank 0 prints the in-NIC "
                            "cycles and the host time per call (--nodes, --backend and the "
                            "build options are the server's, not taken here)")
    bench.add_argument("--address", default=None,
                       help="with --mpi: the server (unix:PATH or tcp:HOST:PORT; default "
                            "the NICOLL_ADDRESS environment variable)")
    bench.add_argument("--repeat", type=int, default=20,
                       help="with --mpi: timed calls per size (default 20)")
    bench.set_defaults(func=bench_command)
    serve = sub.add_parser("serve", help="run a cluster and serve each rank's node to a client "
                                         "process (nicoll.remote.connect) until SIGINT/SIGTERM")
    serve.add_argument("--nodes", type=int, default=8)
    serve.add_argument("--backend", choices=BACKENDS, default="model")
    serve.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=256)
    serve.add_argument("--mem-size", type=_size, default=1 << 16,
                       help="device memory per node (default 64K)")
    serve.add_argument("--listen", default="tcp:127.0.0.1:0",
                       help="unix:PATH or tcp:HOST:PORT (default tcp:127.0.0.1:0, a free "
                            "loopback port; the address is printed)")
    serve.add_argument("--token", default=None,
                       help="a secret every client must present; required off the loopback")
    serve.set_defaults(func=serve_command)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    args.argv = argv
    try:
        return args.func(args)
    except NicollError as exc:
        print(f"nicoll: error: {exc}", file=sys.stderr)
        return 2
