"""Stacked seeds: several seeds of one model spec trained as one computation over a seed axis.

Each seed keeps everything the one-seed loop (`tasks.training.loop`) gives it: its own model built
from its seed, its own batch generator (the same rows each step), its own evaluations, stopping
rule, log, snapshots and train state. Only the step is shared: the seeds' trainable weights are
stacked ([seeds, ...] per parameter) and the training forward (`models.fused.training_forward`)
runs over that axis with `torch.func.vmap(functional_call)`; each seed's loss is the loop's own
function of its own logits, and AdamW (elementwise) steps the stacked tensors, so every element
follows the one-seed arithmetic. One reduction differs: vmap sums the LayerNorms' weight and bias
gradients in another order than the fused kernel (every other gradient of a step is bitwise the
one-seed one, measured), so seeds agree within float rounding that training carries on:
tests/test_stacked.py states the tolerance and checks it on three specs.

A seed that stops (solved, stalled, or its budget) leaves the stack at once: its weights and
AdamW moments are copied out, it is finished like a one-seed run, `on_done` writes its run folder,
and the remaining seeds go on as a smaller stack, so later steps cannot touch it. Evaluation,
snapshots and train states go through the seed's own model and `FlatAdamW`, after its slice of the
stack is copied back, so every file a seed writes is the one-seed path's, and a killed stack
resumes per seed from those files (seeds saved at different steps resume as separate stacks).

Stacking pays where a step is bound by per-operation overhead rather than arithmetic: small
batches on a CPU, and a GPU's kernel launches. `toylens.stacking` measures which before choosing.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call, vmap

from common.stages import timed
from tasks.data import Batch
from tasks.settings import StopReason, TrainSettings
from tasks.training.loop import (
    CHECKPOINT_EVALS,
    TrainResult,
    Training,
    evaluate_and_stop,
    finish,
    lm_loss,
    save_snapshot,
    scored_loss,
    start_training,
    training_device,
)
from tasks.training.resume import save_train_state


@dataclass(frozen=True)
class SeedJob:
    """One seed of a stack: what `tasks.training.loop.train` takes for that seed."""

    model: Any  # a TransformerBridge built from this seed (models.build_model), trained in place
    train_batch: Batch
    validation_batch: Batch
    seed: int
    log_path: Path | None = None
    snapshot_dir: Path | None = None
    state_path: Path | None = None
    resume: bool = False
    label: str = ""


@dataclass
class Stack:
    """The seeds still training, and their weights and AdamW state stacked over the seed axis.
    Mutable: a seed that stops is taken out (`without`)."""

    runs: list[Training]
    jobs: list[int]  # for each stacked seed, its index in the caller's list of SeedJobs
    names: list[str]  # the trainable parameters' names in the forward, in each FlatAdamW's order
    params: dict[str, torch.Tensor]  # every parameter of the forward, [seeds, ...]
    buffers: dict[str, torch.Tensor]
    optimizer: torch.optim.AdamW
    shape: torch.nn.Module  # the forward's module tree on the meta device, which functional_call runs

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [seeds, batch, position, vocab] of each seed's weights on its tokens [seeds, batch, position]."""

        def one(params, buffers, inputs):
            return functional_call(self.shape, (params, buffers), (inputs,))

        with warnings.catch_warnings():
            # vmap has no batching rule for CPU's fused attention kernel and loops it over the seeds
            # (measured in benchmarks/stacked_speed.py's ratios, which include that loop).
            warnings.filterwarnings("ignore", message="There is a performance drop", category=UserWarning)
            return vmap(one)(self.params, self.buffers, tokens)


def trainable_names(run: Training) -> list[str]:
    """The forward's names for the parameters the run's FlatAdamW steps, in its order."""
    named = {id(p): name for name, p in run.forward.named_parameters()}
    return [named[id(p)] for p in run.optimizer.parameters]


def stack_runs(runs: list[Training], jobs: list[int]) -> Stack:
    """One Stack from runs of one spec at one step, each with its own weights and AdamW state."""
    names = trainable_names(runs[0])
    forwards = [dict(run.forward.named_parameters()) for run in runs]
    params = {name: torch.stack([f[name].detach() for f in forwards]) for name in forwards[0]}
    for name in names:
        params[name].requires_grad_(True)
    buffers = {
        name: torch.stack([dict(run.forward.named_buffers())[name] for run in runs])
        for name, _ in runs[0].forward.named_buffers()
    }
    optimizer = adamw(params, names, runs[0].settings)
    states = [run.optimizer.state_dict()["state"] for run in runs]
    if states[0]:  # resumed: each seed's moments, at the step they share
        for index, name in enumerate(names):
            optimizer.state[params[name]] = {
                "step": states[0][index]["step"].clone(),
                **{key: torch.stack([s[index][key] for s in states]) for key in ("exp_avg", "exp_avg_sq")},
            }
    shape = copy.deepcopy(runs[0].forward).to("meta")
    return Stack(runs, jobs, names, params, buffers, optimizer, shape)


def adamw(params: dict[str, torch.Tensor], names: list[str], settings: TrainSettings) -> torch.optim.AdamW:
    """torch's AdamW as `FlatAdamW` runs it (foreach), over the stacked trainable tensors; the
    learning rate is set before each step (`TrainSettings.lr_at`)."""
    return torch.optim.AdamW(
        [params[name] for name in names], lr=settings.lr, weight_decay=settings.weight_decay, foreach=True
    )


def without(stack: Stack, stopped: list[int]) -> Stack:
    """The stack less the seeds at positions `stopped`: fresh tensors, so nothing later touches theirs."""
    keep = [j for j in range(len(stack.runs)) if j not in stopped]
    index = torch.tensor(keep, device=next(iter(stack.params.values())).device)
    params = {name: value.detach()[index] for name, value in stack.params.items()}
    for name in stack.names:
        params[name].requires_grad_(True)
    optimizer = adamw(params, stack.names, stack.runs[0].settings)
    for name in stack.names:
        state = stack.optimizer.state.get(stack.params[name])
        if state:
            optimizer.state[params[name]] = {
                "step": state["step"].clone(),
                "exp_avg": state["exp_avg"][index],
                "exp_avg_sq": state["exp_avg_sq"][index],
            }
    buffers = {name: value[index] for name, value in stack.buffers.items()}
    return Stack(
        [stack.runs[j] for j in keep],
        [stack.jobs[j] for j in keep],
        stack.names,
        params,
        buffers,
        optimizer,
        stack.shape,
    )


@torch.no_grad()
def unstack(stack: Stack, j: int, moments: bool = False) -> None:
    """Copy stacked seed j's weights (and with `moments`, its AdamW state) into its own model and FlatAdamW."""
    run = stack.runs[j]
    for name, parameter in zip(stack.names, run.optimizer.parameters):
        parameter.copy_(stack.params[name][j])
    if not moments:
        return
    state = {}
    for index, name in enumerate(stack.names):
        saved = stack.optimizer.state.get(stack.params[name])
        if saved:
            state[index] = {"step": saved["step"].clone(), **{k: saved[k][j] for k in ("exp_avg", "exp_avg_sq")}}
    run.optimizer.load_state_dict({"state": state, "param_groups": run.optimizer.state_dict()["param_groups"]})


def stacked_update(stack: Stack, step: int) -> torch.Tensor:
    """One AdamW step of every stacked seed on its own `batch_size` rows; the losses [seeds] they descended."""
    settings = stack.runs[0].settings
    rows = [torch.randint(len(run.train_batch), (settings.batch_size,), generator=run.generator) for run in stack.runs]
    tokens = torch.stack([run.train_batch.tokens[r] for run, r in zip(stack.runs, rows)])
    logits = stack.forward(tokens[:, :, :-1])
    losses = torch.stack(
        [
            scored_loss(logits[j], tokens[j], run.train_scored[r])
            if run.train_scored is not None
            else lm_loss(logits[j], tokens[j], run.train_batch.lengths[r])
            for j, (run, r) in enumerate(zip(stack.runs, rows))
        ]
    )
    stack.optimizer.zero_grad()
    losses.sum().backward()  # each seed's weights get the gradient of its own loss alone
    for group in stack.optimizer.param_groups:
        group["lr"] = settings.lr_at(step)
    stack.optimizer.step()
    return losses.detach()


def take_stacked_steps(stack: Stack, seeds: list[SeedJob], checkpoint_every: int, done: Callable) -> None:
    """Steps up to the budget; each seed leaves the stack, finished through `done(job index, stop)`,
    the moment its stopping rule (or the budget) ends it."""
    settings = stack.runs[0].settings
    first = stack.runs[0].steps_done
    for step in range(first + 1, settings.max_steps + 1):
        losses = stacked_update(stack, step)
        stopped = []
        for j, run in enumerate(stack.runs):
            seed = seeds[stack.jobs[j]]
            snapshots = seed.snapshot_dir if settings.snapshot_every and step % settings.snapshot_every == 0 else None
            evaluating = step % settings.eval_every == 0 or step == settings.max_steps
            if snapshots is not None or evaluating:
                unstack(stack, j)
            if snapshots is not None:
                save_snapshot(run.model, snapshots, step)
            stop = evaluate_and_stop(run, step, losses[j]) if evaluating else None
            if stop or step == settings.max_steps:
                stopped.append(j)
                done(stack.jobs[j], stop)
            elif seed.state_path is not None and step % checkpoint_every == 0:
                unstack(stack, j, moments=True)
                progress = {"step": step, "history": run.history, "seconds": run.seconds()}
                save_train_state(seed.state_path, run.model, run.optimizer, run.generator, progress)
        if len(stopped) == len(stack.runs):
            return
        if stopped:
            stack = without(stack, stopped)
    for j in range(len(stack.runs)):  # resumed at the budget's last step: nothing left to take
        done(stack.jobs[j], None)


@timed("steps")
def train_stacked(
    seeds: list[SeedJob],
    settings: TrainSettings,
    on_done: Callable[[int, TrainResult], None] | None = None,
    checkpoint_every: int | None = None,
) -> list[TrainResult]:
    """Train every seed's model in place, stacked; `on_done(index, result)` as each one finishes
    (before the others take another step). Per seed what `tasks.training.loop.train` gives it."""
    device = training_device()
    runs = []
    for seed in seeds:
        if device != "cpu":
            seed.model.to(device, print_details=False)
        resume_from = seed.state_path if seed.resume else None
        batches = seed.train_batch.to(device), seed.validation_batch.to(device)
        runs.append(
            start_training(seed.model, *batches, settings, seed.seed, resume_from, seed.log_path, False, seed.label)
        )
    results: dict[int, TrainResult] = {}

    def done(index: int, stop: StopReason | None) -> None:
        run = runs[index]
        finish(run, device)
        steps = run.history[-1]["step"] if run.history else 0
        results[index] = TrainResult(steps, stop or StopReason.BUDGET, run.seconds(), run.history)
        if on_done is not None:
            on_done(index, results[index])

    try:
        keys = [stack_key(run) for run in runs]
        for key in sorted(set(keys)):
            members = [i for i in range(len(runs)) if keys[i] == key]
            for i in members:
                first_snapshot(runs[i], seeds[i])
            stack = stack_runs([runs[i] for i in members], members)
            take_stacked_steps(stack, seeds, checkpoint_every or CHECKPOINT_EVALS * settings.eval_every, done)
    finally:
        for index, run in enumerate(runs):
            if index not in results:  # interrupted: closed as the one-seed loop closes it
                finish(run, device)
    return [results[i] for i in range(len(seeds))]


def stack_key(run: Training) -> tuple:
    """Runs stack together when this is equal: their step (seeds resumed from states saved at
    different steps go on as separate stacks), their parameters' shapes (the data sizes n_ctx and
    d_vocab) and their training sequences' length."""
    shapes = tuple(tuple(p.shape) for p in run.forward.parameters())
    return run.steps_done, shapes, run.train_batch.tokens.shape[1]


def first_snapshot(run: Training, seed: SeedJob) -> None:
    """The step-0 snapshot a fresh run saves before its first step (as the one-seed loop does)."""
    if seed.snapshot_dir is not None and run.settings.snapshot_every and run.steps_done == 0:
        save_snapshot(run.model, seed.snapshot_dir, 0)
