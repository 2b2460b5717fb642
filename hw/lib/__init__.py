"""Building blocks every block uses: register slices (:mod:`.skid`), the registered
``now >= at`` compare (:mod:`.deadline`), the one-hot state and carry-save helpers
(:mod:`.builder`) and the block-RAM attributes (:mod:`.memattrs`).
"""

__all__ = []
