"""Gateware of simulations only, never of a NIC core: the N-node cluster (:mod:`.cluster`),
a link of its fabric (:mod:`.fabric`: latency and a gap per packet, in cycles), the
benches' tops for trees of barrier units (:mod:`.barrier_tree`, its Verilog in
:mod:`.barrier_tree_verilog`) and the repack array (:mod:`.repack_top`), and the Verilog
they are simulated from (:mod:`.verilog`).
"""

__all__ = []
