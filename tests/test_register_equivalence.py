"""The device model and the gateware answer the same register writes alike: random writes to
the engine's and the barrier unit's registers, through the same driver on the model and on
the Amaranth cluster, then every status and error field compared (one set of rules; the
command words' push checks are compared one by one in
tests/test_hw_engine_refusals.py::test_push_checks_agree_with_the_device_model).

Neither side is started into a collective: CONTROL.go is never written and START_AT stays far
ahead, so what is compared is the register file's own behaviour: the queue, the push checks,
arm and clear, the barrier's configuration checks and its route table.
"""

import random

import pytest

import nicoll
from nicoll.driver.engine import pack
from nicoll.hw.regmap.generated import REGMAP
from nicoll.schedule import Region, Step

from conftest import cluster_kwargs

#: Operations per sequence and sequences (seeds); each op is followed by a comparison.
OPS = 80
SEEDS = (1,)
#: Cycles each side is left to settle after a write (the gateware judges a push in registered
#: steps a few cycles later; the model at once).
SETTLE = 16
#: START_AT is written at or above this, so an ARM never starts a run.
FAR = 1 << 48


def _command_words(rng, dev):
    """The words of a command that passes the push checks, or nearly (a region at memory's
    end, a peer at MAX_NODES)."""
    mem, nodes = dev.mem_size, dev.max_nodes

    def region():
        length = rng.choice([8, 64, 256])
        return Region(rng.choice([0, rng.randrange(0, mem, 8), mem - length, mem - length + 8]),
                      length)

    step = Step(send_to=rng.choice([0, 1, nodes - 1, nodes]), send=region(),
                recv_from=rng.choice([0, 1, nodes]), recv=region())
    return pack(dev.engine.command(step, 4))


def _random_op(rng, dev):
    """One random write: a list of ``(register path, field values)``, each valid for the
    register's widths."""
    kind = rng.choice(["cmd", "command", "command", "control", "control", "reduction",
                       "start_at", "peer", "route", "mode", "count", "select"])
    if kind == "command":
        return [(("engine", f"CMD{k}"), {"bits": word})
                for k, word in enumerate(_command_words(rng, dev))] + [
                (("engine", "CONTROL"), {"push": 1})]
    return [_random_write(rng, dev, kind)]


def _random_write(rng, dev, kind):
    nodes = dev.max_nodes
    if kind == "cmd":
        k = rng.randrange(len([r for r in REGMAP.block("engine").registers
                               if r.name.startswith("CMD")]))
        # Small values hit the checks' edges (offsets, lengths, peers) more than uniform.
        value = rng.choice([rng.getrandbits(32), rng.getrandbits(12), rng.getrandbits(4)])
        return ("engine", f"CMD{k}"), {"bits": value}
    if kind == "control":
        return ("engine", "CONTROL"), {"push": rng.getrandbits(1), "arm": rng.getrandbits(1),
                                       "clear": int(rng.random() < 0.05)}
    if kind == "reduction":
        return ("engine", "REDUCTION"), {"op": rng.getrandbits(4), "dtype": rng.getrandbits(4)}
    if kind == "start_at":
        return ("engine", "START_AT"), {"cycle": FAR + rng.getrandbits(32)}
    if kind == "peer":
        register = rng.choice(["PARENT"] + [f"CHILD{j}" for j in range(8)])
        return ("barrier", register), {"id": rng.randrange(2 * nodes),
                                       "valid": rng.getrandbits(1)}
    if kind == "route":
        return ("barrier", "ROUTE"), {"node": rng.randrange(2 * nodes), "slot": rng.randrange(12),
                                      "write": int(rng.random() < 0.8),
                                      "clear": int(rng.random() < 0.1)}
    if kind == "mode":
        return ("barrier", "MODE"), {"mode": rng.getrandbits(2), "sub": rng.getrandbits(2)}
    if kind == "count":
        return ("barrier", "M"), {"count": rng.getrandbits(4)}
    return ("barrier", "SELECT"), {"entry": rng.getrandbits(4), "word": rng.getrandbits(2)}


#: What is compared after each write: every field of these registers.
READS = (("engine", "STATUS"), ("engine", "ERRORS"), ("engine", "STEP"),
         ("barrier", "STATUS"), ("barrier", "ERRORS"), ("barrier", "ROUTE_READ"))


def _state(dev):
    return {f"{block}.{name}": getattr(dev.regs, block)[name].read_fields()
            for block, name in READS}


def _route_reads(rng, dev):
    """ROUTE_READ shows the slot of ROUTE.node: point it at a random node (no write)."""
    return ("barrier", "ROUTE"), {"node": rng.randrange(2 * dev.max_nodes), "slot": 0}


@pytest.fixture(scope="module")
def clusters():
    kwargs = cluster_kwargs("amaranth")
    with nicoll.Cluster(nodes=2, backend="model", **kwargs) as model, \
            nicoll.Cluster(nodes=2, backend="amaranth", **kwargs) as gateware:
        yield model, gateware


@pytest.mark.xdist_group("amaranth_driver")
@pytest.mark.parametrize("seed", SEEDS)
def test_random_register_writes_agree(clusters, seed):
    model, gateware = clusters
    devices = [cl.device(0) for cl in clusters]
    for dev in devices:
        dev.regs.engine.CONTROL.write_fields(clear=1)
        dev.regs.barrier.ROUTE.write_fields(clear=1)
        dev.regs.engine.START_AT.write_fields(cycle=FAR)
    rng = random.Random(seed)
    seen = set()
    for step in range(OPS):
        ops = _random_op(rng, devices[0]) + [_route_reads(rng, devices[0])]
        for (block, name), fields in ops:
            for dev in devices:
                getattr(dev.regs, block)[name].write_fields(**fields)
                dev.idle(SETTLE)
        states = [_state(dev) for dev in devices]
        assert states[0] == states[1], (step, ops)
        seen.update(f"{reg}.{field}" for reg, values in states[0].items()
                    for field, value in values.items() if value)
    # The sequence reached more than the reset state: commands queued, refused and armed,
    # the barrier's configuration refused.
    assert {"engine.STATUS.queued", "engine.STATUS.error", "engine.STATUS.armed",
            "barrier.STATUS.error"} <= seen, sorted(seen)
