# amaranth: UnusedElaboratable=no
"""Seed sweeps of the synthesis command: each seed recorded on its own, the seed list's and
options' errors, the recorded command line, seeds run in parallel and come back in seed
order, a failed seed neither stops the sweep nor is recorded, and plans extracted from
threads land in their folders.
"""

from types import SimpleNamespace

import pytest

from nicoll.hw.synth import Endpoint


def _fake_result(seed, fmax_mhz, outreg_ff=0, endpoints_missed=None):
    """A SynthResult's fields as the record reads them (no tool run)."""
    return SimpleNamespace(
        name="packer_w64", board="versa_ecp5", device="LFE5UM-45F-8BG381", seed=seed,
        lut4=600, harness_lut4=50, ff=590, harness_ff=200, dp16kd=2, mult18x18d=0,
        outreg_ff=outreg_ff, endpoints_missed=endpoints_missed,
        worst_endpoints=(Endpoint("core.x", "DI", 5.43), Endpoint("core.y", "CE", 5.1)),
        fmax_mhz=fmax_mhz, clock_constraint_mhz=200.0, timing_met=fmax_mhz >= 200.0,
        critical_path=None, wall_time_s=60.0, tool_versions={"amaranth": "0.5"})


def test_seed_sweep_is_recorded_seed_by_seed(tmp_path):
    from nicoll.cli import synth_record as synthesis
    sweep = [_fake_result(1, 198.4, 24), _fake_result(2, 205.1, 24), _fake_result(3, 190.0, 24)]
    best = max(sweep, key=lambda r: r.fmax_mhz)
    entry = synthesis.entry(best, block="packer", data_width=64, command="nicoll synth",
                            parameters={"data_width": 64}, sweep=sweep)
    assert entry["seed"] == 2 and entry["fmax_mhz"] == 205.1 and entry["timing_met"]
    assert [s["seed"] for s in entry["seeds"]] == [1, 2, 3]
    assert [s["timing_met"] for s in entry["seeds"]] == [False, True, False]
    table = synthesis.markdown(synthesis.record(entry, tmp_path / "s.json", tmp_path / "s.md"))
    assert "seeds: 1: 198.4 MHz (missed), 2: 205.1 MHz (met), 3: 190.0 MHz (missed)" in table
    assert entry["outreg_ff"] == 24
    assert "24 flip-flops became block-RAM output registers" in table
    single = synthesis.entry(_fake_result(1, 198.4), block="packer", data_width=64,
                             command="nicoll synth", parameters={})
    assert "seeds" not in single and "outreg_ff" not in single
    assert "endpoints_missed" not in single
    # With nextpnr's detailed timing: how many endpoints are late, per seed and for the row.
    sweep = [_fake_result(1, 198.4, endpoints_missed=7), _fake_result(2, 185.0,
                                                                      endpoints_missed=40)]
    late = synthesis.entry(sweep[0], block="packer", data_width=64, command="nicoll synth",
                           parameters={}, sweep=sweep)
    assert late["endpoints_missed"] == 7
    assert late["worst_endpoints"] == ["5.43 ns core.x:DI", "5.10 ns core.y:CE"]
    table = synthesis.markdown([late])
    assert "7 endpoint pins miss the target; the latest: 5.43 ns core.x:DI; 5.10 ns core.y:CE" \
        in table
    assert "seeds: 1: 198.4 MHz (missed, 7 endpoints late), 2: 185.0 MHz (missed, 40 " \
        "endpoints late)" in table


@pytest.mark.parametrize("text,message", [("1,x", "integers separated by commas"),
                                          ("1,1", "distinct and non-negative"),
                                          ("-2", "distinct and non-negative")])
def test_seed_list_errors(text, message, capsys):
    from nicoll.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "--block", "packer", "--estimate", "--seed", text])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_recorded_command_leaves_out_jobs_and_record():
    from nicoll.cli.synth import _recorded_argv
    argv = ["synth", "--seed", "1,2,3", "--jobs", "3", "--record", "--jobs=2", "--data-width", "64"]
    assert _recorded_argv(argv) == ["synth", "--seed", "1,2,3", "--data-width", "64"]


def test_seeds_run_in_parallel_and_come_back_in_seed_order(tmp_path):
    """With --jobs 2, two seeds' runs overlap (each waits at a barrier for the other, which
    times out if they ran one after the other) and the results keep the seeds' order."""
    import threading
    from types import SimpleNamespace
    from rich.console import Console
    from nicoll.cli.synth import _synth_seeds
    meeting = threading.Barrier(2, timeout=10)
    folders = {}

    def fake_synthesize(factory, *, name, board, build_dir, seed, target_mhz, router, widelut,
                        timing_weight, progress):
        progress("nextpnr")
        folders[seed] = build_dir
        if seed in (2, 3):
            meeting.wait()
        return SimpleNamespace(seed=seed, fmax_mhz=100.0 + seed, timing_met=False)

    args = SimpleNamespace(seed=[3, 1, 2], jobs=2, board="versa_ecp5", router="router1",
                           nowidelut=False, timing_weight=None)
    results = _synth_seeds(args, Console(file=open(tmp_path / "out", "w")), fake_synthesize,
                           None, "x", tmp_path, 150.0)
    assert [r.seed for r in results] == [3, 1, 2]
    assert folders == {s: tmp_path / f"seed{s}" for s in (1, 2, 3)}


def test_a_failed_seed_neither_stops_the_sweep_nor_is_recorded(tmp_path, monkeypatch, capsys):
    """A seed whose tools fail is reported as failed; the other seeds still run and their
    results are printed, the command exits with an error naming the seed and its stage, and
    --record writes nothing.  One seed alone that fails is the same error, not a traceback."""
    import nicoll.hw.synth as hw_synth
    from nicoll.cli import synth_record as synthesis
    from nicoll.cli import main
    monkeypatch.setenv("NICOLL_BUILD_DIR", str(tmp_path / "build"))
    ran = []

    def fake_synthesize(factory, *, name, seed, **options):
        ran.append(seed)
        if seed == 2:
            raise hw_synth.SynthesisError(f"Synthesis of {name!r} failed in ecppack (exit 1); "
                                          "build folder somewhere\nlog tail")
        result = _fake_result(seed, 190.0 + seed)
        result.to_text = lambda: f"{name}: {result.fmax_mhz:.2f} MHz at seed {seed}"
        return result

    monkeypatch.setattr(hw_synth, "synthesize", fake_synthesize)
    record_before = synthesis.RECORD_PATH.read_bytes()
    table_before = synthesis.TABLE_PATH.read_bytes()
    assert main(["synth", "--block", "packer", "--data-width", "64", "--seed", "1,2,3",
                 "--jobs", "2", "--record"]) == 2
    out, err = capsys.readouterr()
    assert sorted(ran) == [1, 2, 3]
    assert "seed 2: failed (Synthesis of 'packer_w64' failed in ecppack (exit 1); " in out
    assert "seed sweep: seed 1 191.00 MHz, seed 2 failed, seed 3 193.00 MHz (best: seed 3)" in out
    assert "packer_w64: 193.00 MHz at seed 3" in out
    assert err.startswith("nicoll: error: seed 2: Synthesis of 'packer_w64' failed in ecppack")
    assert err.rstrip().endswith("nothing recorded")
    assert synthesis.RECORD_PATH.read_bytes() == record_before
    assert synthesis.TABLE_PATH.read_bytes() == table_before

    ran.clear()
    assert main(["synth", "--block", "packer", "--data-width", "64", "--seed", "2"]) == 2
    out, err = capsys.readouterr()
    assert ran == [2] and "Traceback" not in err
    assert err.startswith("nicoll: error: seed 2: Synthesis of 'packer_w64' failed in ecppack")


def test_timing_weight_must_be_in_range(capsys):
    from nicoll.cli import main
    assert main(["synth", "--block", "packer", "--data-width", "64", "--timing-weight", "0"]) != 0
    assert "--timing-weight must be between 1 and 1000, not 0" in capsys.readouterr().err


def test_jobs_must_be_positive(capsys):
    from nicoll.cli import main
    assert main(["synth", "--block", "packer", "--data-width", "64", "--jobs", "0"]) != 0
    assert "--jobs must be at least 1, not 0" in capsys.readouterr().err


def test_plans_extracted_from_threads_land_in_their_folders(tmp_path):
    """Amaranth's BuildPlan.extract changes the working directory while it writes; runs of
    `nicoll synth --jobs` extract from threads of one process.  Through extract_plan, every
    plan's files land in its own folder and the working directory is unchanged."""
    import os
    import threading
    from amaranth.build.run import BuildPlan
    from nicoll.hw.synth import extract_plan
    cwd = os.getcwd()
    errors = []

    def extract_many(k):
        try:
            for round_ in range(40):
                plan = BuildPlan(script="build")
                for f in range(20):
                    plan.add_file(f"f{f}.txt", f"{k} {round_}")
                folder = extract_plan(plan, tmp_path / f"plan{k}")
                assert folder == (tmp_path / f"plan{k}").resolve()
                for f in range(20):
                    assert (folder / f"f{f}.txt").read_text() == f"{k} {round_}"
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=extract_many, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert os.getcwd() == cwd
