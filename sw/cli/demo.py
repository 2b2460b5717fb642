"""``nicoll demo``: an 8-node Verilator cluster runs the collectives; the table of results,
cycles and efficiency, and the pictures of the allreduce and the AC barrier."""

import json
from pathlib import Path

from .console import rich_console

__all__ = ["demo_command"]


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


def demo_command(args):
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table
    from .. import Cluster
    from .bench_run import format_size
    from .demo_run import DEMO_CLUSTER, plot_barrier, plot_timeline, run_demo, synthesized_clock
    console = rich_console()
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
    from ..core_clock import line_rate_gbps
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
