"""The ``nicoll`` command line (also ``python -m nicoll``).

    nicoll demo [--nodes N] [--backend B ...]   open a cluster on each backend, print what it reads
    nicoll regmap --format md|h|rdl|py          print a register-map output
    nicoll regmap --write | --check             regenerate the generated files / check they are fresh
    nicoll synth --board versa_ecp5 [--block alu|barrier|repack]   utilization and Fmax
    nicoll bench <collective> [--nodes N] [--sizes 8:1M] [--algorithm A,B] [--backend B]
                                                OSU-style sweep: cycles, bandwidth, efficiency
"""

import argparse
import sys
import time
from pathlib import Path

from .config import BACKENDS, DATA_WIDTHS
from .errors import NicollError

__all__ = ["main"]

_REPO_ROOT = Path(__file__).resolve().parent.parent


def _console():
    from rich.console import Console
    return Console()


def _demo(args):
    from rich.table import Table
    from . import Cluster
    from .device import tag_text
    console = _console()
    failures = 0
    for backend in args.backend:
        t0 = time.monotonic()
        with console.status(f"[bold]{backend}[/]: starting {args.nodes} nodes") as status:
            def progress(message, backend=backend):
                status.update(f"[bold]{backend}[/]: {message}")
            with Cluster(nodes=args.nodes, backend=backend, data_width=args.data_width,
                         progress=progress) as cluster:
                opened = time.monotonic() - t0
                table = Table(title=f"{backend}: {cluster.nodes} nodes, data_width "
                                    f"{cluster.data_width} (opened in {opened:.1f} s)")
                for column in ("rank", "NODE_ID", "DATA_WIDTH", "MAX_NODES", "MEM_SIZE",
                               "SCRATCH", "memory", "CYCLES"):
                    table.add_column(column, justify="right")
                versions = set()
                for rank in range(cluster.nodes):
                    status.update(f"[bold]{backend}[/]: reading node {rank}")
                    dev = cluster.device(rank)
                    pattern = 0xC0DE_0000 | rank
                    dev.regs.global_.SCRATCH.write(pattern)
                    scratch_ok = dev.regs.global_.SCRATCH.read() == pattern
                    payload = bytes((rank * 16 + k) & 0xFF for k in range(64))
                    dev.mem_write(0x40, payload)
                    memory_ok = dev.mem_read(0x40, len(payload)) == payload
                    failures += (not scratch_ok) + (not memory_ok) + (dev.node_id != rank)
                    versions.add(" ".join(f"{b.spec.name} {tag_text(b.ID.read())!r} "
                                          f"v{b.VERSION.major.read()}.{b.VERSION.minor.read()}"
                                          for b in dev.regs))
                    table.add_row(str(rank), str(dev.node_id), str(dev.data_width),
                                  str(dev.max_nodes), f"{dev.mem_size // 1024} KiB",
                                  "✓" if scratch_ok else "✗", "✓" if memory_ok else "✗",
                                  f"{dev.cycles():,}")
                table.caption = "blocks: " + " | ".join(sorted(versions))
        console.print(table)
    if failures:
        console.print(f"[red]{failures} check(s) failed[/]")
        return 1
    return 0


def _regmap(args):
    from .regmap import RDL_PATH, compile_rdl, emit_cheader, emit_markdown, emit_python, \
        generated_outputs, stale_outputs
    if args.write or args.check:
        stale = stale_outputs(_REPO_ROOT)
        if args.write:
            outputs = generated_outputs(_REPO_ROOT)
            for path in stale:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(outputs[path])
        for path in stale:
            print(f"{'wrote' if args.write else 'stale'}: {path.relative_to(_REPO_ROOT)}")
        if not stale:
            print("register-map outputs are up to date")
        return 1 if stale and args.check else 0
    if args.format == "rdl":
        sys.stdout.write(RDL_PATH.read_text())
        return 0
    regmap, root = compile_rdl()
    emit = {"md": lambda: emit_markdown(root), "h": lambda: emit_cheader(root),
            "py": lambda: emit_python(regmap)}[args.format]
    sys.stdout.write(emit())
    return 0


def _synth(args):
    from nicoll.hw.synth import synthesize
    from nicoll.sim.toolchain import apply_tool_env, build_root
    apply_tool_env()
    console = _console()
    if args.block == "alu":
        from nicoll.hw.alu import ReductionALU, all_capabilities
        from .ops import check_op_dtype
        left_out = set()
        for item in filter(None, (args.without or "").split(",")):
            op, _, dtype = item.partition(":")
            left_out.add(check_op_dtype(op, dtype))
        capabilities = all_capabilities() - left_out
        name = f"alu_w{args.data_width}_{len(capabilities)}pairs"
        factory = lambda: ReductionALU(args.data_width, capabilities=capabilities)  # noqa: E731
    elif args.block == "barrier":
        from nicoll.hw.barrier import BarrierUnit
        name = f"barrier_n{args.max_nodes}_k{args.max_children}"
        factory = lambda: BarrierUnit(args.max_nodes, args.max_children)  # noqa: E731
    elif args.block == "repack":
        from nicoll.hw.repack import RepackUnit
        name = f"repack_w{args.data_width}_cap{args.capacity}_g{args.max_group}"
        factory = lambda: RepackUnit(args.data_width, args.capacity,    # noqa: E731
                                     args.max_group)
    else:
        from nicoll.hw.niccore import NicCore
        name = f"niccore_w{args.data_width}_mem{args.mem_size}"
        factory = lambda: NicCore(data_width=args.data_width,           # noqa: E731
                                  max_nodes=args.max_nodes, mem_size=args.mem_size)
    build_dir = build_root() / "synth" / args.board / name
    with console.status(f"synthesizing {name} for {args.board}") as status:
        result = synthesize(factory, name=name, board=args.board, build_dir=build_dir,
                            seed=args.seed, progress=lambda message: status.update(message))
    text = result.to_text()
    report = build_root() / "synth" / f"{args.board}_{name}.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text + "\n")
    console.print(text)
    console.print(f"report written to {report}")
    return 0


def _bench(args):
    import csv
    from rich.table import Table
    from .bench import format_size, parse_sizes, run_bench
    console = _console()
    sizes = parse_sizes(args.sizes)
    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    table = Table(title=f"{args.collective}, {args.nodes} nodes on {args.backend}, "
                        f"{args.dtype} {args.op}, data_width {args.data_width}, "
                        f"µs at {args.clock_mhz:g} MHz")
    for column in ("size", "algorithm", "cycles avg", "min", "max", "µs", "algbw GB/s",
                   "busbw GB/s", "bound", "efficiency", "result"):
        table.add_column(column, justify="right")
    with console.status("starting") as status:
        def on_row(row):
            eff = row.efficiency
            console.print(f"  {format_size(row.size):>6} B  {row.algorithm:<18} "
                          f"{row.cycles_max:>9} cycles  "
                          f"{'-' if eff is None else f'{eff:.3f}'}  "
                          f"{'✓' if row.correct else '✗'}")
        rows, figures = run_bench(args.collective, nodes=args.nodes, sizes=sizes,
                                  algorithms=algorithms, backend=args.backend, dtype=args.dtype,
                                  op=args.op, data_width=args.data_width,
                                  mem_size=args.mem_size, clock_mhz=args.clock_mhz,
                                  repack_units=args.repack_units,
                                  progress=lambda message: status.update(message),
                                  on_row=on_row)
    for row in rows:
        eff = row.efficiency
        table.add_row(format_size(row.size), row.algorithm, f"{row.cycles_avg:.0f}",
                      str(row.cycles_min), str(row.cycles_max), f"{row.microseconds:.2f}",
                      f"{row.algbw_gbs:.3f}", f"{row.busbw_gbs:.3f}", f"{row.bound:.0f}",
                      "-" if eff is None else f"{eff:.3f}", "✓" if row.correct else "✗")
    rate = figures["cycles_per_second"]
    table.caption = (f"{figures['simulated_cycles']:,} cycles simulated in "
                     f"{figures['wall_seconds']:.1f} s"
                     + (f" ({rate:,.0f} cycles/s)" if rate else ""))
    console.print(table)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].as_dict()))
            writer.writeheader()
            for row in rows:
                writer.writerow(row.as_dict())
        console.print(f"wrote {args.csv}")
    return 0 if all(row.correct for row in rows) else 1


def _size(text):
    units = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text, 0)


def _parser():
    parser = argparse.ArgumentParser(prog="nicoll", description="nicoll collective-offload engine")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="open a cluster on each backend and show what it reads")
    demo.add_argument("--nodes", type=int, default=4)
    demo.add_argument("--backend", choices=BACKENDS, action="append",
                      help="backend to run (repeatable; default: all)")
    demo.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=256)
    demo.set_defaults(func=_demo)

    regmap = sub.add_parser("regmap", help="register-map outputs generated from the SystemRDL source")
    group = regmap.add_mutually_exclusive_group(required=True)
    group.add_argument("--format", choices=("md", "h", "rdl", "py"))
    group.add_argument("--write", action="store_true", help="regenerate the generated files")
    group.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    regmap.set_defaults(func=_regmap)

    synth = sub.add_parser("synth", help="synthesize the NIC core and report utilization and Fmax")
    synth.add_argument("--board", default="versa_ecp5")
    synth.add_argument("--block", choices=("niccore", "alu", "barrier", "repack"),
                       default="niccore",
                       help="what to synthesize: the whole NIC core, or one unit alone")
    synth.add_argument("--seed", type=int, default=1, help="nextpnr placement seed")
    synth.add_argument("--without", metavar="OP:DTYPE,...",
                       help="ALU pairs to leave out, e.g. prod:float64,prod:int64")
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
    synth.set_defaults(func=_synth)
    bench = sub.add_parser("bench", help="OSU-style sweep of one collective: cycles, "
                                         "bandwidth and efficiency against the bound")
    bench.add_argument("collective", choices=("allreduce", "reduce", "reduce_scatter",
                                              "allgather", "alltoall"))
    bench.add_argument("--nodes", type=int, default=8)
    bench.add_argument("--sizes", default="8:1M",
                       help="bytes per rank: LOW:HIGH doubling, or a list (default 8:1M)")
    bench.add_argument("--algorithm", default="auto",
                       help="algorithm, or several separated by commas (default auto)")
    bench.add_argument("--backend", choices=BACKENDS, default="verilator")
    bench.add_argument("--dtype", default="float32")
    bench.add_argument("--op", default="sum")
    bench.add_argument("--data-width", type=int, choices=DATA_WIDTHS, default=256)
    bench.add_argument("--mem-size", type=_size, default=None,
                       help="device memory per node (default: what the largest size needs)")
    bench.add_argument("--clock-mhz", type=float, default=125.0,
                       help="clock for the µs and bandwidth columns (default 125)")
    bench.add_argument("--repack-units", type=int, default=1,
                       help="repack units of each node; node 0's serve alltoall 'aggregate' "
                            "(default 1)")
    bench.add_argument("--csv", help="also write the rows to this CSV file")
    bench.set_defaults(func=_bench)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    if getattr(args, "backend", None) is None and args.command == "demo":
        args.backend = list(BACKENDS)
    try:
        return args.func(args)
    except NicollError as exc:
        print(f"nicoll: error: {exc}", file=sys.stderr)
        return 2
