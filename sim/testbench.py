"""Running Amaranth-simulator testbenches with a watchdog, for the unit tests of each block."""

from amaranth.sim import Simulator

__all__ = ["PERIOD", "watchdog", "run_testbenches"]

#: Clock period of unit-test simulations, in seconds (only cycle counts matter).
PERIOD = 1e-8


def watchdog(cycles):
    """A background testbench that fails the simulation after ``cycles`` clock periods, so a
    handshake that never comes fails a test instead of hanging it."""
    async def run(ctx):
        await ctx.delay(cycles * PERIOD)
        raise TimeoutError(f"testbench still running after {cycles} cycles")
    return run


def run_testbenches(dut, *testbenches, watchdog_cycles=100_000):
    """Simulate ``dut`` with a clock until every testbench returns."""
    sim = Simulator(dut)
    sim.add_clock(PERIOD)
    sim.add_testbench(watchdog(watchdog_cycles), background=True)
    for testbench in testbenches:
        sim.add_testbench(testbench)
    sim.run()
