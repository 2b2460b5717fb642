"""The register map as data, and the generators that turn the SystemRDL source into it.

``hw/regmap/nicoll.rdl`` is the one source of every register offset, field and reset value.
:func:`compile_rdl` elaborates it with systemrdl-compiler into a :class:`RegisterMap`;
:func:`emit_python` writes that map as ``hw/regmap/generated.py`` (module
``nicoll.hw.regmap.generated``, so neither the driver nor the gateware needs the RDL compiler
at run time), and :func:`emit_markdown` / :func:`emit_cheader`
write ``docs/regmap.md`` and ``docs/nicoll_regmap.h`` through peakrdl-markdown and
peakrdl-cheader.  ``make docs`` (``nicoll regmap --write``) regenerates all three;
``tests/test_regmap.py`` fails when any of them is stale.

The access rules every backend implements (the Amaranth CSR slave, the Python device model):

- Addresses are byte addresses; the bus is 32 bits wide, so the low two bits are ignored.
- A read of a word that no register covers, or a write to one, answers DECERR; a read
  returns 0 and nothing changes.
- A write changes only software-writable fields, and only their bytes whose strobe is set.
  A write to a read-only register answers OKAY and changes nothing.
- A register wider than 32 bits is read as 32-bit words, lowest first; reading the lowest
  word latches the upper words, so a low-then-high read sequence is one consistent value.
- A ``singlepulse`` field reads 0; writing 1 to it gives hardware a one-cycle pulse (the cycle
  after the write).  A ``swmod`` field tells hardware, by a one-cycle pulse in the cycle after
  the write, that software wrote a byte of it; the field already holds the new value then.
"""

import functools
from dataclasses import dataclass
from pathlib import Path
import enum


__all__ = [
    "RDL_PATH", "BusResponse", "Field", "Register", "Block", "RegisterMap",
    "compile_rdl", "emit_python", "emit_markdown", "emit_cheader", "generated_outputs",
    "stale_outputs",
]


#: The SystemRDL source, inside the ``nicoll.hw`` package so a plain install carries it.
RDL_PATH = Path(__file__).resolve().parent / "nicoll.rdl"


class BusResponse(enum.IntEnum):
    """AXI response codes (AMBA AXI spec, RRESP/BRESP encoding)."""
    OKAY = 0b00
    EXOKAY = 0b01
    SLVERR = 0b10
    DECERR = 0b11


@dataclass(frozen=True)
class Field:
    """One field of a register: bits ``lsb .. lsb+width-1`` of the register value."""
    name: str
    lsb: int
    width: int
    sw: str             # "r", "w" or "rw": what the bus may do
    hw: str             # "na" (constant or pure storage), "w" (hardware drives it), "r" (hardware reads it)
    reset: int | None   # reset value; None for values hardware drives
    desc: str = ""
    #: SystemRDL ``singlepulse``: a write of 1 gives hardware a one-cycle pulse; reads 0.
    singlepulse: bool = False
    #: SystemRDL ``swmod``: hardware is told (a one-cycle pulse) when software writes it.
    swmod: bool = False

    @property
    def mask(self):
        return ((1 << self.width) - 1) << self.lsb

    @property
    def sw_readable(self):
        """Software reads the field's value (a single-pulse field always reads 0)."""
        return "r" in self.sw and not self.singlepulse

    @property
    def sw_writable(self):
        return "w" in self.sw

    @property
    def is_constant(self):
        """Read-only, not driven by hardware: the reset value is the value forever."""
        return self.hw == "na" and not self.sw_writable

    @property
    def is_storage(self):
        return self.sw_writable

    @property
    def hw_driven(self):
        return self.hw == "w" and not self.sw_writable


@dataclass(frozen=True)
class Register:
    """A register; ``address`` is absolute, ``offset`` relative to its block."""
    name: str
    address: int
    offset: int
    width: int
    desc: str
    fields: tuple

    @property
    def words(self):
        """Number of 32-bit bus words the register spans."""
        return self.width // 32

    @property
    def sw_writable(self):
        return any(f.sw_writable for f in self.fields)

    def field(self, name):
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name!r} has no field {name!r}; "
                       f"it has {[f.name for f in self.fields]}")


@dataclass(frozen=True)
class Block:
    """A functional block: a contiguous group of registers starting with ID and VERSION."""
    name: str
    offset: int
    desc: str
    registers: tuple

    def register(self, name):
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name!r} has no register {name!r}; "
                       f"it has {[r.name for r in self.registers]}")

    @property
    def id_tag(self):
        return self.register("ID").field("tag").reset

    @property
    def version(self):
        """(major, minor) this block's VERSION register resets to."""
        v = self.register("VERSION")
        return v.field("major").reset, v.field("minor").reset


@dataclass(frozen=True)
class RegisterMap:
    name: str
    desc: str
    size: int           # bytes of address space the map spans
    blocks: tuple

    def block(self, name):
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"register map has no block {name!r}; it has {[b.name for b in self.blocks]}")

    def registers(self):
        """Every register of every block, in address order."""
        return sorted((r for b in self.blocks for r in b.registers), key=lambda r: r.address)

    @functools.cached_property
    def _words(self):
        """Word address -> (register, word index), built on first use."""
        return {r.address + 4 * k: (r, k) for r in self.registers() for k in range(r.words)}

    def decode(self, address):
        """The (register, word index) that covers a byte address, or None when unmapped."""
        return self._words.get(address & ~3)

    @property
    def addr_width(self):
        """Bits of byte address needed to reach every register."""
        return max(2, (self.size - 1).bit_length())


# ---------------------------------------------------------------------------------------------
# RDL -> RegisterMap

def _text(node, prop):
    value = node.get_property(prop)
    return " ".join((value or "").split())


def compile_rdl(path=RDL_PATH):
    """Elaborate the SystemRDL source and return ``(RegisterMap, root node)``."""
    from systemrdl import RDLCompiler
    from systemrdl.node import RegNode

    compiler = RDLCompiler()
    compiler.compile_file(str(path))
    root = compiler.elaborate()
    top = root.top
    blocks = []
    for child in top.children():
        regs = []
        for node in child.descendants():
            if not isinstance(node, RegNode):
                continue
            width = node.get_property("regwidth")
            if node.get_property("accesswidth") != 32 or width % 32:
                raise ValueError(f"{node.get_path()}: the bus is 32 bits wide; "
                                 f"regwidth {width} / accesswidth {node.get_property('accesswidth')} "
                                 f"are not supported")
            fields = tuple(
                Field(name=f.inst_name, lsb=f.lsb, width=f.width,
                      sw=f.get_property("sw").name, hw=f.get_property("hw").name,
                      reset=f.get_property("reset"), desc=_text(f, "desc"),
                      singlepulse=bool(f.get_property("singlepulse")),
                      swmod=bool(f.get_property("swmod")))
                for f in sorted(node.fields(), key=lambda f: f.lsb))
            regs.append(Register(name=node.inst_name, address=node.absolute_address,
                                 offset=node.absolute_address - child.absolute_address,
                                 width=width, desc=_text(node, "desc"), fields=fields))
        names = [r.name for r in regs]
        if len(set(names)) != len(names):
            raise ValueError(f"block {child.inst_name!r} repeats a register name: {names}")
        blocks.append(Block(name=child.inst_name, offset=child.absolute_address,
                            desc=_text(child, "desc"), registers=tuple(regs)))
    regmap = RegisterMap(name=top.inst_name, desc=_text(top, "desc"), size=top.size,
                         blocks=tuple(blocks))
    return regmap, root


# ---------------------------------------------------------------------------------------------
# Emitters

def emit_python(regmap):
    """Source of ``hw/regmap/generated.py``: the register map as a Python literal."""
    out = [
        '"""The nicoll register map as data.',
        "",
        "Generated from hw/regmap/nicoll.rdl by `nicoll regmap --write` (make docs). Do not edit.",
        '"""',
        "",
        "from . import Block, Field, Register, RegisterMap",
        "",
        '__all__ = ["REGMAP"]',
        "",
        "REGMAP = RegisterMap(",
        f"    name={regmap.name!r},",
        f"    desc={regmap.desc!r},",
        f"    size={regmap.size:#x},",
        "    blocks=(",
    ]
    for b in regmap.blocks:
        out.append(f"        Block(name={b.name!r}, offset={b.offset:#05x}, desc={b.desc!r}, registers=(")
        for r in b.registers:
            out.append(f"            Register(name={r.name!r}, address={r.address:#05x}, "
                       f"offset={r.offset:#04x}, width={r.width}, desc={r.desc!r}, fields=(")
            for f in r.fields:
                reset = "None" if f.reset is None else f"{f.reset:#x}"
                flags = "".join(f", {flag}=True" for flag in ("singlepulse", "swmod")
                                if getattr(f, flag))
                out.append(f"                Field(name={f.name!r}, lsb={f.lsb}, width={f.width}, "
                           f"sw={f.sw!r}, hw={f.hw!r}, reset={reset}, desc={f.desc!r}{flags}),")
            out.append("            )),")
        out.append("        )),")
    out += ["    ),", ")", ""]
    return "\n".join(out)


def _export_to_text(exporter_factory, root, filename, **kwargs):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / filename
        exporter_factory().export(root.top, str(path), **kwargs)
        return path.read_text()


def emit_markdown(root):
    from peakrdl_markdown import MarkdownExporter
    body = _export_to_text(MarkdownExporter, root, "regmap.md")
    head = ("<!-- Generated from hw/regmap/nicoll.rdl by `nicoll regmap --write` (make docs). "
            "Do not edit. -->\n\n")
    return head + body


def emit_cheader(root):
    from peakrdl_cheader.exporter import CHeaderExporter
    # Names follow the hierarchy (NICOLL_REGS__ALU__HEADER__ID...), not the parametrized types.
    head = ("// Generated from hw/regmap/nicoll.rdl by `nicoll regmap --write` (make docs). "
            "Do not edit.\n")
    return head + _export_to_text(CHeaderExporter, root, "nicoll_regmap.h", reuse_typedefs=False)


def generated_outputs(repo_root, rdl_path=RDL_PATH):
    """Map each generated file (a path under ``repo_root``) to its expected contents."""
    repo_root = Path(repo_root)
    regmap, root = compile_rdl(rdl_path)
    return {
        repo_root / "hw" / "regmap" / "generated.py": emit_python(regmap),
        repo_root / "docs" / "regmap.md": emit_markdown(root),
        repo_root / "docs" / "nicoll_regmap.h": emit_cheader(root),
    }


def stale_outputs(repo_root, rdl_path=RDL_PATH):
    """The generated files under ``repo_root`` that differ from what ``rdl_path`` gives."""
    stale = []
    for path, text in generated_outputs(repo_root, rdl_path).items():
        if not path.exists() or path.read_text() != text:
            stale.append(path)
    return stale
