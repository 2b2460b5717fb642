"""The node's buses: AXI signatures (:mod:`.axi`), the register slave generated from the
register map (:mod:`.csr`) and the device memory behind AXI4 (:mod:`.devmem`).
"""

__all__ = []
