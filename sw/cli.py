"""The ``nicoll`` command line (also ``python -m nicoll``).

    nicoll demo [--nodes 8] [--size 1M]         an 8-node Verilator cluster runs the collectives
    nicoll regmap --format md|h|rdl|py          print a register-map output
    nicoll regmap --write | --check             regenerate the generated files / check they are fresh
    nicoll synth --board versa_ecp5|ecpix5_85 [--block BLOCK]   utilization, Fmax
    nicoll bench <collective> [--nodes N] [--sizes 1:1M] [--algorithm A,B] [--backend B]
                                                OSU-style sweep: cycles, bandwidth, efficiency
"""

import argparse
import json
import sys
from pathlib import Path

from .config import BACKENDS, DATA_WIDTHS
from .errors import NicollError

__all__ = ["main"]

_REPO_ROOT = Path(__file__).resolve().parent.parent
#: Clocks the synthesis flow times designs against (MHz): the NIC core per board (the 64-bit
#: core on the Versa 45F, the 256-bit one on the ECPIX-5 85F), and any block alone.
SYNTH_TARGETS_MHZ = {"versa_ecp5": 150, "ecpix5_85": 125, "block": 200}
#: What ``nicoll synth --block`` can build: the whole core or one unit alone.
SYNTH_BLOCKS = ("niccore", "alu", "barrier", "repack", "repack-control", "engine", "packer",
                "unpacker", "csr")


def _console():
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        # Logs and pipes: wide enough for the tables instead of the 80 columns rich assumes.
        console = Console(width=160)
    return console


def _zoom_window(trace, half=150):
    """Cycles around rank 0's longest pause in reducing: an iteration boundary of recursive
    halving, where the next exchange is already under way while the last segment's reduction
    finishes (seed 000)."""
    spans = trace.lanes[0]["reduce"]
    gaps = [(nxt - end, end) for (_, end), (nxt, _) in zip(spans, spans[1:])]
    if not gaps:
        return (0, 2 * half)
    _, at = max(gaps, key=lambda gap: (gap[0], -gap[1]))
    return (max(0, at - half), at + half)


def _demo(args):
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table
    from . import Cluster
    from .bench import format_size
    from .demo import DEMO_CLUSTER, plot_barrier, plot_timeline, run_demo, synthesized_clock
    console = _console()
    if args.clock_mhz:
        clock, clock_source = args.clock_mhz, "given with --clock-mhz"
    else:
        clock, clock_source = synthesized_clock(DEMO_CLUSTER["data_width"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn())
    steps = ["build and start", "allreduce", "reduce_scatter", "alltoall aggregate",
             "alltoall pairwise", "barriers", "pictures"]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(steps[0], total=len(steps))
        kwargs = dict(DEMO_CLUSTER, max_nodes=max(DEMO_CLUSTER["max_nodes"], args.nodes))
        with Cluster(nodes=args.nodes, backend="verilator",
                     progress=lambda message: bar.update(task, description=message),
                     **kwargs) as cluster:
            bar.advance(task)

            def progress(message):
                bar.update(task, description=message)
                bar.advance(task)
            rows, trace, barrier = run_demo(cluster, size=args.size, straggler=args.straggler,
                                            progress=progress)
            bar.update(task, description="drawing the pictures")
            timeline = out / "allreduce_timeline.png"
            plot_timeline(trace, timeline, zoom=_zoom_window(trace),
                          title=f"allreduce (recursive halving, seed 000), {args.nodes} ranks, "
                                f"{format_size(args.size)} B float32 per rank")
            (out / "allreduce_trace.json").write_text(json.dumps(
                {"start": trace.start, "lanes": {str(rank): lanes
                                                 for rank, lanes in trace.lanes.items()}}))
            barrier_png = out / "barrier_timeline.png"
            plot_barrier(barrier, barrier_png,
                         title=f"AC barrier (seed 004), {args.nodes} ranks, rank "
                               f"{args.nodes - 1} {args.straggler} cycles late")
            bar.update(task, description="done", completed=len(steps))
    table = Table(title=f"nicoll demo: {args.nodes} nodes on verilator, data_width "
                        f"{DEMO_CLUSTER['data_width']}, {format_size(args.size)} B per rank")
    for column in ("collective", "algorithm", "result", "cycles", "bound", "efficiency",
                   f"µs at {clock:.1f} MHz", "note"):
        table.add_column(column, justify="left" if column in ("collective", "algorithm", "note")
                         else "right")
    for row in rows:
        eff = row.efficiency
        table.add_row(row.what, row.algorithm, "[green]✓[/]" if row.correct else "[red]✗[/]",
                      f"{row.cycles:,}" if row.cycles is not None else "-",
                      f"{row.bound:,.0f}" if row.bound else "-",
                      f"{eff:.3f}" if eff else "-",
                      f"{row.cycles / clock:.2f}" if row.cycles else "-", row.note)
    from .synthesis import line_rate_gbps
    width = DEMO_CLUSTER["data_width"]
    table.caption = (f"results checked bit for bit against the documented combining order and "
                     f"against numpy; cycles from the hardware counters; clock: {clock_source}; "
                     f"line rate {width} b × {clock:.1f} MHz = "
                     f"{line_rate_gbps(width, clock):.1f} Gb/s per port")
    console.print(table)
    console.print(f"pictures: {timeline}  {barrier_png}")
    failed = [row for row in rows if not row.correct]
    if failed:
        console.print(f"[red]{len(failed)} result(s) wrong[/]")
        return 1
    return 0


def _regmap(args):
    from nicoll.hw.regmap import RDL_PATH, compile_rdl, emit_cheader, emit_markdown, emit_python, \
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


def _pairs(text):
    from .ops import check_op_dtype
    pairs = set()
    for item in filter(None, (text or "").split(",")):
        op, _, dtype = item.strip().partition(":")
        try:
            pairs.add(check_op_dtype(op, dtype))
        except (TypeError, ValueError) as exc:
            raise NicollError(f"an ALU pair is OP:DTYPE such as sum:float32, not {item!r} "
                              f"({exc})") from None
    return pairs


def _synth(args):
    from nicoll.hw.synth import SynthesisError, synthesize
    from nicoll.hw.toolchain import apply_tool_env, build_root
    from nicoll.hw.alu import all_capabilities
    apply_tool_env()
    console = _console()
    capabilities = _pairs(args.alu_pairs) if args.alu_pairs else all_capabilities()
    capabilities -= _pairs(args.without)
    if not capabilities and args.block in ("alu", "niccore", "engine"):
        raise NicollError("--alu-pairs and --without leave the ALU no pair to build")
    if capabilities == all_capabilities():
        pairs_text = "every pair"
    elif len(capabilities) <= 4:
        pairs_text = " ".join(sorted(f"{op.mpi_name}:{dtype.name.lower()}"
                                     for op, dtype in capabilities))
    else:
        pairs_text = f"{len(capabilities)} pairs"
    name, factory, parameters = _synth_design(args, capabilities, pairs_text)
    target_mhz = args.target_mhz
    if target_mhz is None:
        target_mhz = (SYNTH_TARGETS_MHZ[args.board] if args.block == "niccore"
                      else SYNTH_TARGETS_MHZ["block"])
    if args.router != "router1":
        parameters["router"] = args.router
    if args.nowidelut:
        parameters["yosys"] = "-nowidelut"
    if args.timing_weight is not None:
        from nicoll.hw.synth import TIMING_WEIGHTS
        if args.timing_weight not in TIMING_WEIGHTS:
            raise NicollError(f"--timing-weight must be between {TIMING_WEIGHTS.start} and "
                              f"{TIMING_WEIGHTS.stop - 1}, not {args.timing_weight}")
        parameters["nextpnr"] = f"--placer-heap-timingweight {args.timing_weight}"
    build_dir = build_root() / "synth" / args.board / name
    if args.estimate:
        if args.record:
            raise NicollError("--estimate gives no placed figure to record; drop --record")
        if args.paths < 1:
            raise NicollError(f"--paths must be at least 1, not {args.paths}")
        from nicoll.hw.synth.logic_depth import measure_logic_depth
        with console.status(f"yosys on {name} for {args.board}"):
            depth = measure_logic_depth(factory, name=name, board=args.board,
                                        build_dir=build_dir, widelut=not args.nowidelut)
        console.print(depth.to_text(args.paths))
        return 0
    if args.jobs < 1:
        raise NicollError(f"--jobs must be at least 1, not {args.jobs}")
    outcomes = _synth_seeds(args, console, synthesize, factory, name, build_dir, target_mhz)
    results = [r for r in outcomes if not isinstance(r, SynthesisError)]
    failed = "; ".join(f"seed {seed}: {r}" for seed, r in zip(args.seed, outcomes)
                       if isinstance(r, SynthesisError))
    if not results:
        raise NicollError(failed)
    result = max(results, key=lambda r: r.fmax_mhz)
    text = result.to_text()
    if len(outcomes) > 1:
        text += "\n  seed sweep: " + ", ".join(
            f"seed {seed} failed" if isinstance(r, SynthesisError)
            else f"seed {r.seed} {r.fmax_mhz:.2f} MHz" for seed, r in zip(args.seed, outcomes)
        ) + f" (best: seed {result.seed})"
    report = build_root() / "synth" / f"{args.board}_{name}.txt"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text + "\n")
    console.print(text)
    console.print(f"report written to {report}")
    if failed:
        # A sweep with a failed seed is not the sweep the command asked for: it is not
        # recorded, and the other seeds' results above stay in their folders.
        raise NicollError(failed + ("; nothing recorded" if args.record else ""))
    if args.record:
        from . import synthesis
        command = ".venv/bin/nicoll " + " ".join(_recorded_argv(args.argv))
        synthesis.record(synthesis.entry(result, block=args.block, data_width=args.data_width,
                                         command=command, parameters=parameters,
                                         sweep=results if len(results) > 1 else None))
        console.print(f"recorded in {synthesis.RECORD_PATH} and {synthesis.TABLE_PATH}")
    return 0


def _recorded_argv(argv):
    """The arguments of a recorded run without ``--record`` and ``--jobs``: neither changes
    the result, so the row names the command that reproduces it."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--jobs":
            skip = True
        elif arg != "--record" and not arg.startswith("--jobs="):
            kept.append(arg)
    return kept


def _synth_seeds(args, console, synthesize, factory, name, build_dir, target_mhz):
    """One place and route per seed, ``args.jobs`` at a time; the results in seed order.
    The tools are processes of their own, so a run in a thread leaves the interpreter free:
    each seed elaborates, runs yosys and nextpnr in its own folder."""
    import concurrent.futures
    import threading
    from nicoll.hw.synth import SynthesisError
    seeds = args.seed
    stages = {seed: "waiting" for seed in seeds}
    lock = threading.Lock()

    def run(seed):
        # One folder per seed of a sweep, so each run's files stay to be read.
        seed_dir = build_dir if len(seeds) == 1 else build_dir / f"seed{seed}"

        def progress(message):
            with lock:
                stages[seed] = message
        progress("elaborating")
        try:
            return synthesize(factory, name=name, board=args.board, build_dir=seed_dir,
                              seed=seed, target_mhz=target_mhz, router=args.router,
                              widelut=not args.nowidelut, timing_weight=args.timing_weight,
                              progress=progress)
        except SynthesisError as error:
            # The seed's tools failed: the others go on (their results are not lost), and
            # the caller reports this one.
            return error
        finally:
            progress("done")

    def line():
        with lock:
            if len(seeds) == 1:
                return f"synthesizing {name} for {args.board}: {stages[seeds[0]]} (nextpnr takes minutes)"
            return (f"synthesizing {name} for {args.board}, " + ", ".join(
                f"seed {seed}: {stages[seed]}" for seed in seeds) + " (nextpnr takes minutes)")

    def report(seed, result):
        if isinstance(result, SynthesisError):
            console.print(f"seed {seed}: failed ({str(result).splitlines()[0]})")
        elif len(seeds) > 1:
            console.print(f"seed {seed}: {result.fmax_mhz:.2f} MHz "
                          f"({'met' if result.timing_met else 'missed'})")

    results = {}
    with console.status(line()) as status:
        if args.jobs == 1 or len(seeds) == 1:
            # In this thread, one after another (an interrupt stops the sweep at once).
            for seed in seeds:
                status.update(line())
                results[seed] = run(seed)
                report(seed, results[seed])
            return [results[seed] for seed in seeds]
        # Seeds not started are cancelled by an error or an interrupt; those running finish
        # their tools first (the pool's threads are joined before the program ends).
        pool = concurrent.futures.ThreadPoolExecutor(min(args.jobs, len(seeds)))
        try:
            pending = {pool.submit(run, seed): seed for seed in seeds}
            while pending:
                done, _ = concurrent.futures.wait(
                    pending, timeout=1.0, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    seed = pending.pop(future)
                    results[seed] = future.result()     # a failed seed's is its error
                    report(seed, results[seed])
                status.update(line())
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    return [results[seed] for seed in seeds]


def _synth_design(args, capabilities, pairs_text):
    """What ``nicoll synth`` builds for ``--block``: (name, factory, table parameters)."""
    if args.block == "alu":
        from nicoll.hw.alu import ReductionALU
        name = f"alu_w{args.data_width}_{len(capabilities)}pairs"
        factory = lambda: ReductionALU(args.data_width, capabilities=capabilities)  # noqa: E731
        parameters = {"data_width": args.data_width, "ALU": pairs_text}
    elif args.block == "barrier":
        from nicoll.hw.barrier import BarrierUnit
        # As NicCore builds it: the header receiver in front compares each notice's dst
        # and src with the configured ids (`dst_checked`), so those compares are flops here.
        name = f"barrier_n{args.max_nodes}_k{args.max_children}"
        factory = lambda: BarrierUnit(args.max_nodes, args.max_children,  # noqa: E731
                                      dst_checked=True)
        parameters = {"max_nodes": args.max_nodes, "children": args.max_children,
                      "dst_checked": "yes, as NicCore builds it"}
    elif args.block == "repack":
        from nicoll.hw.repack import RepackUnit
        name = f"repack_w{args.data_width}_cap{args.capacity}_g{args.max_group}"
        factory = lambda: RepackUnit(args.data_width, args.capacity,    # noqa: E731
                                     args.max_group)
        parameters = {"data_width": args.data_width, "buffer": args.capacity,
                      "max_group": args.max_group}
    elif args.block == "engine":
        from nicoll.hw.engine import Engine
        name = (f"engine_w{args.data_width}_n{args.max_nodes}_mem{args.mem_size}"
                f"_{len(capabilities)}pairs")
        factory = lambda: Engine(data_width=args.data_width,            # noqa: E731
                                 max_nodes=args.max_nodes, mem_size=args.mem_size,
                                 alu_capabilities=capabilities)
        parameters = {"data_width": args.data_width, "max_nodes": args.max_nodes,
                      "memory": args.mem_size, "ALU": pairs_text}
    elif args.block == "csr":
        from nicoll.hw.bus.csr import CSRSlave
        from nicoll.hw.core import CSR_ADDR_WIDTH
        name = "csr"
        factory = lambda: CSRSlave(addr_width=CSR_ADDR_WIDTH)         # noqa: E731
        parameters = {"register map": "nicoll.rdl"}
    elif args.block in ("packer", "unpacker"):
        from nicoll.hw.engine.packer import RowPacker
        from nicoll.hw.engine.unpacker import RowUnpacker
        name = f"{args.block}_w{args.data_width}"
        unit = RowPacker if args.block == "packer" else RowUnpacker
        factory = lambda: unit(args.data_width)                         # noqa: E731
        parameters = {"data_width": args.data_width}
    elif args.block == "repack-control":
        from nicoll.hw.repack import RepackControl
        name = (f"repack_control_n{args.max_nodes}_u{args.repack_units}"
                f"_w{args.data_width}_cap{args.capacity}_g{args.max_group}")
        factory = lambda: RepackControl(args.max_nodes, args.repack_units,  # noqa: E731
                                        args.max_group, args.data_width, args.capacity)
        parameters = {"max_ranks": args.max_nodes, "units": args.repack_units,
                      "data_width": args.data_width, "buffer": args.capacity,
                      "max_group": args.max_group}
    else:
        from nicoll.hw.core import NicCore
        name = (f"niccore_w{args.data_width}_n{args.max_nodes}_mem{args.mem_size}"
                f"_{len(capabilities)}pairs_rp{args.repack_units}")
        factory = lambda: NicCore(data_width=args.data_width,           # noqa: E731
                                  max_nodes=args.max_nodes, mem_size=args.mem_size,
                                  alu_capabilities=capabilities,
                                  repack_units=args.repack_units)
        parameters = {"data_width": args.data_width, "max_nodes": args.max_nodes,
                      "memory": args.mem_size, "ALU": pairs_text,
                      "repack units": args.repack_units}
    return name, factory, parameters


def _bench(args):
    import csv
    from rich.table import Table
    from .bench import format_size, parse_sizes, run_bench
    console = _console()
    sizes = parse_sizes(args.sizes)
    from .synthesis import line_rate_gbps, recorded_clock
    if args.clock_mhz:
        clock, clock_source = args.clock_mhz, "given with --clock-mhz"
    else:
        clock, clock_source = recorded_clock(args.data_width)
    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    table = Table(title=f"{args.collective}, {args.nodes} nodes on {args.backend}, "
                        f"{args.dtype} {args.op}, data_width {args.data_width}, "
                        f"µs at {clock:.1f} MHz")
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
                                  mem_size=args.mem_size, clock_mhz=clock,
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
                     + (f" ({rate:,.0f} cycles/s)" if rate else "")
                     + f"; clock: {clock_source}; line rate {args.data_width} b × {clock:.1f} MHz"
                     f" = {line_rate_gbps(args.data_width, clock):.1f} Gb/s per port")
    console.print(table)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0].as_dict()))
            writer.writeheader()
            for row in rows:
                writer.writerow(row.as_dict())
        console.print(f"wrote {args.csv}")
    return 0 if all(row.correct for row in rows) else 1


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
    demo.set_defaults(func=_demo)

    regmap = sub.add_parser("regmap", help="register-map outputs generated from the SystemRDL source")
    group = regmap.add_mutually_exclusive_group(required=True)
    group.add_argument("--format", choices=("md", "h", "rdl", "py"))
    group.add_argument("--write", action="store_true", help="regenerate the generated files")
    group.add_argument("--check", action="store_true", help="exit 1 if a generated file is stale")
    regmap.set_defaults(func=_regmap)

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
    synth.set_defaults(func=_synth)
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
    bench.add_argument("--repack-units", type=int, default=1,
                       help="repack units of each node; node 0's serve alltoall 'aggregate' "
                            "(default 1)")
    bench.add_argument("--csv", help="also write the rows to this CSV file")
    bench.set_defaults(func=_bench)
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
