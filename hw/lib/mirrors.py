"""Flops that stand for an expression, and the check that they do.

Timing work moves a decision a cycle earlier into a flop loaded with what an expression will
be next cycle, so the decision leaves the cycle that uses it (docs/engine.md, the gateware's
timing passes).  A component doing so records each
such flop with the expression it replaced; the tests hold every pair equal in every cycle of
their runs, so a flop that drifts from its expression fails a test instead of a collective.
"""

__all__ = ["Mirrored"]


class Mirrored:
    """Mixin for a component whose elaboration records ``(flop, expression)`` pairs.

    The component appends its own pairs to ``self._mirrors`` while it elaborates and may name
    the parts whose pairs join its own in ``self._mirrored``; :attr:`mirrors` gathers both
    when asked, so it is complete once the component has been elaborated.
    """

    @property
    def mirrors(self):
        """(flop, the expression it stands for) pairs of this component and its parts,
        which a test holds equal in every cycle (built by elaboration)."""
        pairs = list(getattr(self, "_mirrors", ()))
        for part in getattr(self, "_mirrored", ()):
            if part is not None:
                pairs += part.mirrors
        return pairs
