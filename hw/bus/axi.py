# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E), A2 "Signal Descriptions",
#      B1 "AMBA AXI4-Lite"; AMBA 4 AXI4-Stream Protocol Specification (IHI0051A), 2.1.
"""AXI4, AXI4-Lite and AXI4-Stream interface signatures.

Member names are the AMBA signal names in lower case, so that a converted top level exposes
``<port>__awaddr`` and friends, which cocotbext-axi finds by prefix.  Directions are those of
the manager (master): a subordinate (slave) port is declared ``In(signature)``.

The global ACLK/ARESETn pair is not a member: a component runs in its clock domain.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


__all__ = [
    "AXI4LiteSignature", "AXI4Signature", "AXI4StreamSignature",
    "BURST_FIXED", "BURST_INCR", "BURST_WRAP",
]


# AxBURST encoding.  Ref: IHI0022E, A3.4.1, Table A3-3.
BURST_FIXED = 0b00
BURST_INCR = 0b01
BURST_WRAP = 0b10


def _check_width(what, value, *, minimum):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be at least {minimum}, not {value!r}")


def _check_data_width(value, allowed):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Data width must be an integer, not {value!r}")
    if value not in allowed:
        raise ValueError(f"Data width must be one of {', '.join(map(str, allowed))}, "
                         f"not {value!r}")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, manager's view.

    Parameters
    ----------
    addr_width : int
        Width of ``awaddr`` / ``araddr`` (byte address), 1..64.
    data_width : int
        32 or 64 (IHI0022E, B1.1: "all transactions are of the width of the data bus ...
        32-bit or 64-bit").
    """

    def __init__(self, addr_width, data_width=32):
        _check_width("Address width", addr_width, minimum=1)
        if addr_width > 64:
            raise ValueError(f"Address width must be at most 64, not {addr_width!r}")
        _check_data_width(data_width, (32, 64))
        self._addr_width = addr_width
        self._data_width = data_width
        super().__init__({
            # Write address channel.
            "awaddr":  Out(addr_width),
            "awprot":  Out(3),
            "awvalid": Out(1),
            "awready": In(1),
            # Write data channel.
            "wdata":   Out(data_width),
            "wstrb":   Out(data_width // 8),
            "wvalid":  Out(1),
            "wready":  In(1),
            # Write response channel.
            "bresp":   In(2),
            "bvalid":  In(1),
            "bready":  Out(1),
            # Read address channel.
            "araddr":  Out(addr_width),
            "arprot":  Out(3),
            "arvalid": Out(1),
            "arready": In(1),
            # Read data channel.
            "rdata":   In(data_width),
            "rresp":   In(2),
            "rvalid":  In(1),
            "rready":  Out(1),
        })

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    def __eq__(self, other):
        return (type(other) is type(self) and
                other.addr_width == self.addr_width and
                other.data_width == self.data_width)

    def __repr__(self):
        return f"AXI4LiteSignature({self.addr_width}, data_width={self.data_width})"


class AXI4Signature(wiring.Signature):
    """Full AXI4, manager's view.

    Carries every signal cocotbext-axi's ``AxiBus`` requires plus the optional lock, cache,
    prot and qos signals; region and user signals are left out (IHI0022E, A8.1 and A8.3 give
    their defaults).

    Parameters
    ----------
    addr_width : int
        Width of ``awaddr`` / ``araddr`` (byte address), 1..64.
    data_width : int
        8, 16, ... 1024 bits (IHI0022E, A1.3.1 lists these widths).
    id_width : int
        Width of the transaction ID signals, at least 1 (cocotbext-axi requires ``awid``).
    """

    def __init__(self, addr_width, data_width, id_width):
        _check_width("Address width", addr_width, minimum=1)
        if addr_width > 64:
            raise ValueError(f"Address width must be at most 64, not {addr_width!r}")
        _check_data_width(data_width, (8, 16, 32, 64, 128, 256, 512, 1024))
        _check_width("ID width", id_width, minimum=1)
        self._addr_width = addr_width
        self._data_width = data_width
        self._id_width = id_width
        members = {}
        # Read and write address channels carry the same set of signals.
        # Ref: IHI0022E, A2.2 (write address) and A2.5 (read address).
        for ch in ("aw", "ar"):
            members.update({
                f"{ch}id":    Out(id_width),
                f"{ch}addr":  Out(addr_width),
                f"{ch}len":   Out(8),    # beats - 1 (A3.4.1)
                f"{ch}size":  Out(3),    # log2(bytes per beat)
                f"{ch}burst": Out(2),
                f"{ch}lock":  Out(1),    # AXI4: one bit, exclusive access
                f"{ch}cache": Out(4),
                f"{ch}prot":  Out(3),
                f"{ch}qos":   Out(4),
                f"{ch}valid": Out(1),
                f"{ch}ready": In(1),
            })
            if ch == "aw":
                # Ref: IHI0022E, A2.3 (write data) and A2.4 (write response).
                members.update({
                    "wdata":  Out(data_width),
                    "wstrb":  Out(data_width // 8),
                    "wlast":  Out(1),
                    "wvalid": Out(1),
                    "wready": In(1),
                    "bid":    In(id_width),
                    "bresp":  In(2),
                    "bvalid": In(1),
                    "bready": Out(1),
                })
        # Ref: IHI0022E, A2.6 (read data).
        members.update({
            "rid":    In(id_width),
            "rdata":  In(data_width),
            "rresp":  In(2),
            "rlast":  In(1),
            "rvalid": In(1),
            "rready": Out(1),
        })
        super().__init__(members)

    @property
    def addr_width(self):
        return self._addr_width

    @property
    def data_width(self):
        return self._data_width

    @property
    def id_width(self):
        return self._id_width

    def __eq__(self, other):
        return (type(other) is type(self) and
                other.addr_width == self.addr_width and
                other.data_width == self.data_width and
                other.id_width == self.id_width)

    def __repr__(self):
        return (f"AXI4Signature(addr_width={self.addr_width}, data_width={self.data_width}, "
                f"id_width={self.id_width})")


class AXI4StreamSignature(wiring.Signature):
    """AXI4-Stream with TDATA, TKEEP, TLAST and TDEST, transmitter's view.

    Inside the gateware packets travel as :func:`nicoll.hw.net.packet.packet_stream`; this
    signature names the same wires as AXI4-Stream does, for the ports of a Verilog top that
    a MAC, a shell or cocotbext-axi's ``AxiStreamBus`` connects to.

    Parameters
    ----------
    data_width : int
        Width of ``tdata``, a positive multiple of 8 (IHI0051A, 2.1: an integer number of
        bytes); ``tkeep`` has one bit per byte.
    dest_width : int
        Width of ``tdest``, at least 1.
    user_width : int
        Width of ``tuser`` (IHI0051A, 2.1: sideband user information); 0 (default) leaves
        ``tuser`` out.  nicoll's network ports carry the packet's ``control`` bit in it.
    """

    def __init__(self, data_width, dest_width, user_width=0):
        if not isinstance(data_width, int) or isinstance(data_width, bool):
            raise TypeError(f"Data width must be an integer, not {data_width!r}")
        if data_width <= 0 or data_width % 8:
            raise ValueError(f"Data width must be a positive multiple of 8, not {data_width!r}")
        _check_width("Destination width", dest_width, minimum=1)
        _check_width("User width", user_width, minimum=0)
        self._data_width = data_width
        self._dest_width = dest_width
        self._user_width = user_width
        members = {
            "tdata":  Out(data_width),
            "tkeep":  Out(data_width // 8),
            "tlast":  Out(1),
            "tdest":  Out(dest_width),
        }
        if user_width:
            members["tuser"] = Out(user_width)
        members.update({"tvalid": Out(1), "tready": In(1)})
        super().__init__(members)

    @property
    def data_width(self):
        return self._data_width

    @property
    def dest_width(self):
        return self._dest_width

    @property
    def user_width(self):
        return self._user_width

    def __eq__(self, other):
        return (type(other) is type(self) and
                other.data_width == self.data_width and
                other.dest_width == self.dest_width)

    def __repr__(self):
        return f"AXI4StreamSignature({self.data_width}, {self.dest_width})"
