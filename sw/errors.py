"""The one exception type the driver raises for bad input and device-side errors.

Defined in :mod:`nicoll.hw.errors`, beside the gateware, because the checks of structures the
driver and the gateware share (barrier trees, :mod:`nicoll.hw.tree`) raise it too, and the
gateware imports nothing from the driver.
"""

from nicoll.hw.errors import NicollError

__all__ = ["NicollError"]
