"""Every module says what it gives: a ``__all__`` of unique names, each of them defined.

One check over every module of the three packages, in place of a copy of each module's list
(a copy only says the list did not change, and has to change with it).
"""

import importlib

import pytest

from conftest import module_name, source_files

#: Modules run as programs, whose names are not for import.
PROGRAMS = {"nicoll.__main__"}


def modules():
    return [name for name in map(module_name, source_files()) if name not in PROGRAMS]


def test_every_package_has_modules():
    names = modules()
    assert {"nicoll", "nicoll.cluster", "nicoll.hw.engine", "nicoll.hw.params",
            "nicoll.sim.verilator_backend"} <= set(names)


@pytest.mark.parametrize("name", modules())
def test_every_name_a_module_gives_exists(name):
    module = importlib.import_module(name)
    given = getattr(module, "__all__", None)
    assert isinstance(given, (list, tuple)), f"{name} has no __all__"
    assert all(isinstance(n, str) for n in given), given
    assert len(set(given)) == len(given), f"{name} gives a name twice: {given}"
    missing = [n for n in given if not hasattr(module, n)]
    assert not missing, f"{name} gives names it does not define: {missing}"
