# Ref: AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1 (TDATA, TKEEP, TLAST, TDEST)
#      and 2.2 (handshake).
"""Network packet streams.

A packet is a run of beats on an :class:`amaranth.lib.stream` interface; its last beat has
``last`` set.  The payload mirrors the AXI4-Stream signals a MAC or a shell expects:

- ``data``: ``data_width`` bits, byte ``i`` in bits ``8*i .. 8*i+7``;
- ``keep``: one bit per data byte, set for bytes that belong to the packet;
- ``last``: set on the final beat of a packet;
- ``dest``: the destination node id, the routing field.  It is the same on every beat of a
  packet; the switch routes on the first beat's value.

The stream carries only ``payload``, ``valid`` and ``ready`` (Amaranth RFC 61), so framing
lives in the payload layout.
"""

from amaranth.lib import data, stream


__all__ = ["DEST_WIDTH", "packet_beat_layout", "packet_stream"]


#: Width of the ``dest`` field: node ids are 16 bits throughout the register map.
DEST_WIDTH = 16


def _check_data_width(data_width):
    if not isinstance(data_width, int) or isinstance(data_width, bool):
        raise TypeError(f"Data width must be an integer, not {data_width!r}")
    if data_width <= 0 or data_width % 8:
        raise ValueError(f"Data width must be a positive multiple of 8, not {data_width!r}")


def packet_beat_layout(data_width):
    """The payload layout of one beat of a packet stream ``data_width`` bits wide."""
    _check_data_width(data_width)
    return data.StructLayout({
        "data": data_width,
        "keep": data_width // 8,
        "last": 1,
        "dest": DEST_WIDTH,
    })


def packet_stream(data_width):
    """A :class:`amaranth.lib.stream.Signature` carrying :func:`packet_beat_layout` beats.

    Like every stream signature it is the sender's view: a receiving port is ``In(...)``.
    """
    return stream.Signature(packet_beat_layout(data_width))
