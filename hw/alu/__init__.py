"""The reduction ALU (:mod:`.reduction`), the (op, type) pairs a build computes
(:mod:`.capabilities`) and its Verilog top for the bench (:mod:`.verilog_top`); its IEEE-754
units: the adder (:mod:`.fpadd`), the multiplier (:mod:`.fpmul`) with its limb products
(:mod:`.limbs`), and the formats they share (:mod:`.fpformat`).
"""

from .reduction import ReductionALU, operand_layout, result_layout, LANE_BITS
from .capabilities import all_capabilities, check_capabilities, capability_masks
from .verilog_top import alu_verilog

__all__ = ["ReductionALU", "operand_layout", "result_layout", "all_capabilities",
    "check_capabilities", "capability_masks", "alu_verilog", "LANE_BITS"]
