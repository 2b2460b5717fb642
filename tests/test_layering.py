"""Dependencies run one way: ``nicoll.sim`` → ``nicoll`` (the driver) → ``nicoll.hw``.

The gateware package imports nothing of the driver or of the simulation package: the facts
both sides need (the register map, packet and command layouts, enums, barrier trees, the
error type, the tool paths of synthesis) live in ``nicoll.hw`` and the driver imports them
from there.  Read from the source text, so an import inside a function counts too.
"""

import ast

import pytest

from conftest import REPO, module_name, source_files


def imported_modules(source, module, *, is_package=False):
    """The absolute names of the modules ``source`` (the text of ``module``) imports."""
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            # `from pkg import name` may name a submodule: count both.
            names.append(target)
            names += [f"{target}.{alias.name}" for alias in node.names]
    return names


def outside_hw(names):
    """The names among ``names`` that are nicoll modules outside ``nicoll.hw``."""
    return sorted({n for n in names
                   if (n == "nicoll" or n.startswith("nicoll."))
                   and not (n == "nicoll.hw" or n.startswith("nicoll.hw."))})


def hw_sources():
    return [path for path in source_files() if path.relative_to(REPO).parts[0] == "hw"]


def test_the_scan_finds_the_imports_it_must_refuse():
    # Relative and absolute, at the top and inside a function, as the old gateware had them.
    source = ("from ..actions import Action\n"
              "from .tree import BarrierTree\n"
              "def f():\n    from nicoll.sim.toolchain import tool_env\n"
              "from .. import cluster\n")
    names = imported_modules(source, "nicoll.hw.engine")
    assert outside_hw(names) == ["nicoll", "nicoll.actions", "nicoll.actions.Action",
                                 "nicoll.cluster", "nicoll.sim.toolchain",
                                 "nicoll.sim.toolchain.tool_env"]
    assert "nicoll.hw.tree" in names
    assert imported_modules("from . import Block\n", "nicoll.hw.regmap", is_package=True) == [
        "nicoll.hw.regmap", "nicoll.hw.regmap.Block"]


def test_there_are_gateware_sources_to_scan():
    names = {module_name(p) for p in hw_sources()}
    assert {"nicoll.hw", "nicoll.hw.engine", "nicoll.hw.regmap",
            "nicoll.hw.regmap.generated", "nicoll.hw.tree"} <= names


@pytest.mark.parametrize("path", hw_sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_gateware_imports_nothing_of_the_driver_or_the_simulators(path):
    names = imported_modules(path.read_text(), module_name(path),
                             is_package=path.name == "__init__.py")
    assert outside_hw(names) == []
