"""Issue 26: sweeps and the census as trustworthy as a single run. One test per failure the
adversarial round found: every file a sweep writes is checked against the run it describes (an
edited, copied or stale one makes its run "unreadable", never relabelled), one writer per run and
per sweep root, each run counted once, sizes and devices checked before work, Ctrl-C pressed
repeatedly gives one line, and commands given a sweep folder use it or say why not."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import scaled_by_load

from common.cli import UsageError
from tasks.training.sweeps import FAILED, POINT, SWEEP, signed
from tests.refusals import cli, contents, one_line
from tests.test_sweep import PARAMS, TINY
from toylens.sweeps.executors import LocalExecutor

RUN = Path("default") / "attn-only-2x1"
TINY_ARGS = [
    "--models",
    "attn-only-2x1",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--batch-size",
    "32",
    "--nouns",
    "8",
    "--no-progress",
    "--jobs",
    "1",
]


def plan(out: Path, seeds="0,1", grid=()):
    from tasks.winograd import WinogradTask
    from toylens.sweeps.plan import parse_grid, plan_sweep
    from toylens.arguments import parse_seeds

    return plan_sweep(
        WinogradTask, PARAMS, TINY, ["attn-only-2x1"], parse_seeds(seeds), parse_grid(list(grid), WinogradTask), out
    )


def sweep(out: Path, **options):
    from toylens.sweeps.driver import run_sweep

    return run_sweep(
        plan(out),
        out,
        LocalExecutor(jobs=1),
        "python -m tasks.winograd sweep (test)",
        progress=False,
        write=lambda line: None,
        **options,
    )


@pytest.fixture
def copied(finished_sweep, tmp_path) -> Path:
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    return out


def read(path: Path):
    return json.loads(path.read_text())


def write(path: Path, data) -> None:
    path.write_text(json.dumps(data))


def resign(data: dict) -> dict:
    """As a forger would: the checksum recomputed over the edited content."""
    return signed({key: value for key, value in data.items() if key != "sha256"})


def census_of(out: Path):
    from probes.census import take_census

    (group,) = take_census(out).groups
    return group


# ---- every file a sweep writes is checked against the run it describes --------------------------


def edit_share(data):
    data["edge"] = {
        "sender": "L0H0",
        "receiver": "L1H0",
        "component": "q",
        "position": 14,
        "position_label": "p14",
        "recovered": 0.01,
        "restored": 0.0,
    }
    data["nodes"] = ["L0H0", "L1H0@p14"]


@pytest.mark.parametrize(
    "edit, signed_again, fragment",
    [
        (edit_share, False, "sha256 differs"),
        (lambda d: d.update(heldout=1e308), False, "sha256 differs"),
        (lambda d: d.update(faithfulness=float("nan")), False, "faithfulness must be a finite number"),
        (lambda d: d.update(model_name="block-2", n_layers=1), True, "different model_name, n_layers"),
        (lambda d: d.update(heldout=0.99), True, "different heldout"),
    ],
)
def test_an_edited_circuit_json_makes_its_run_unreadable_never_relabelled(copied, edit, signed_again, fragment):
    path = copied / RUN / "seed0" / "circuit.json"
    data = read(path)
    edit(data)
    write(path, resign(data) if signed_again else data)
    group = census_of(copied)
    assert group.finished == 1 and [seed for seed, _ in group.unreadable] == [0]
    assert fragment in group.unreadable[0][1] and "\n" not in group.unreadable[0][1]
    assert all(0 not in seeds for seeds in group.seeds.values())


def test_a_circuit_json_copied_from_another_seed_or_a_folder_of_that_name_is_unreadable(copied):
    shutil.copy(copied / RUN / "seed1" / "circuit.json", copied / RUN / "seed0" / "circuit.json")
    group = census_of(copied)
    assert [seed for seed, _ in group.unreadable] == [0] and "different run_sha256" in group.unreadable[0][1]
    (copied / RUN / "seed1" / "circuit.json").unlink()
    (copied / RUN / "seed1" / "circuit.json").mkdir()
    assert [seed for seed, _ in census_of(copied).unreadable] == [0, 1]


def test_a_point_json_claiming_other_values_makes_its_runs_unreadable(copied):
    path = copied / "default" / POINT
    write(path, resign({**read(path), "values": {"lr": 0.5}}))
    group = census_of(copied)
    assert group.finished == 0 and len(group.unreadable) == 2
    assert "records grid values" in group.unreadable[0][1]
    write(path, {**read(path), "point": "d_model=64"})  # edited by hand: checksum
    assert "sha256 differs" in census_of(copied).unreadable[0][1]


def test_a_stale_failed_json_beside_a_finished_run_is_not_counted_as_a_failure(copied):
    from probes.census import take_census
    from tasks.training.sweeps import failed_record

    write(copied / RUN / "seed0" / FAILED, failed_record("default", "attn-only-2x1", 0, "RuntimeError: old"))
    census = take_census(copied)
    assert (census.groups[0].finished, census.groups[0].failed) == (2, 0)
    assert any("beside a finished run" in line for line in census.others)
    shutil.copy(copied / RUN / "seed0" / FAILED, copied / RUN / "seed1" / FAILED)
    (copied / RUN / "seed1" / "metrics.json").unlink()
    group = census_of(copied)  # seed 0's record in seed 1's folder
    assert group.failed == 0 and "not the run folder it is in" in dict(group.unreadable)[1]


def test_retraining_a_sweep_point_removes_its_circuit_and_the_census_says_so(copied):
    from toylens.cli import main_for_task

    main_for_task(
        "winograd",
        ["train", *TINY_ARGS, "--seeds", "0-0", "--lr", "0.003", "--overwrite", "--out", str(copied / "default")],
    )
    run = copied / RUN / "seed0"
    assert read(run / "config.json")["training"]["lr"] == 0.003 and not (run / "circuit.json").exists()
    group = census_of(copied)
    assert (
        group.finished == 1
        and "other settings than the sweep planned (different training.lr" in dict(group.unreadable)[0]
    )


# ---- each run counted once; a census counts only its sweep's runs -------------------------------


def test_runs_the_sweep_did_not_plan_are_not_counted_but_reported(copied, tiny_runs):
    from probes.census import take_census

    shutil.copytree(tiny_runs / "attn-only-2x1", copied / "default" / "extra" / "attn-only-2x1")
    census = take_census(copied)
    assert census.groups[0].finished == 2
    assert any("did not plan" in line and "extra" in line for line in census.others)


def test_training_into_a_sweep_root_and_a_sweep_into_a_train_runs_folder_are_refused(copied, tiny_runs, tmp_path):
    before = contents(copied)
    one_line(cli("tasks.winograd", "train", *TINY_ARGS, "--out", str(copied)), "is a sweep folder")
    runs = tmp_path / "runs"
    shutil.copytree(tiny_runs, runs)
    one_line(
        cli("tasks.winograd", "sweep", *TINY_ARGS, "--seeds", "0-0", "--out", str(runs)),
        "holds runs that no sweep planned",
    )
    assert contents(copied) == before and not (runs / "default").exists()


def test_a_comparison_counts_each_seed_once(tiny_runs, tmp_path):
    runs = tmp_path / "winograd"
    shutil.copytree(tiny_runs, runs)
    shutil.copytree(runs / "attn-only-2x1", runs / "default" / "attn-only-2x1")  # as a sweep into it did
    one_line(cli("toylens", "accuracy", str(runs)), "both attn-only-2x1 seed 0", "counts each seed once")


def test_a_census_file_the_user_recreated_is_never_replaced(copied):
    from toylens.census import census_command

    census_command(copied)
    (copied / "census" / "census.md").write_text("my notes\n")
    with pytest.raises(UsageError, match="census.md was changed or replaced"):
        census_command(copied)
    assert (copied / "census" / "census.md").read_text() == "my notes\n"


# ---- one writer per run and per sweep root ----------------------------------------------------

HOLD = (
    "import sys, time; from common.lock import folder_lock\nwith folder_lock(sys.argv[1], 'test'):\n"
    "    print('held', flush=True); time.sleep(60)"
)


@pytest.mark.isolated
@pytest.mark.parametrize(
    "held, command",
    [
        ("sweep", ["train", "--out", "sweep/default"]),  # a sweep holds its root: a point is covered
        ("sweep/default", ["sweep", "--out", "sweep"]),  # a training holds a point: the root is refused
    ],
)
def test_a_writer_of_a_folder_above_or_below_a_held_one_is_refused_naming_the_holder(tmp_path, held, command):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / held)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        command = [*command[:-1], str(tmp_path / command[-1])]
        one_line(cli("tasks.winograd", *command, *TINY_ARGS, "--seeds", "0-0"), f"in use by process {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "sweep" / "default" / "attn-only-2x1").exists()


def test_a_sweep_and_a_training_started_at_once_into_one_folder_one_proceeds(tmp_path):
    """The issue's mixed run: the sweep at lr 1e-3, the training at 3e-3, into one run folder."""
    out = tmp_path / "sweep"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    commands = [
        ["tasks.winograd", "sweep", *TINY_ARGS, "--seeds", "0-0", "--lr", "0.001", "--out", str(out)],
        ["tasks.winograd", "train", *TINY_ARGS, "--seeds", "0-0", "--lr", "0.003", "--out", str(out / "default")],
    ]
    started = [
        subprocess.Popen([sys.executable, "-m", *c], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in started]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    refused = next(r for r in results if r[0] == 2)
    one_line(refused, "in use by process")
    run = out / RUN / "seed0"
    lr = read(run / "config.json")["training"]["lr"]
    if results[0][0] == 0:  # the sweep's run: its circuit describes exactly these weights and settings
        from probes.census import read_circuit
        from tasks.training.runs import Run

        assert lr == 0.001 and read_circuit(Run(run)).seed == 0
    else:
        assert lr == 0.003 and not (run / "circuit.json").exists()


# ---- sizes and devices checked before work ---------------------------------------------------


def test_a_huge_seed_range_is_refused_at_once_with_its_estimate(tmp_path):
    started = time.perf_counter()
    line = one_line(
        cli("tasks.winograd", "sweep", *TINY_ARGS, "--seeds", "0-99999", "--out", str(tmp_path / "s")),
        "this sweep has 100000 runs",
        "pass --yes",
    )
    assert time.perf_counter() - started < scaled_by_load(60) and "roughly" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("device", ["cpu:5", "mps:1"])
def test_a_device_this_machine_lacks_is_refused(tiny_runs, device):
    code, _, err = cli("probes.circuit", "report", str(tiny_runs), "--device", device)
    assert code == 2 and err.count("\n") == 1 and f"no {device} device" in err


# ---- Ctrl-C pressed again and again gives one line --------------------------------------------


@pytest.mark.isolated
def test_ctrl_c_pressed_during_the_interrupted_line_itself_stays_one_line(capsys):
    """The second press lands while the first one's line is being made (as it does when pressed
    2-20 ms apart): it is ignored, not a KeyboardInterrupt traceback."""
    from common.cli import run_cli

    class Pressed(KeyboardInterrupt):
        def __str__(self):
            for _ in range(5):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.005)
            return "finished runs are kept"

    def command():  # as training does: the first press stops it, and it says how to continue
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise Pressed() from None

    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped:
            run_cli(command)
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert stopped.value.code == 130 and err.strip() == "interrupted: finished runs are kept"


def wait_for(path: Path, process, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.001)


@pytest.mark.isolated
@pytest.mark.parametrize("moment", ["generate", "training"])
def test_ctrl_c_pressed_twice_during_generate_or_training_is_one_line(tmp_path, moment):
    """Real presses, 2, 10 and 20 ms apart: while the task's generate() makes the data of a fresh
    cache (the lock is taken, no config.json yet), or once training has saved a checkpoint."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for index, gap in enumerate([0.002, 0.02] if moment == "generate" else [0.01]):
        out = tmp_path / f"r{index}"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tasks.winograd",
                "train",
                "--models",
                "attn-only-2x1",
                "--seeds",
                "0-0",
                "--steps",
                "100000",
                "--nouns",
                "24",
                "--jobs",
                "1",
                "--no-progress",
                "--checkpoint-every",
                "20",
                "--out",
                str(out),
            ],
            env={**env, "TOYLENS_CACHE": str(tmp_path / f"cache{index}")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(
            out / ".toylens.lock" if moment == "generate" else out / RUN.name / "seed0" / "train_state.safetensors",
            process,
        )
        generating = not (out / RUN.name / "seed0" / "config.json").exists()
        process.send_signal(signal.SIGINT)
        time.sleep(gap)
        process.send_signal(signal.SIGINT)
        process.wait(timeout=120)
        err = process.stderr.read()
        lines = [line for line in err.splitlines() if line.strip()]
        assert process.returncode == 130 and "Traceback" not in err, err
        assert len(lines) == 1 and lines[0].startswith("interrupted: "), err
        assert generating or moment == "training"


# ---- stored fields of the wrong shape: one line -------------------------------------------------


def test_a_renamed_model_name_is_one_line_or_a_correct_comparison(tiny_runs, tmp_path):
    from tasks.training.runs import run_sha256

    runs = tmp_path / "winograd"
    shutil.copytree(tiny_runs, runs)
    path = runs / "attn-only-2x1" / "seed0" / "config.json"
    config = read(path)
    config["model_name"] = "renamed"
    config["run_sha256"] = run_sha256(config)
    write(path, config)
    code, out, err = cli("toylens", "accuracy", str(runs))
    assert "Traceback" not in err and (code == 2 and err.count("\n") == 1 or code == 0 and "renamed" in out), err


def test_an_unfinished_run_whose_spec_is_a_list_is_one_line(copied):
    from tasks.training.runs import run_sha256

    out = copied
    run = out / RUN / "seed0"
    (run / "metrics.json").unlink()  # unfinished
    config = read(run / "config.json")
    config["spec"] = list(config["spec"])
    config["run_sha256"] = run_sha256(config)
    write(run / "config.json", config)
    one_line(
        cli("tasks.winograd", "train", *TINY_ARGS, "--seeds", "0-0", "--resume", "--out", str(out / "default")),
        "spec must be an object",
    )


# ---- commands that take a runs folder, given a sweep folder ------------------------------------


def test_commands_given_a_sweep_folder_of_several_points_say_why_not(tmp_path, finished_sweep):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    manifest = read(out / SWEEP)
    group = dict(manifest["groups"][0], point="d_model=64", values={"d_model": 64})
    group["identity"] = {**group["identity"], "spec": {**group["identity"]["spec"], "d_model": 64}}
    write(out / SWEEP, resign({**manifest, "groups": [*manifest["groups"], group]}))
    for command in (
        ["toylens", "edges", str(out)],
        ["toylens", "accuracy", str(out)],
        ["probes.circuit", "report", str(out)],
    ):
        one_line(cli(*command), "is a sweep of 2 grid points", "toylens census")


def test_edges_on_a_sweep_folder_uses_its_point_and_says_why_there_are_no_figures(copied):
    code, out, err = cli("toylens", "edges", str(copied))
    assert code == 0, err
    assert (copied / "default" / "edges" / "edges.md").is_file()
    assert "0 of 2 runs traced" in out and "no figures or MIB files" in out
