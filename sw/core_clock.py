"""The NIC core's recorded clock: the Fmax ``nicoll synth --record`` kept in
``docs/synthesis.json`` for a data width, the clock every cycle count is converted to time
at (the cluster's fabric, ``nicoll demo``, ``nicoll bench``), and a port's line rate at it.
"""

import json
from pathlib import Path

# The clock cycles are converted at when no NIC core of that data width has been recorded:
# the cost models' nominal clock, one figure for both.
from .fabric import NOMINAL_MHZ

__all__ = ["RECORD_PATH", "NOMINAL_MHZ", "load", "recorded_clock", "line_rate_gbps"]

#: docs/synthesis.json of the checkout.
RECORD_PATH = Path(__file__).resolve().parents[1] / "docs" / "synthesis.json"


def load(path=RECORD_PATH):
    """The record's entries; none when the file is missing or unreadable."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return []


def recorded_clock(data_width, path=RECORD_PATH):
    """``(MHz, where from)`` for converting cycles of a ``data_width`` NIC core to time: the
    Fmax of the newest NIC core of that width in the record (routed, whether or not it met
    its target: it is the clock that design runs at), else :data:`NOMINAL_MHZ`, labelled as
    nominal."""
    cores = [e for e in load(path) if e.get("block") == "niccore"
             and e.get("data_width") == data_width and e.get("fmax_mhz")]
    if not cores:
        return NOMINAL_MHZ, (f"nominal {NOMINAL_MHZ:g} MHz (no NIC core at data_width "
                             f"{data_width} recorded in docs/synthesis.json)")
    best = max(cores, key=lambda e: e["date"])
    return float(best["fmax_mhz"]), (f"Fmax of {best['name']} on {best.get('board', '?')} "
                                     f"({best['date']})")


def line_rate_gbps(data_width, clock_mhz):
    """One port's line rate, W·f, in Gb/s: a beat of ``data_width`` bits per clock."""
    return data_width * clock_mhz / 1e3
