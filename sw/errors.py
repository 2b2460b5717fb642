"""The one exception type the driver raises for bad input and device-side errors."""

__all__ = ["NicollError"]


class NicollError(ValueError):
    """Bad input to the driver, or an error the device reported.

    A ``ValueError`` so that callers validating arguments can catch it the usual way; the
    message names the problem and, where there is a fixed set, the allowed values.
    """
