"""Running Amaranth-simulator testbenches with a watchdog, for the unit tests of each block."""

from amaranth.sim import Simulator

__all__ = ["PERIOD", "watchdog", "run_testbenches", "stream_put"]

#: Clock period of unit-test simulations, in seconds (only cycle counts matter).
PERIOD = 1e-8


def watchdog(cycles):
    """A background testbench that fails the simulation after ``cycles`` clock periods, so a
    handshake that never comes fails a test instead of hanging it."""
    async def run(ctx):
        await ctx.delay(cycles * PERIOD)
        raise TimeoutError(f"testbench still running after {cycles} cycles")
    return run


def run_testbenches(dut, *testbenches, watchdog_cycles=100_000, background=()):
    """Simulate ``dut`` with a clock until every testbench returns.  The testbenches in
    ``background`` (monitors that never return) run beside them and are stopped with them."""
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(watchdog_cycles), background=True)
    for testbench in background:
        sim.add_testbench(testbench, background=True)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    sim.run()


async def stream_put(ctx, stream, payload):
    """Offer ``payload`` on ``stream`` (an ``amaranth.lib.stream`` interface the testbench
    drives) until the design takes it, then drop valid.  Back-to-back calls keep valid high
    from one to the next (no clock edge passes between them), so a source loses no cycle."""
    ctx.set(stream.payload, payload)
    ctx.set(stream.valid, 1)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)

