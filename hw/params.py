"""Build parameters the blocks share: the data widths a build can take, and their checks.

Every block that takes a ``data_width`` checks it here, so a width the design cannot build is
refused with the same message wherever it is given.
"""

__all__ = ["DATA_WIDTHS", "is_int", "check_int", "check_data_width"]

#: Bits per beat of the packet streams and per device-memory row a build can have.
DATA_WIDTHS = (64, 128, 256, 512)


def is_int(value):
    """Whether ``value`` is an integer build parameter (an ``int`` that is not a ``bool``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name, value, low, high=None):
    """Raise TypeError unless ``value`` is an integer, ValueError unless ``low <= value`` (and
    ``value <= high``, if given); ``name`` names the parameter in the message."""
    if not is_int(value):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if high is None and value < low:
        raise ValueError(f"{name} must be at least {low}, not {value!r}")
    if high is not None and not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value!r}")


def check_data_width(data_width, *, widths=DATA_WIDTHS):
    """Raise TypeError / ValueError unless ``data_width`` is one of ``widths``."""
    if not is_int(data_width):
        raise TypeError(f"data_width must be an integer, not {data_width!r}")
    if data_width not in widths:
        raise ValueError(f"data_width must be one of {', '.join(map(str, widths))}, "
                         f"not {data_width!r}")
