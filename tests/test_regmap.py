"""The register map: one SystemRDL source, generated outputs that must be fresh."""

import shutil
import subprocess
from pathlib import Path

import pytest

from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.regmap import RDL_PATH, compile_rdl, emit_python, generated_outputs, stale_outputs

REPO = Path(__file__).resolve().parent.parent


def test_generated_files_are_fresh():
    stale = stale_outputs(REPO)
    assert not stale, (f"generated register-map files are stale: "
                       f"{[str(p.relative_to(REPO)) for p in stale]}; run `make docs`")


def test_a_changed_source_makes_outputs_stale(tmp_path):
    # The freshness check must be able to fail: move SCRATCH and see every output go stale.
    source = RDL_PATH.read_text()
    assert "} SCRATCH @ 0x18;" in source
    changed = tmp_path / "changed.rdl"
    changed.write_text(source.replace("} SCRATCH @ 0x18;", "} SCRATCH @ 0x1C;"))
    for relative in ("hw/regmap/generated.py", "docs/regmap.md", "docs/nicoll_regmap.h"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    stale = {p.relative_to(tmp_path).as_posix() for p in stale_outputs(tmp_path, changed)}
    assert stale == {"hw/regmap/generated.py", "docs/regmap.md", "docs/nicoll_regmap.h"}


def test_loaded_map_equals_the_compiled_source():
    regmap, _ = compile_rdl()
    assert regmap == REGMAP
    assert emit_python(regmap) == (REPO / "hw" / "regmap" / "generated.py").read_text()


def test_every_block_has_an_id_and_version_header():
    names = [b.name for b in REGMAP.blocks]
    assert names == ["global", "alu", "engine", "repack", "barrier"]
    tags = set()
    for block in REGMAP.blocks:
        assert block.registers[0].name == "ID" and block.registers[0].offset == 0
        assert block.registers[1].name == "VERSION" and block.registers[1].offset == 4
        assert block.id_tag not in tags
        tags.add(block.id_tag)
        major, minor = block.version
        assert major is not None and minor is not None


def test_registers_are_aligned_and_disjoint():
    covered = {}
    for reg in REGMAP.registers():
        assert reg.address % 4 == 0
        for word in range(reg.words):
            address = reg.address + 4 * word
            assert address not in covered, f"{reg.name} overlaps {covered[address]}"
            covered[address] = reg.name
        bits = 0
        for f in reg.fields:
            assert bits & f.mask == 0, f"{reg.name}.{f.name} overlaps another field"
            bits |= f.mask
            assert f.lsb + f.width <= reg.width


def test_decode():
    cycles = REGMAP.block("global").register("CYCLES")
    assert REGMAP.decode(cycles.address) == (cycles, 0)
    assert REGMAP.decode(cycles.address + 4) == (cycles, 1)
    assert REGMAP.decode(cycles.address + 7) == (cycles, 1)      # low address bits ignored
    assert REGMAP.decode(REGMAP.size) is None
    assert REGMAP.decode(0xFFFC) is None


def test_c_header_compiles(tmp_path):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not on PATH (the project needs g++ for Verilator anyway)")
    header = REPO / "docs" / "nicoll_regmap.h"
    source = tmp_path / "use.c"
    source.write_text(f'#include "{header}"\n'
                      "int scratch_offset(void) { return (int)sizeof(nicoll_regs_t); }\n")
    subprocess.run([gcc, "-std=c11", "-Wall", "-Werror", "-c", str(source),
                    "-o", str(tmp_path / "use.o")], check=True)


def test_outputs_name_the_source():
    for path, text in generated_outputs(REPO).items():
        assert "Generated from hw/regmap/nicoll.rdl" in text, path


def test_alu_block_has_one_capability_register_per_dtype_in_enum_order():
    from nicoll.hw.ops import DType, ReduceOp
    alu = REGMAP.block("alu")
    addresses = [alu.register(f"OPS_{dtype.name}").address for dtype in DType]
    assert addresses == sorted(addresses)
    for dtype in DType:
        assert alu.register(f"OPS_{dtype.name}").field("ops").width == len(ReduceOp)
