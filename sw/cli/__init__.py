"""The ``nicoll`` command line (also ``python -m nicoll``).

    nicoll demo [--nodes 8] [--size 1M]         an 8-node Verilator cluster runs the collectives
    nicoll regmap --format md|h|rdl|py          print a register-map output
    nicoll regmap --write | --check             regenerate the generated files / check they are fresh
    nicoll synth --board versa_ecp5|ecpix5_85 [--block BLOCK]   utilization, Fmax
    nicoll bench <collective> [--nodes N] [--sizes 1:1M] [--algorithm A,B] [--backend B]
                                                OSU-style sweep: cycles, bandwidth, efficiency
    mpiexec -n N nicoll bench allreduce --mpi [--address A] [--sizes 8,1M] [--repeat 20]
                                                per size: in-NIC cycles and host µs per call

Modules
-------
- :mod:`~nicoll.cli.parser`: the argument parser and :func:`main` (the console script
  ``nicoll``), which runs the subcommand the arguments name;
- :mod:`~nicoll.cli.demo`, :mod:`~nicoll.cli.regmap`, :mod:`~nicoll.cli.synth`,
  :mod:`~nicoll.cli.bench`: the subcommands;
- :mod:`~nicoll.cli.demo_run`, :mod:`~nicoll.cli.bench_run`, :mod:`~nicoll.cli.synth_record`:
  the work behind three of them (the demo's runs and pictures, the OSU-style sweep, the
  synthesis record in docs/), which ``python -m nicoll.sim.speed`` and the tests use too;
- :mod:`~nicoll.cli.bench_mpi`: ``bench --mpi``, the sweep of every rank under mpiexec;
- :mod:`~nicoll.cli.console`: the rich console they print to.
"""

from .parser import main

__all__ = ["main"]
