"""The one exception type nicoll raises for bad input and device-side errors.

It lives beside the gateware because checks the driver and the gateware share (barrier trees,
:mod:`nicoll.hw.tree`) raise it, and the gateware imports nothing from the driver; the driver
gives it as :class:`nicoll.NicollError` (:mod:`nicoll.errors`).
"""

__all__ = ["NicollError"]


class NicollError(ValueError):
    """Bad input to the driver, or an error the device reported.

    A ``ValueError`` so that callers validating arguments can catch it the usual way; the
    message names the problem and, where there is a fixed set, the allowed values.
    """
