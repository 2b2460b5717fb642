"""Synthesis: the harness a component is synthesized in and the board table (:mod:`.harness`),
the yosys / nextpnr flow for a board (:mod:`.flow`) and nextpnr's figures it reads
(:mod:`.report`), the pass that makes registers after block-RAM reads the DP16KD's output
registers (:mod:`.bram_outreg`), and the logic-depth check (:mod:`.logic_depth`).
"""

from .harness import BOARDS, HarnessCost, SynthHarness
from .report import (CriticalPath, Endpoint, NextpnrReport, parse_nextpnr_report,
                     netlist_cell_types, SynthResult)
from .flow import SynthesisError, synthesize, extract_plan, ROUTERS, TIMING_WEIGHTS

__all__ = ["BOARDS", "HarnessCost", "SynthHarness", "CriticalPath", "Endpoint", "NextpnrReport",
    "parse_nextpnr_report", "netlist_cell_types", "SynthResult", "SynthesisError", "synthesize",
    "extract_plan", "ROUTERS", "TIMING_WEIGHTS"]
