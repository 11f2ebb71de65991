"""Adversarial round 3: output paths that are a user's files, links or runs; stored sweep records,
snapshots and JSON of the wrong shape; absurd seeds; empty lists; Ray addresses that go nowhere.
Each case asserts exit 2 with one line, and nothing of the user's changed."""

from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path

import pytest

from common.cli import UsageError
from tests.test_adversarial import RUN, TRAIN, cli, contents, copy_runs, one_line
from tests.test_adversarial_more import in_process


def limited_memory():
    """preexec_fn: 2 GiB of address space, so a command that would fill memory fails fast instead."""
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


# --- stored JSON and sweep records ------------------------------------------------------------------

def test_json_with_an_integer_past_pythons_digit_limit_is_one_line(tiny_runs, tmp_path, capsys):
    from probes.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    metrics = out / RUN / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"steps": ', '"steps": 1' + "0" * 5000 + ", \"x\": ", 1))
    one_line(in_process(main, [str(out)], capsys), "metrics.json is not valid JSON")


def census_runs(tiny_runs: Path, tmp_path: Path) -> Path:
    """The tiny runs as a sweep leaves them: sweep.json planning them (and a seed 1 of
    attn-only-2x1), the grid point's point.json and a traced circuit.json, each signed."""
    from probes.census import circuit_record
    from probes.circuits.labels import CircuitSummary, Edge
    from tasks.runs import Run
    from tasks.sweeps import PlannedGroup, SweepManifest, identity_of, point_record

    root = tmp_path / "sweep"
    out = copy_runs(tiny_runs, root)
    out = out.rename(root / "default")
    runs = {name: Run(out / name / "seed0") for name in ("attn-only-2x1", "bag-of-words")}
    groups = tuple(PlannedGroup("default", {}, name, identity_of(run.config), (0, 1) if name == "attn-only-2x1" else (0,))
                   for name, run in runs.items())
    (root / "sweep.json").write_text(json.dumps(SweepManifest("winograd", groups).record()))
    (out / "point.json").write_text(json.dumps(point_record("default", {})))
    run = runs["attn-only-2x1"]
    edge = Edge("L0H0", "L1H0", "q", 14, "p14 the", 0.9, 1.0)
    summary = CircuitSummary("attn-only-2x1", 0, 2, run.metrics["accuracy"]["heldout"], ("L0H0@all", "L1H0@p14"),
                             edge, 1.0)
    (out / RUN / "circuit.json").write_text(json.dumps(circuit_record(summary, run.config)))
    return root


def edit_circuit(change):
    """As a forger would: the change, then the checksum recomputed (so the type checks are what refuses)."""
    from tasks.sweeps import signed

    def edit(root: Path) -> None:
        data = json.loads((root / "default" / RUN / "circuit.json").read_text())
        change(data)
        data.pop("sha256")
        (root / "default" / RUN / "circuit.json").write_text(json.dumps(signed(data)))
    return edit


def write_failed(record: dict):
    def write(root: Path) -> None:
        (root / "default" / "attn-only-2x1" / "seed1").mkdir()
        (root / "default" / "attn-only-2x1" / "seed1" / "failed.json").write_text(json.dumps(record))
    return write


def write_point(text: str):
    return lambda root: (root / "default" / "point.json").write_text(text)


SWEEP_RECORDS = {   # damage, fragment of the reason its run(s) are unreadable
    "circuit nodes not strings": (edit_circuit(lambda d: d.update(nodes=[1, 2])), "nodes must be a list of strings"),
    "edge component a number": (edit_circuit(lambda d: d["edge"].update(component=5)), "component must be a string"),
    "edge recovered a string": (edit_circuit(lambda d: d["edge"].update(recovered="high")),
                                "recovered must be a finite number"),
    "edge recovered NaN": (edit_circuit(lambda d: d["edge"].update(recovered=float("nan"))),
                           "recovered must be a finite number"),
    "n_layers a string": (edit_circuit(lambda d: d.update(n_layers="2")), "n_layers must be an integer"),
    "point values a list": (write_point('{"point": "default", "values": [1, 2], "sha256": "x"}'),
                            "values must be an object"),
    "point values a string": (write_point('{"point": "default", "values": "ab", "sha256": "x"}'),
                              "values must be an object"),
    "point name an object": (write_point('{"point": {"a": 1}, "values": {}, "sha256": "x"}'),
                             "point must be a string"),
    "failed model_name an object": (write_failed({"point": "default", "model_name": {"a": 1}, "seed": 1, "error": "x",
                                                  "sha256": "x"}), "model_name must be a string"),
}


@pytest.mark.parametrize("damage", SWEEP_RECORDS)
def test_sweep_records_of_the_wrong_shape_make_their_runs_unreadable_in_one_line(tiny_runs, tmp_path, capsys,
                                                                                 damage):
    from probes.census import main, take_census

    change, fragment = SWEEP_RECORDS[damage]
    root = census_runs(tiny_runs, tmp_path)
    change(root)
    reasons = [why for group in take_census(root).groups for _, why in group.unreadable]
    assert reasons and all("\n" not in why for why in reasons) and any(fragment in why for why in reasons), reasons
    main([str(root), "--out", str(tmp_path / "census")])     # exits 0: the census says what it could not read
    printed = capsys.readouterr().out
    assert "unreadable, not counted" in printed and fragment in printed


def test_a_damaged_sweep_json_is_one_line(tiny_runs, tmp_path, capsys):
    from probes.census import main

    root = census_runs(tiny_runs, tmp_path)
    (root / "sweep.json").write_text(json.dumps({**json.loads((root / "sweep.json").read_text()), "task": "induction"}))
    one_line(in_process(main, [str(root), "--out", str(tmp_path / "census")], capsys), "sweep.json was changed")
    assert not (tmp_path / "census").exists()


# --- report folders -----------------------------------------------------------------------------------

def kept(folder: Path) -> dict:
    """contents() without the lock files, whose holder's pid a command may rewrite."""
    return {name: data for name, data in contents(folder).items() if not name.endswith(".toylens.lock")}


def test_a_report_path_that_is_a_users_file_is_refused(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    (out / "report").write_text("mine\n")
    before = kept(tmp_path)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "is a file, not a folder")
    one_line(cli(*TRAIN, "--nouns", "8", "--out", str(out), "--report"), "is a file, not a folder")
    assert kept(tmp_path) == before


@pytest.mark.parametrize("where, fragment", [("the runs folder", "not part of a folder toylens published"),
                                             ("a run folder", "is a run folder"),
                                             ("above the runs folder", "not part of a folder toylens published"),
                                             ("another runs folder", "not part of a folder toylens published")])
def test_a_report_is_never_swapped_in_for_runs(tiny_runs, tmp_path, where, fragment):
    work = tmp_path / "work"
    out, other = copy_runs(tiny_runs, work), copy_runs(tiny_runs, work / "other")
    target = {"the runs folder": out, "a run folder": out / RUN, "above the runs folder": work,
              "another runs folder": other}[where]
    before = kept(tmp_path)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1", "--out", str(target)), fragment)
    assert kept(tmp_path) == before


# --- links and a user's manifest inside a runs folder --------------------------------------------------

def test_a_model_folder_linked_to_a_users_folder_is_not_written_through(tmp_path):
    out, user = tmp_path / "runs", tmp_path / "mine"
    out.mkdir()
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    os.symlink(user, out / "attn-only-2x1")
    one_line(cli(*TRAIN, "--out", str(out)), "attn-only-2x1 is a symbolic link")
    assert contents(user) == {"notes.txt": b"mine\n"}


def test_a_sweeps_point_folder_linked_elsewhere_is_not_written_through(tmp_path):
    out, user = tmp_path / "sweep", tmp_path / "mine"
    out.mkdir()
    user.mkdir()
    os.symlink(user, out / "default")
    one_line(cli("tasks.winograd", "sweep", "--models", "attn-only-2x1", "--seeds", "0", "--steps", "5", "--nouns", "6",
                 "--jobs", "1", "--no-progress", "--out", str(out)), "default is a symbolic link")
    assert list(user.iterdir()) == []


def test_a_users_file_named_like_the_manifest_is_never_replaced(tiny_runs, tmp_path, capsys):
    from probes.accuracy import main

    out = tmp_path / "runs"
    shutil.copytree(tiny_runs / "attn-only-2x1", out / "attn-only-2x1")
    (out / ".toylens.json").write_text("my notes, not toylens's\n")
    one_line(in_process(main, [str(out)], capsys), "not an ownership manifest toylens wrote")
    assert (out / ".toylens.json").read_text() == "my notes, not toylens's\n"
    assert not (out / "summary.json").exists()


# --- other commands' outputs: refused before any work ----------------------------------------------

def test_edges_never_write_over_or_through_a_users_figure(tiny_runs, tmp_path, capsys):
    from toylens.edges import main

    out = copy_runs(tiny_runs, tmp_path)
    figures = out / "edges" / "figures"
    figures.mkdir(parents=True)
    (tmp_path / "target.png").write_text("mine\n")
    os.symlink(tmp_path / "target.png", figures / "edges_attn-only-2x1_seed0.png")
    one_line(in_process(main, [str(out)], capsys), "not written by toylens")
    (figures / "edges_attn-only-2x1_seed0.png").unlink()
    (figures / "edges_attn-only-2x1_seed0.png").write_text("mine\n")
    one_line(in_process(main, [str(out)], capsys), "not written by toylens")
    assert (tmp_path / "target.png").read_text() == "mine\n"
    assert contents(out / "edges") == {"figures/edges_attn-only-2x1_seed0.png": b"mine\n"}


QUICK = ("--seeds", "1", "--steps", "1", "--jobs", "1", "--no-progress")
OUTPUTS = {   # module, arguments, a file it writes last
    "ladder": ("probes.chapter.ladder", ("winograd", "--rungs", "no-context", "--nouns", "4", *QUICK), "ladder.json"),
    "positions": ("probes.chapter.positions", ("--kinds", "learned", "--eval-sequences", "4", *QUICK), "positions.png"),
    "scaling": ("probes.chapter.scaling", ("--init-only",), "scaling.json"),
    "cost": ("probes.chapter.cost", ("--max-len", "128", "--budget", "0.01"), "cost.png"),
}


@pytest.mark.parametrize("command", OUTPUTS)
def test_a_users_output_file_is_refused_before_any_work(tmp_path, command):
    module, argv, name = OUTPUTS[command]
    (tmp_path / name).write_text("mine\n")
    one_line(cli(module, *argv, "--out", str(tmp_path)), "not written by toylens")
    assert contents(tmp_path) == {name: b"mine\n"}   # nothing trained or measured into it first


def test_a_damaged_cache_entry_holding_a_users_file_is_refused_at_once(tmp_path, monkeypatch, capsys):
    from tasks.data import cache_root, task_dataset
    from tasks.winograd import WinogradParams, WinogradTask

    monkeypatch.setenv("TOYLENS_CACHE", str(tmp_path))
    task = WinogradTask(WinogradParams(nouns=4, heldout_fraction=0.3))
    task_dataset(task, 0)
    (entry,) = cache_root().iterdir()
    (entry / "toylens-checksums.json").write_text("{junk")
    (entry / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    with pytest.raises(UsageError, match="notes.txt, which toylens did not write"):
        task_dataset(task, 0)
    assert capsys.readouterr().err == ""              # no "rebuilding it" line before the refusal
    assert [p.name for p in cache_root().iterdir()] == [entry.name]   # and nothing generated


# --- snapshots ---------------------------------------------------------------------------------------

def tamper(state: dict, how: str) -> dict:
    import torch

    name = next(k for k in sorted(state) if state[k].dim() == 2 and state[k].shape[0] != state[k].shape[1])
    if how == "missing tensor":
        state.pop(name)
    elif how == "transposed":
        state[name] = state[name].T.contiguous()
    elif how == "NaN":
        state[name] = torch.full_like(state[name], float("nan"))
    else:
        state = {k: v.to(torch.int8) for k, v in state.items()}
    return state


@pytest.mark.parametrize("how, fragment", [("missing tensor", "do not match the spec"), ("transposed", "the spec expects"),
                                           ("NaN", "NaN or infinite"), ("int8", "is torch.int8")])
def test_a_damaged_snapshot_is_one_line(tiny_runs, tmp_path, capsys, how, fragment):
    from safetensors.torch import load_file

    from models.checkpoint import save_tensors
    from probes.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    state = load_file(str(out / RUN / "model.safetensors"))
    save_tensors(out / RUN / "snapshots" / "step0.safetensors", state, {"step": 0})
    save_tensors(out / RUN / "snapshots" / "step50.safetensors", tamper(state, how), {"step": 50})
    one_line(in_process(main, [str(out)], capsys), "step50.safetensors", fragment)


# --- flags ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, fragment", [
    (("tasks.winograd", "sweep", "--seeds", "0-999999999"), "more than 100000 seeds"),
    (("tasks.winograd", "sweep", "--seeds", "4294967296"), "last <= 4294967295"),
    (("probes.chapter.scaling", "--seeds", "100000000000"), "--seeds 100000000000 is absurd"),
])
def test_absurd_seeds_are_refused_before_they_fill_memory(tmp_path, argv, fragment):
    one_line(cli(*argv, "--out", str(tmp_path / "out"), preexec_fn=limited_memory), fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module, flag", [("probes.chapter.ladder", "--rungs"), ("probes.chapter.positions", "--kinds")])
@pytest.mark.parametrize("value", [",", ""])
def test_an_empty_list_of_names_is_refused(tmp_path, module, flag, value):
    task = ("winograd",) if module == "probes.chapter.ladder" else ()
    one_line(cli(module, *task, flag, value, *QUICK, "--out", str(tmp_path / "out")), f"{flag} {value!r} has an empty name")
    assert not (tmp_path / "out").exists()


def test_a_spec_field_given_twice_is_refused(tmp_path, capsys):
    from probes.chapter.params import main

    one_line(in_process(main, ["d_model=64", "d_model=128", "d_vocab=10", "--out", str(tmp_path)], capsys),
             "d_model is given twice")


SWEEP = ("tasks.winograd", "sweep", "--models", "attn-only-2x1", "--seeds", "0", "--steps", "5", "--nouns", "6",
         "--jobs", "1", "--no-progress")


@pytest.mark.parametrize("argv, env, fragment", [
    (("--executor", "ray"), {"RAY_ADDRESS": "garbage"}, "'garbage' is not HOST:PORT"),
    (("--executor", "ray", "--address", "127.0.0.1:1"), {}, "nothing answers at Ray address '127.0.0.1:1'"),
    (("--gpus-per-run", "inf"), {}, "--gpus-per-run must be a finite number >= 0"),
])
def test_a_ray_address_or_gpu_count_that_cannot_work_is_one_line(tmp_path, argv, env, fragment):
    one_line(cli(*SWEEP, *argv, "--out", str(tmp_path / "out"), env=env), fragment)
    assert not (tmp_path / "out").exists()


def test_a_users_file_named_like_the_lock_is_never_overwritten(tmp_path):
    from common.cli import UsageError
    from common.lock import folder_lock

    (tmp_path / ".toylens.lock").write_text("my notes")
    with pytest.raises(UsageError, match="not written by toylens"):
        with folder_lock(tmp_path, "runs folder"):
            pass
    assert (tmp_path / ".toylens.lock").read_text() == "my notes"
    (tmp_path / ".toylens.lock").unlink()
    for _ in range(2):   # its own lock, left behind by the last holder, is taken again
        with folder_lock(tmp_path, "runs folder"):
            pass
