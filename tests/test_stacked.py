"""Stacked seeds (tasks.training.stacked) against the one-seed loop: the same training per seed within
a stated float tolerance, a seed that stops early untouched by the others' later steps, and a stacked
`train` killed mid-way that resumes to the uninterrupted files.

The tolerance. Both paths do the same float32 arithmetic per seed but one reduction: under vmap the
LayerNorms' weight and bias gradients are summed in another order than the fused kernel sums them
(after one step every other gradient is bitwise equal, and those differ by ~1e-8; measured). Training
carries that rounding on and, where the dynamics amplify it, grows it. Here (60 steps, batch 16)
the largest difference measured was 3.4e-5 of a tensor's largest magnitude (attn-only-2x1; block-1
8.9e-7, bag-of-words 6.1e-7, weights and validation logits alike), so TOLERANCE is 1e-4: about
800 float32 ulps (eps 1.2e-7) and far below what one real step moves (lr = 1e-3 per weight). Over
whole runs the rounding keeps growing where training is chaotic: Winograd, batch 64, attn-only-2x1
seed 0 solved at step 275 on both paths with weights 9.3e-4 and logits 3.2e-3 apart (seed 1, and
block-2 and bag-of-words seeds 0-1 over 125-300 steps: under 6e-6), every validation accuracy
equal; but seed 2 of a default attn-only-2x1 run solved at step 825 one seed at a time and 900
stacked: over long chaotic stretches the rounding becomes another trajectory, which is why the
check is over 60 steps (docs/performance.md, "Stacked seeds").

One exception, true by construction: the attention key bias. Its gradient is zero in exact
arithmetic (softmax ignores a score added to every key of a query), so in both paths it moves only by
AdamW's normalised rounding noise (up to ~lr per step) and changes no output; the logits check covers
it instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from models import build_model
from tasks.data import task_dataset, to_batch
from tasks.registry import build_task, get_task_class
from tasks.settings import TrainSettings
from tasks.training.loop import train
from tasks.training.resume import STATE
from tasks.training.stacked import SeedJob, train_stacked
from tests.interrupting import assert_same_files, environment
from toylens.family import sized_spec

TOLERANCE = 1e-4  # of the largest magnitude, per weight tensor and over the logits
NO_EFFECT = "attn.k.bias"  # its gradient is zero in exact arithmetic: rounding noise in both paths
SEEDS = (0, 1, 2)
# The validation split holds 16 examples at 6 nouns, so an accuracy of 0.45 is reached by some
# seeds within a few evaluations and by others later or never: the seeds stop at different steps.
SETTINGS = TrainSettings(max_steps=60, eval_every=10, batch_size=16, stop_accuracy=0.45, stop_evals=1)


@pytest.fixture(scope="module")
def data():
    task = build_task(get_task_class("winograd"), {"nouns": 6})
    return task, {seed: {k: to_batch(v) for k, v in task_dataset(task, seed).items()} for seed in SEEDS}


def models(data, name: str, seeds=SEEDS) -> list:
    task, batches = data
    spec = sized_spec(task.default_models()[name], task, batches[seeds[0]])
    return [build_model(spec, seed=seed) for seed in seeds]


def stacked(data, name: str, seeds=SEEDS, on_done=None):
    built = models(data, name, seeds)
    jobs = [SeedJob(m, data[1][s]["train"], data[1][s]["validation"], s) for m, s in zip(built, seeds)]
    return built, train_stacked(jobs, SETTINGS, on_done)


def one_seed(data, name: str, seeds=SEEDS):
    built = models(data, name, seeds)
    results = [
        train(m, data[1][s]["train"], data[1][s]["validation"], SETTINGS, s, progress=False)
        for m, s in zip(built, seeds)
    ]
    return built, results


def differences(a, b, inputs: torch.Tensor) -> dict:
    """Per weight tensor (less NO_EFFECT) and for the logits on `inputs`: the largest difference as
    a share of the largest magnitude."""
    found = {
        name: ((x - y).abs().max() / x.abs().max().clamp_min(1e-30)).item()
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values())
        if x.is_floating_point() and NO_EFFECT not in name and x.abs().max() > 0
    }
    with torch.no_grad():
        la, lb = a(inputs), b(inputs)
    found["logits"] = ((la - lb).abs().max() / la.abs().max()).item()
    return found


@pytest.mark.slow  # trains 12 small runs (~10-20 s on a loaded 2-core machine)
@pytest.mark.parametrize("name", ["attn-only-2x1", "block-1", "bag-of-words"])
def test_stacked_equals_one_seed_within_the_tolerance(data, name):
    """Three specs (two attention layers; attention + MLP; uniform attention with frozen weights):
    every seed stops at the same step for the same reason, with the same validation accuracies, and
    its weights and logits equal the one-seed run's within TOLERANCE."""
    ones, one_results = one_seed(data, name)
    stacks, stack_results = stacked(data, name)
    for seed, a, ra, b, rb in zip(SEEDS, ones, one_results, stacks, stack_results):
        assert (rb.steps, rb.stop_reason) == (ra.steps, ra.stop_reason), seed
        assert [h["val_accuracy"] for h in rb.history] == [h["val_accuracy"] for h in ra.history], seed
        for key in ("train_loss", "val_loss", "val_scored_loss"):
            assert [h[key] for h in rb.history] == pytest.approx([h[key] for h in ra.history], rel=TOLERANCE)
        far = {k: v for k, v in differences(a, b, data[1][seed]["validation"].inputs).items() if v > TOLERANCE}
        assert not far, f"seed {seed}: beyond {TOLERANCE} of the largest magnitude: {far}"


@pytest.mark.slow  # trains 4 small runs
def test_a_stacked_seed_that_stops_early_is_not_changed_by_the_others_later_steps(data):
    """The seed that stops first: its weights when it stopped are its final weights (bitwise), its
    history ends there, and it equals the same seed trained alone within TOLERANCE."""
    at_stop = {}

    def done(index, result):
        at_stop[index] = {k: v.clone() for k, v in built[index].state_dict().items()}

    built = models(data, "block-1")
    jobs = [SeedJob(m, data[1][s]["train"], data[1][s]["validation"], s) for m, s in zip(built, SEEDS)]
    results = train_stacked(jobs, SETTINGS, done)
    first = min(range(len(SEEDS)), key=lambda i: results[i].steps)
    assert results[first].steps < max(r.steps for r in results), "no seed stopped before another: no test"
    for name, value in built[first].state_dict().items():
        assert torch.equal(value, at_stop[first][name]), name
    assert results[first].history[-1]["step"] == results[first].steps
    (alone,), _ = one_seed(data, "block-1", (SEEDS[first],))
    far = {
        k: v
        for k, v in differences(alone, built[first], data[1][SEEDS[first]]["validation"].inputs).items()
        if v > TOLERANCE
    }
    assert not far, far


TRAIN = ["--models", "block-1", "--seeds", "0-1", "--steps", "80", "--eval-every", "10", "--checkpoint-every", "10"]
TRAIN += ["--nouns", "6", "--batch-size", "16", "--jobs", "1", "--no-progress", "--stack", "on"]


def train_argv(out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tasks.winograd", "train", *TRAIN, "--out", str(out), *extra]


@pytest.mark.slow  # starts three training processes
def test_a_killed_stacked_train_resumes_to_the_uninterrupted_files(tmp_path):
    """SIGKILL once a seed's train state is saved, then `--resume`: every file equals the
    uninterrupted stacked train's (but for wall times and the command line)."""
    out, reference, scratch = tmp_path / "runs", tmp_path / "reference", tmp_path / "tmp"
    env = {**environment(scratch), "PYTHONPATH": os.getcwd()}
    subprocess.run(train_argv(out), check=True, capture_output=True, env=env, timeout=600)
    out.rename(reference)  # made in the same folder: the runs' summary names their folders
    process = subprocess.Popen(
        train_argv(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env
    )
    deadline = time.monotonic() + 300
    saved = f"*/seed*/{STATE}"  # in a run folder itself: rglob would also see the temp of one being written
    while not any(out.glob(saved)) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    resumable = [p.parent for p in out.glob(saved) if not (p.parent / "metrics.json").exists()]
    assert resumable, "no unfinished run with a saved train state at the kill: nothing was resumed"
    resumed = subprocess.run(train_argv(out, "--resume"), capture_output=True, text=True, env=env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_files(out, reference)


def test_auto_stacks_a_model_only_where_its_probe_measured_stacking_faster(monkeypatch):
    """`--stack auto` follows each model's probe (stubbed: ratios 1.5 and 0.8) and says so per
    model; `on` stacks every model with two or more seeds to train, `off` none; a model with one
    seed to train is never stacked nor probed."""
    from types import SimpleNamespace

    from toylens import stacking

    def job(name: str, seed: int, train: bool = True):
        return SimpleNamespace(train=train, plan=SimpleNamespace(model_name=name, seed=seed))

    jobs = [job("fast", 0), job("fast", 1), job("slow", 0), job("slow", 1), job("alone", 0), job("kept", 0, False)]
    ratios = {"fast": 1.5, "slow": 0.8}
    probed = []

    def probe(plan, seeds, sized):
        probed.append(plan.model_name)
        return stacking.Probe(ratios[plan.model_name] * 0.01, 0.01, seeds, 8, "CPU")

    monkeypatch.setattr(stacking, "probe", probe)
    lines: list[str] = []
    units = stacking.stack_units(jobs, "auto", sized_spec, lines.append)
    assert probed == ["fast", "slow"]
    assert (jobs[0], jobs[1]) in units and sorted(len(unit) for unit in units) == [1, 1, 1, 1, 2]
    assert "fast: 2 seeds stacked (--stack auto: 1.50x" in lines[0] and "slow: one seed at a time" in lines[1]
    assert len(lines) == 2
    assert sorted(len(unit) for unit in stacking.stack_units(jobs, "on", sized_spec, lines.append)) == [1, 1, 2, 2]
    assert all(len(unit) == 1 for unit in stacking.stack_units(jobs, "off", sized_spec, lines.append))
