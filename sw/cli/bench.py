"""``nicoll bench``: an OSU-style sweep of one collective, with cycles, bandwidth and
efficiency against the bound; with ``--mpi``, allreduce under mpiexec through
:class:`nicoll.mpi.Comm` (:mod:`nicoll.cli.bench_mpi`)."""

from .console import rich_console

__all__ = ["bench_command"]


def bench_command(args):
    if args.mpi:
        from .bench_mpi import bench_mpi_command
        return bench_mpi_command(args)
    from rich.table import Table
    from .bench_run import format_size, parse_sizes, run_bench, write_csv
    console = rich_console()
    sizes = parse_sizes(args.sizes)
    from ..core_clock import line_rate_gbps, recorded_clock
    if args.clock_mhz:
        clock, clock_source = args.clock_mhz, "given with --clock-mhz"
    else:
        clock, clock_source = recorded_clock(args.data_width)
    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    table = Table(title=f"{args.collective}, {args.nodes} nodes on {args.backend}, "
                        f"{args.dtype} {args.op}, data_width {args.data_width}, "
                        f"fabric {args.fabric}, µs at {clock:.1f} MHz")
    for column in ("size", "algorithm", "cycles avg", "min", "max", "µs", "algbw GB/s",
                   "busbw GB/s", "bound", "efficiency", "result"):
        table.add_column(column, justify="right")
    with console.status("starting") as status:
        def on_row(row):
            eff = row.efficiency
            console.print(f"  {format_size(row.size):>6} B  {row.algorithm:<18} "
                          f"{row.cycles_max:>9} cycles{' (estimate)' if row.estimated else ''}  "
                          f"{'-' if eff is None else f'{eff:.3f}'}  "
                          f"{'✓' if row.correct else '✗'}")
        rows, figures = run_bench(args.collective, nodes=args.nodes, sizes=sizes,
                                  algorithms=algorithms, backend=args.backend, dtype=args.dtype,
                                  op=args.op, data_width=args.data_width,
                                  mem_size=args.mem_size, clock_mhz=clock,
                                  repack_units=args.repack_units,
                                  repack_node=args.repack_node, fabric=args.fabric,
                                  progress=lambda message: status.update(message),
                                  on_row=on_row)
    for row in rows:
        eff = row.efficiency
        table.add_row(format_size(row.size), row.algorithm,
                      f"~{row.cycles_avg:.0f}" if row.estimated else f"{row.cycles_avg:.0f}",
                      str(row.cycles_min), str(row.cycles_max), f"{row.microseconds:.2f}",
                      f"{row.algbw_gbs:.3f}", f"{row.busbw_gbs:.3f}", f"{row.bound:.0f}",
                      "-" if eff is None else f"{eff:.3f}", "✓" if row.correct else "✗")
    rate = figures["cycles_per_second"]
    table.caption = (f"{figures['simulated_cycles']:,} cycles simulated in "
                     f"{figures['wall_seconds']:.1f} s"
                     + (f" ({rate:,.0f} cycles/s)" if rate else "")
                     + f"; clock: {clock_source}; line rate {args.data_width} b × {clock:.1f} MHz"
                     f" = {line_rate_gbps(args.data_width, clock):.1f} Gb/s per port")
    if any(row.estimated for row in rows):
        table.caption += ("; ~ cycles are estimates of the cost model calibrated on Verilator "
                          "(nicoll.plan.schedule_cost.cluster_cost_model, "
                          "nicoll.plan.repack_cost.cluster_repack_cycles, docs/fabric.md): "
                          "the model backend counts no cycles")
    console.print(table)
    if args.csv:
        write_csv(args.csv, rows)
        console.print(f"wrote {args.csv}")
    return 0 if all(row.correct for row in rows) else 1
