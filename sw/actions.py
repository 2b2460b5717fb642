"""What a schedule step does with the bytes it receives.

Kept apart from :mod:`nicoll.schedule` so the gateware (:mod:`nicoll.hw.engine`) takes the
values from here without importing the schedule compilers.
"""

import enum

__all__ = ["Action"]


class Action(enum.IntEnum):
    """What a step does with the bytes it receives."""
    #: Store them in the receive region.
    COPY = 0
    #: Store ``local ∘ received`` (the local bytes are the left operand).
    REDUCE_LOCAL_FIRST = 1
    #: Store ``received ∘ local``.
    REDUCE_RECEIVED_FIRST = 2

    @property
    def reduces(self):
        return self is not Action.COPY
