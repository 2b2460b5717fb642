"""``nicoll synth``: the design ``--block`` names, its synthesis (one place and route per
seed of ``--seed``, ``--jobs`` at a time), the ``--estimate`` of its paths and the
``--record`` of the best seed."""

from ..errors import NicollError
from .console import rich_console

__all__ = ["synth_command", "SYNTH_TARGETS_MHZ", "SYNTH_BLOCKS"]

#: Clocks the synthesis flow times designs against (MHz): the NIC core per board (the 64-bit
#: core on the Versa 45F, the 256-bit one on the ECPIX-5 85F), and any block alone.
SYNTH_TARGETS_MHZ = {"versa_ecp5": 150, "ecpix5_85": 125, "block": 200}
#: What ``nicoll synth --block`` can build: the whole core or one unit alone.
SYNTH_BLOCKS = ("niccore", "alu", "barrier", "repack", "repack-control", "engine", "packer",
                "unpacker", "csr")


def _pairs(text):
    from ..ops import check_op_dtype
    pairs = set()
    for item in filter(None, (text or "").split(",")):
        op, _, dtype = item.strip().partition(":")
        try:
            pairs.add(check_op_dtype(op, dtype))
        except (TypeError, ValueError) as exc:
            raise NicollError(f"an ALU pair is OP:DTYPE such as sum:float32, not {item!r} "
                              f"({exc})") from None
    return pairs


def synth_command(args):
    from nicoll.hw.synth import SynthesisError, synthesize
    from nicoll.hw.toolchain import apply_tool_env, build_root
    from nicoll.hw.alu import all_capabilities
    apply_tool_env()
    console = rich_console()
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
        from . import synth_record as synthesis
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
