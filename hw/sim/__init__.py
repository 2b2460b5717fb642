"""Gateware of simulations only, never of a NIC core: the N-node cluster (:mod:`.cluster`),
a link of its fabric (:mod:`.fabric`: latency and a gap per packet, in cycles), a link that
can lose, corrupt, duplicate and delay packets (:mod:`.faulty_link`: a CRC (:mod:`.fcs`), the
fault injector (:mod:`.faults`) and a CRC check), the
benches' tops for trees of barrier units (:mod:`.barrier_tree`, its Verilog in
:mod:`.barrier_tree_verilog`) and the repack array (:mod:`.repack_top`), and the Verilog
they are simulated from (:mod:`.verilog`).
"""

__all__ = []
