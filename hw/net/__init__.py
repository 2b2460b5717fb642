"""The packet network of a node: the packet header and stream layouts, header senders,
arbiters and demultiplexers (:mod:`.packet`), and the switch that joins the nodes of a
simulated cluster (:mod:`.switch`).
"""

__all__ = []
