"""Building blocks every block uses: register slices (:mod:`.skid`), the registered
``now >= at`` compare (:mod:`.deadline`), the one-hot state and carry-save helpers
(:mod:`.builder`), the block-RAM attributes (:mod:`.memattrs`) and the flops held to an
expression by the tests (:mod:`.mirrors`).
"""

__all__ = []
