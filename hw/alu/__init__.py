"""The reduction ALU (:mod:`.reduction`) and its IEEE-754 units: the adder (:mod:`.fpadd`),
the multiplier (:mod:`.fpmul`) and the formats they share (:mod:`.fpformat`).
"""

from .reduction import (ReductionALU, operand_layout, result_layout, all_capabilities,
                        check_capabilities, capability_masks, alu_verilog, LANE_BITS)

__all__ = ["ReductionALU", "operand_layout", "result_layout", "all_capabilities",
    "check_capabilities", "capability_masks", "alu_verilog", "LANE_BITS"]
