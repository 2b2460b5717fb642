"""Synthesis: the yosys / nextpnr flow for a board and its report (:mod:`.flow`), the pass
that makes registers after block-RAM reads the DP16KD's output registers
(:mod:`.bram_outreg`), and the logic-depth check (:mod:`.logic_depth`).
"""

from .flow import (BOARDS, HarnessCost, SynthHarness, CriticalPath, Endpoint, NextpnrReport,
                   parse_nextpnr_report, netlist_cell_types, SynthResult, SynthesisError,
                   synthesize, extract_plan, ROUTERS, TIMING_WEIGHTS)

__all__ = ["BOARDS", "HarnessCost", "SynthHarness", "CriticalPath", "Endpoint", "NextpnrReport",
    "parse_nextpnr_report", "netlist_cell_types", "SynthResult", "SynthesisError", "synthesize",
    "extract_plan", "ROUTERS", "TIMING_WEIGHTS"]
