"""What the tests of the engine's driver (nicoll.driver.engine) and its device model
(nicoll.model.engine) share: the build's sizes, commands as CMD words, a model cluster
(module-scoped ``cluster``, cleared for each test by ``cl``), pushes through its registers,
and GOOD, a step every check passes, as CMD words with some fields changed (``good_with``).
"""

import pytest
from amaranth.lib import data

import nicoll
from nicoll.driver import engine as eng
from nicoll.hw.engine import COMMAND_LAYOUT
from nicoll.schedule import Region, Step

from conftest import CLUSTER_KWARGS


MEM_SIZE = CLUSTER_KWARGS["mem_size"]
MAX_NODES = CLUSTER_KWARGS["max_nodes"]
WIDTH = CLUSTER_KWARGS["data_width"] // 8


def command_value(words):
    return sum(w << (32 * k) for k, w in enumerate(words))


def command_const(fields):
    return data.Const(COMMAND_LAYOUT, command_value(eng.pack(fields)))


@pytest.fixture(scope="module")
def cluster():
    with nicoll.Cluster(nodes=3, backend="model", **CLUSTER_KWARGS) as cl:
        yield cl


@pytest.fixture
def cl(cluster):
    for dev in cluster.devices:
        dev.engine.clear()
        dev.mem_write(0, bytes(MEM_SIZE))
    return cluster


def push_step(dev, step, itemsize=4):
    dev.engine.push(dev.engine.command(step, itemsize))


def push_words(dev, words):
    for k, word in enumerate(words):
        dev.regs.engine[f"CMD{k}"].write(word)
    dev.regs.engine.CONTROL.write_fields(push=1)


def wait_done(cl, ranks):
    for _ in range(1000):
        if all(cl.device(r).engine.status().done for r in ranks):
            return
    raise AssertionError({r: cl.device(r).engine.status() for r in ranks})


GOOD = Step(send_to=1, send=Region(0, 64), recv_from=2, recv=Region(64, 64))


def good_with(data_width=256, **changes):
    """GOOD's command fields for a build of ``data_width`` with some fields changed (nested
    dicts merged)."""
    fields = eng.lower(GOOD, data_width=data_width, itemsize=4, max_packet_beats=256)
    for name, value in changes.items():
        if isinstance(value, dict):
            fields[name] = {**fields[name], **value}
        else:
            fields[name] = value
    return eng.pack(fields)
