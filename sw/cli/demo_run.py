"""``nicoll demo``: an 8-node cluster runs the collectives and shows what happened.

On one Verilator cluster (by default 8 nodes, data_width 256, 1 MiB of device memory each):

1. float32 sum allreduce of ``size`` bytes per rank by recursive halving (seed 000), traced
   beat by beat (:meth:`nicoll.Cluster.trace`);
2. float32 sum reduce_scatter of the same vectors;
3. all-to-all of 8-byte blocks through the repack units (seed 003, "aggregate") and by
   pairwise exchange;
4. an approximate-computing barrier (seed 004, mode "ac", m = N − 1) in which the last rank
   arrives ``straggler`` cycles late and is aborted, next to a normal barrier that waits.

Every result is checked: bit for bit against the documented combining order
(:mod:`nicoll.plan.reduction_order`) and against numpy (exact for data movement, to float32
rounding for sums).  Cycles come from the hardware counters; efficiency is the DESIGN.md bound
over the cycles; µs are at the clock given (by default the Fmax ``nicoll synth`` recorded for
the NIC core in ``docs/synthesis.json``, else 125 MHz).  Two pictures are written: the
per-rank timeline of the allreduce and the barrier timeline.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .bench_run import bound_cycles, format_size, same_outputs
from ..errors import NicollError
from . import synth_record as _synthesis

__all__ = ["DemoRow", "DEMO_CLUSTER", "run_demo", "synthesized_clock", "plot_timeline",
           "plot_barrier"]

#: The cluster the demo opens: the configuration ``nicoll bench allreduce`` builds for the same
#: sizes, so the two share one cached Verilator build.
DEMO_CLUSTER = dict(data_width=256, max_nodes=8, mem_size=1 << 20,
                    alu_capabilities=[("sum", "float32")], repack_units=1)
#: Bytes of each block of the all-to-all (seed 003's case: many small blocks).
BLOCK_BYTES = 8
#: The nominal clock when no synthesis figure is recorded.
NOMINAL_MHZ = _synthesis.NOMINAL_MHZ


@dataclass(frozen=True)
class DemoRow:
    """One line of the demo's table."""
    what: str
    algorithm: str
    correct: bool
    cycles: int | None
    bound: float | None         # cycles, DESIGN.md "Measures"
    note: str = ""

    @property
    def efficiency(self):
        return self.bound / self.cycles if self.bound and self.cycles else None


def synthesized_clock(data_width=256, record=None):
    """``(MHz, where from)``: the NIC core's Fmax from the synthesis record, else nominal
    (see :func:`nicoll.core_clock.recorded_clock`)."""
    from ..core_clock import RECORD_PATH, recorded_clock
    return recorded_clock(data_width, Path(record) if record else RECORD_PATH)


def _near_numpy(outputs, exact):
    return all(o is None or np.allclose(o, w, rtol=1e-4, atol=1e-3)
               for o, w in zip(outputs, exact))


def run_demo(cluster, *, size=1 << 20, straggler=5000, progress=None):
    """Run the demo's calls on ``cluster`` (verilator for the trace); return
    ``(rows, trace, barrier)`` where ``barrier`` holds what the barrier picture needs."""
    from ..plan import reduction_order
    if not isinstance(size, int) or size < 4 * cluster.nodes or size % 4:
        raise NicollError(f"the demo's size is bytes of float32 per rank: a multiple of 4 of "
                          f"at least {4 * cluster.nodes}, not {size!r}")
    if not isinstance(straggler, int) or straggler < 1:
        raise NicollError(f"straggler must be a positive number of cycles, not {straggler!r}")
    say = progress or (lambda message: None)
    nodes, width = cluster.nodes, cluster.data_width
    rng = np.random.default_rng(2026)
    count = size // 4
    xs = [rng.standard_normal(count).astype(np.float32) for _ in range(nodes)]
    exact = np.sum(np.stack(xs).astype(np.float64), axis=0)
    rows = []

    say(f"allreduce, {format_size(size)} B per rank (traced)")
    with cluster.trace() as trace:
        outputs = cluster.allreduce(xs, "sum", "recursive_halving")
    ordered = reduction_order.reference("allreduce", xs, "sum", "recursive_halving")
    rows.append(DemoRow("allreduce float32", "recursive_halving",
                        same_outputs(outputs, ordered) and _near_numpy(outputs, [exact] * nodes),
                        cluster.last.cycles, bound_cycles("allreduce", nodes, size, width)))

    say(f"reduce_scatter, {format_size(size)} B per rank")
    outputs = cluster.reduce_scatter(xs, "sum", algorithm="recursive_halving")
    ordered = reduction_order.reference("reduce_scatter", xs, "sum", "recursive_halving")
    parts = np.array_split(exact, nodes)
    rows.append(DemoRow("reduce_scatter float32", "recursive_halving",
                        same_outputs(outputs, ordered) and _near_numpy(outputs, parts),
                        cluster.last.cycles, bound_cycles("reduce_scatter", nodes, size, width)))

    blocks = [rng.integers(0, 1 << 62, nodes, dtype=np.int64) for _ in range(nodes)]
    want = [np.array([blocks[i][j] for i in range(nodes)]) for j in range(nodes)]
    for algorithm in ("aggregate", "pairwise"):
        say(f"alltoall, {BLOCK_BYTES}-byte blocks, {algorithm}")
        outputs = cluster.alltoall(blocks, algorithm)
        rows.append(DemoRow(f"alltoall {BLOCK_BYTES} B blocks", algorithm, same_outputs(outputs, want),
                            cluster.last.cycles,
                            bound_cycles("alltoall", nodes, BLOCK_BYTES * nodes, width),
                            note=f"{cluster.last.packets[1]} packets sent by rank 1"))

    say(f"barrier, rank {nodes - 1} arrives {straggler} cycles late")
    arrive = [0] * nodes
    arrive[-1] = straggler
    waited = cluster.barrier(arrive=arrive, mode="normal")
    normal = cluster.last.cycles
    # Correct: nobody aborted, and no rank saw the release before the straggler arrived.
    rows.append(DemoRow("barrier", "normal",
                        not waited.aborted and min(cluster.last.release_cycles) >= straggler,
                        normal, None, note="waits for the straggler"))
    m, estimate = nodes - 1, 7
    result = cluster.barrier(arrive=arrive, mode="ac", m=m, estimate=estimate)
    released = cluster.last.release_cycles
    ok = (result.aborted == {nodes - 1} and result.estimates.get(nodes - 1) == estimate
          and max(released) < straggler)
    rows.append(DemoRow("barrier", f"ac, m = {m}", ok, cluster.last.cycles, None,
                        note=f"aborted {sorted(result.aborted)}, "
                             f"{normal - cluster.last.cycles} cycles of waiting saved"))
    barrier = dict(arrive=arrive, released=released, result=result, m=m, nodes=nodes,
                   normal=normal)
    return rows, trace, barrier


_LANE_COLOURS = {"send": "#1f77b4", "receive": "#2ca02c", "reduce": "#d62728"}


def plot_timeline(trace, path, *, title, zoom=None):
    """The per-rank send / receive / reduce activity of ``trace`` over cycles, as a PNG.

    ``zoom``: a ``(first, end)`` cycle range shown in a second panel, where seed 000's overlap
    of exchanging one segment while reducing the previous one is visible beat by beat.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = sorted(trace.lanes)
    lanes = list(_LANE_COLOURS)
    panels = [None] + ([zoom] if zoom else [])
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.0 + 0.55 * len(ranks) * len(panels)),
                             squeeze=False)
    for ax, window in zip(axes[:, 0], panels):
        for i, rank in enumerate(ranks):
            for k, lane in enumerate(lanes):
                y = i * (len(lanes) + 1) + k
                spans = [(a, b - a) for a, b in trace.lanes[rank][lane]]
                ax.broken_barh(spans, (y, 0.8), facecolors=_LANE_COLOURS[lane],
                               label=lane if i == 0 else None)
        ax.set_yticks([i * (len(lanes) + 1) + 1.4 for i in range(len(ranks))])
        ax.set_yticklabels([f"rank {r}" for r in ranks])
        ax.invert_yaxis()
        ax.set_xlabel("cycles from the collective's start")
        if window:
            ax.set_xlim(*window)
            ax.set_title(f"cycles {window[0]}–{window[1]}", fontsize=10)
        else:
            ax.set_xlim(left=0)
            ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=8,
                      frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_barrier(barrier, path, *, title):
    """Arrivals, the m-th completion (the threshold), aborts and every rank's release."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    nodes, arrive, released = barrier["nodes"], barrier["arrive"], barrier["released"]
    result = barrier["result"]
    fig, ax = plt.subplots(figsize=(12, 1.6 + 0.45 * nodes))
    for rank in range(nodes):
        aborted = rank in result.aborted
        ax.scatter([arrive[rank]], [rank], marker="x" if aborted else "o",
                   color="#d62728" if aborted else "#1f77b4", zorder=3,
                   label=("arrival (aborted)" if aborted else "arrival") if rank in
                   (0, nodes - 1) else None)
        ax.scatter([released[rank]], [rank], marker="|", s=200, color="#2ca02c", zorder=3,
                   label="release seen" if rank == 0 else None)
        end = min(released[rank], arrive[rank]) if not aborted else released[rank]
        ax.plot([0, end], [rank, rank], color="#bbbbbb", lw=1, zorder=1)
        if aborted:
            ax.annotate(f"aborted, estimate {result.estimates.get(rank)}",
                        (released[rank], rank), textcoords="offset points", xytext=(8, -3),
                        fontsize=8, color="#d62728")
    if result.mt is not None:
        ax.axvline(result.mt, color="#ff7f0e", ls="--",
                   label=f"threshold: m = {barrier['m']} completions (mt = {result.mt})")
    ax.axvline(barrier["normal"], color="#7f7f7f", ls=":",
               label=f"normal barrier's release ({barrier['normal']})")
    ax.set_yticks(range(nodes))
    ax.set_yticklabels([f"rank {r}" for r in range(nodes)])
    ax.invert_yaxis()
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(0, 1.5 * max(max(arrive), barrier["normal"], max(released)))
    ax.set_xlabel("cycles from the barrier's start (linear to 10, logarithmic above)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
