"""Gateware of simulations only, never of a NIC core: the N-node cluster (:mod:`.cluster`),
the benches' tops for trees of barrier units (:mod:`.barrier_tree`) and the repack engine
(:mod:`.repack_top`), and the Verilog they are simulated from (:mod:`.verilog`).
"""

__all__ = []
