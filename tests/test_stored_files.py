"""No stored file is trusted: edited, malformed, truncated or mistyped config.json, metrics.json,
weights, train states, snapshots, sweep records and cached data are refused with one line (or, for
the data cache, rebuilt with one line), never printed, resumed or counted."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import scaled_by_load
from tests.refusals import RUN, cli, contents, copy_runs, edit_json, in_process, one_line


def swap_answers(entry: Path) -> None:
    """Valid Arrow with different content: every heldout example's answer and foil swapped."""
    from datasets import load_from_disk

    data = load_from_disk(str(entry))
    split = data["heldout"].to_dict()
    for tokens, positions, foils in zip(split["tokens"], split["positions"], split["foils"]):
        tokens[positions[0] + 1], foils[0] = foils[0], tokens[positions[0] + 1]
    from datasets import Dataset

    replaced = Dataset.from_dict(split)
    temp = entry.parent / "swap"
    replaced.save_to_disk(str(temp))
    for name in os.listdir(temp):
        if name.endswith(".arrow"):
            target = next((entry / "heldout").glob("*.arrow"))
            shutil.copy(temp / name, target)


CACHE_DAMAGE = {
    "answers swapped": swap_answers,
    "arrow truncated": lambda e: next((e / "train").glob("*.arrow")).write_bytes(
        next((e / "train").glob("*.arrow")).read_bytes()[:300]
    ),
    "junk dataset_dict.json": lambda e: (e / "dataset_dict.json").write_text("{junk"),
    "empty state.json": lambda e: (e / "train" / "state.json").write_text(""),
    "checksums deleted": lambda e: (e / "toylens-checksums.json").unlink(),
}


@pytest.mark.parametrize("damage", CACHE_DAMAGE)
def test_damaged_cached_data_is_rebuilt_with_one_line(tmp_path, monkeypatch, capsys, damage):
    from tasks.data import cache_root, task_dataset
    from tasks.winograd import WinogradParams, WinogradTask

    monkeypatch.setenv("TOYLENS_CACHE", str(tmp_path))
    task = WinogradTask(WinogradParams(nouns=4, heldout_fraction=0.3))
    fresh = {name: split.to_dict() for name, split in task_dataset(task, 0).items()}
    (entry,) = [p for p in cache_root().iterdir() if not p.name.startswith(".")]
    capsys.readouterr()
    CACHE_DAMAGE[damage](entry)
    again = {name: split.to_dict() for name, split in task_dataset(task, 0).items()}
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "rebuilding it" in lines[0], lines
    assert again == fresh
    assert {name: s.to_dict() for name, s in task_dataset(task, 0).items()} == fresh  # and it stays so
    assert capsys.readouterr().err == ""


EDITS = {  # (edit, signed as a forger would, fragment of the one line)
    "leaky as a string": (lambda c: c["task"]["params"].update(leaky="false"), True, "leaky must be bool"),
    "seed 1.5": (lambda c: c.update(seed=1.5), True, "seed must be an integer"),
    "scale_scores 'no'": (lambda c: c["spec"].update(scale_scores="no"), True, "scale_scores must be true or false"),
    "n_layers true": (lambda c: c["spec"].update(n_layers=True), True, "n_layers must be an integer"),
    "another task variant": (lambda c: c["task"]["params"].update(leaky=True), False, "run_sha256 differs"),
    "another seed": (lambda c: c.update(seed=1), False, "run_sha256 differs"),
    "checksum deleted": (lambda c: c.pop("run_sha256"), False, "missing field 'run_sha256'"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_config_is_refused(tiny_runs, tmp_path, capsys, edit):
    from toylens.accuracy import main

    change, sign, fragment = EDITS[edit]
    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", change, sign)
    with pytest.raises(SystemExit) as stopped:
        main([str(out)])
    one_line((stopped.value.code, "", capsys.readouterr().err), fragment)


@pytest.mark.parametrize("dtype", ["int8", "bool"])
def test_weights_of_another_dtype_are_refused(tiny_runs, tmp_path, capsys, dtype):
    import torch
    from safetensors.torch import load_file, save_file

    from common.jsonfiles import sha256_file
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    weights = out / RUN / "model.safetensors"
    save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(str(weights)).items()}, str(weights))
    edit_json(out / RUN / "config.json", lambda c: c.update(weights_sha256=sha256_file(weights)))
    with pytest.raises(SystemExit) as stopped:
        main([str(out)])
    one_line((stopped.value.code, "", capsys.readouterr().err), f"is torch.{dtype}", "do not belong together")


def deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def metrics_edit(change):
    return lambda out: edit_json(out / RUN / "metrics.json", change)


MALFORMED = {
    "config nested 200,000 deep": (lambda out: deep(out / RUN / "config.json"), "nested too deeply"),
    "metrics nested 200,000 deep": (lambda out: deep(out / RUN / "metrics.json"), "nested too deeply"),
    "task a string": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(task="winograd"), True),
        "task must be",
    ),
    "task null": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(task=None), True),
        "task must be",
    ),
    "seed 'abc'": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(seed="abc"), True),
        "seed must be",
    ),
    "seed 1e30": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(seed=1e30), True),
        "seed must be",
    ),
    "data_seed 'x'": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(data_seed="x"), True),
        "data_seed must be",
    ),
    "model_name a dict": (
        lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(model_name={}), True),
        "model_name",
    ),
    "metrics steps 'abc'": (metrics_edit(lambda m: m.update(steps="abc")), "steps must be an integer"),
    "metrics without held-out": (metrics_edit(lambda m: m["accuracy"].pop("heldout")), "accuracy must map"),
    # Also seen: probes.accuracy printed a held-out accuracy edited into metrics.json.
    "metrics accuracy edited": (
        metrics_edit(lambda m: m["evaluation"]["splits"]["heldout"]["accuracy"].update(value=0.123)),
        "was changed after toylens wrote it",
    ),
}


@pytest.mark.parametrize("damage", MALFORMED)
def test_malformed_files_are_refused_with_one_line(tiny_runs, tmp_path, capsys, damage):
    from toylens.accuracy import main

    apply, fragment = MALFORMED[damage]
    out = copy_runs(tiny_runs, tmp_path)
    apply(out)
    one_line(in_process(main, [str(out)], capsys), fragment)


def test_a_malformed_config_is_refused_by_the_cli_too(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    deep(out / RUN / "config.json")
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "nested too deeply")


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("n_ctx", 10**9, "n_ctx must be an integer from 1 to 65536"),
        ("d_model", 2**20, "d_model must be an integer from 1 to 16384"),
        ("n_layers", 10**5, "n_layers must be an integer from 1 to 256"),
        ("n_ctx", 65536, "more than toylens's limit of 16 GiB"),
        ("d_model", 8192, "do not belong together"),  # fits in memory, but not the weights on disk
    ],
)
def test_absurd_model_sizes_in_a_config_are_refused_before_allocating(
    tiny_runs, tmp_path, capsys, field, value, fragment
):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", lambda c: c["spec"].update({field: value, "n_heads": 1}), sign=True)
    started = time.monotonic()
    one_line(in_process(main, [str(out)], capsys), fragment)
    assert time.monotonic() - started < scaled_by_load(30)


@pytest.mark.parametrize(
    "value, fragment",
    [
        (float("nan"), "NaN or infinite value"),
        (float("inf"), "NaN or infinite value"),
        (3e38, "logits are NaN or infinite"),
    ],
)
def test_non_finite_weights_or_outputs_are_said(tiny_runs, tmp_path, capsys, value, fragment):
    import torch
    from safetensors.torch import load_file, save_file

    from common.jsonfiles import sha256_file
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    before = contents(out)
    weights = out / RUN / "model.safetensors"
    state = load_file(str(weights))
    state = {k: torch.full_like(v, value) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, str(weights))
    edit_json(out / RUN / "config.json", lambda c: c.update(weights_sha256=sha256_file(weights)))
    one_line(in_process(main, [str(out)], capsys), fragment)
    assert contents(out).get("summary.json") == before.get("summary.json")  # no summary of NaN accuracies


def test_json_with_an_integer_past_pythons_digit_limit_is_one_line(tiny_runs, tmp_path, capsys):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    metrics = out / RUN / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"steps": ', '"steps": 1' + "0" * 5000 + ', "x": ', 1))
    one_line(in_process(main, [str(out)], capsys), "metrics.json is not valid JSON")


def census_runs(tiny_runs: Path, tmp_path: Path) -> Path:
    """The tiny runs as a sweep leaves them: sweep.json planning them (and a seed 1 of
    attn-only-2x1), the grid point's point.json and a traced circuit.json, each signed."""
    from probes.census import circuit_record
    from probes.circuits.labels import CircuitSummary, PathFacts
    from tasks.training.runs import Run
    from tasks.training.sweeps import PlannedGroup, SweepManifest, identity_of, point_record

    root = tmp_path / "sweep"
    out = copy_runs(tiny_runs, root)
    out = out.rename(root / "default")
    runs = {name: Run(out / name / "seed0") for name in ("attn-only-2x1", "bag-of-words")}
    groups = tuple(
        PlannedGroup("default", {}, name, identity_of(run.config), (0, 1) if name == "attn-only-2x1" else (0,))
        for name, run in runs.items()
    )
    (root / "sweep.json").write_text(json.dumps(SweepManifest("winograd", groups).record()))
    (out / "point.json").write_text(json.dumps(point_record("default", {})))
    run = runs["attn-only-2x1"]
    edge = PathFacts("L0H0", "L1H0", "q", 14, "p14 the", 0.9, 1.0)
    summary = CircuitSummary(
        "attn-only-2x1", 0, 2, run.metrics["accuracy"]["heldout"], ("L0H0@all", "L1H0@p14"), edge, 1.0
    )
    (out / RUN / "circuit.json").write_text(json.dumps(circuit_record(summary, run.config)))
    return root


def edit_circuit(change):
    """As a forger would: the change, then the checksum recomputed (so the type checks are what refuses)."""
    from tasks.training.sweeps import signed

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


SWEEP_RECORDS = {  # damage, fragment of the reason its run(s) are unreadable
    "circuit nodes not strings": (edit_circuit(lambda d: d.update(nodes=[1, 2])), "nodes must be a list of strings"),
    "edge component a number": (edit_circuit(lambda d: d["edge"].update(component=5)), "component must be a string"),
    "edge recovered a string": (
        edit_circuit(lambda d: d["edge"].update(recovered="high")),
        "recovered must be a finite number",
    ),
    "edge recovered NaN": (
        edit_circuit(lambda d: d["edge"].update(recovered=float("nan"))),
        "recovered must be a finite number",
    ),
    "n_layers a string": (edit_circuit(lambda d: d.update(n_layers="2")), "n_layers must be an integer"),
    "point values a list": (
        write_point('{"point": "default", "values": [1, 2], "sha256": "x"}'),
        "values must be an object",
    ),
    "point values a string": (
        write_point('{"point": "default", "values": "ab", "sha256": "x"}'),
        "values must be an object",
    ),
    "point name an object": (write_point('{"point": {"a": 1}, "values": {}, "sha256": "x"}'), "point must be a string"),
    "failed model_name an object": (
        write_failed({"point": "default", "model_name": {"a": 1}, "seed": 1, "error": "x", "sha256": "x"}),
        "model_name must be a string",
    ),
}


@pytest.mark.parametrize("damage", SWEEP_RECORDS)
def test_sweep_records_of_the_wrong_shape_make_their_runs_unreadable_in_one_line(tiny_runs, tmp_path, capsys, damage):
    from probes.census import take_census
    from toylens.census import main

    change, fragment = SWEEP_RECORDS[damage]
    root = census_runs(tiny_runs, tmp_path)
    change(root)
    reasons = [why for group in take_census(root).groups for _, why in group.unreadable]
    assert reasons and all("\n" not in why for why in reasons) and any(fragment in why for why in reasons), reasons
    main([str(root), "--out", str(tmp_path / "census")])  # exits 0: the census says what it could not read
    printed = capsys.readouterr().out
    assert "unreadable, not counted" in printed and fragment in printed


def test_a_damaged_sweep_json_is_one_line(tiny_runs, tmp_path, capsys):
    from toylens.census import main

    root = census_runs(tiny_runs, tmp_path)
    (root / "sweep.json").write_text(json.dumps({**json.loads((root / "sweep.json").read_text()), "task": "induction"}))
    one_line(in_process(main, [str(root), "--out", str(tmp_path / "census")], capsys), "sweep.json was changed")
    assert not (tmp_path / "census").exists()


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


@pytest.mark.parametrize(
    "how, fragment",
    [
        ("missing tensor", "do not match the spec"),
        ("transposed", "the spec expects"),
        ("NaN", "NaN or infinite"),
        ("int8", "is torch.int8"),
    ],
)
def test_a_damaged_snapshot_is_one_line(tiny_runs, tmp_path, capsys, how, fragment):
    from safetensors.torch import load_file

    from models.checkpoint import save_tensors
    from probes.report.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    state = load_file(str(out / RUN / "model.safetensors"))
    save_tensors(out / RUN / "snapshots" / "step0.safetensors", state, {"step": 0})
    save_tensors(out / RUN / "snapshots" / "step50.safetensors", tamper(state, how), {"step": 50})
    one_line(in_process(main, [str(out)], capsys), "step50.safetensors", fragment)
