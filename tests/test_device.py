"""Probes follow the model to its device: they move their batches there, create what they compute
with there, and return results on the CPU. No GPU on the test machine, so two stand-ins, each of
which fails on the probes as they were before they handled devices (checked):

- torch's default device set to "meta": a tensor a probe creates without `device=` lands there
  and breaks, as under `torch.set_default_device("cuda")` with a model on the CPU;
- a batch whose tensors pose as living on another device (`Elsewhere`): a probe that computes with
  it without moving it to the model's device raises, as a CUDA model given a CPU batch does.

Every probe's result must equal the plain CPU call's. Where CUDA is present the real thing runs too.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from models import ModelSpec
from models.graph import graph_of
from tasks.data import Batch, spread_subset

SPEC = ModelSpec(n_layers=2, d_model=32, n_heads=2)  # MLPs and LayerNorm: every kind of graph node


class Elsewhere(torch.Tensor):
    """A CPU tensor posing as one on another device: it reports "meta", ops among such tensors stay
    elsewhere, `.to()` / `.cpu()` bring back a plain tensor, and an op mixing it with a plain
    tensor of the model raises, as mixing devices does."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == torch.Tensor.device.__get__:
            return torch.device("meta")
        plain = tree_map(lambda t: t.as_subclass(torch.Tensor) if isinstance(t, Elsewhere) else t, (args, kwargs))
        if func in (torch.Tensor.to, torch.Tensor.cpu):
            return func(*plain[0], **plain[1])
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(not isinstance(t, Elsewhere) and t.dim() > 0 for t in tensors):
            raise RuntimeError(
                f"{getattr(func, '__name__', func)}: a batch tensor met the model's "
                "tensors without being moved to the model's device"
            )
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*plain[0], **plain[1])
        return tree_map(lambda t: t.as_subclass(Elsewhere) if isinstance(t, torch.Tensor) else t, out)


def elsewhere(batch: Batch) -> Batch:
    return dataclasses.replace(
        batch,
        **{
            f.name: getattr(batch, f.name).as_subclass(Elsewhere)
            for f in dataclasses.fields(batch)
            if isinstance(getattr(batch, f.name), torch.Tensor)
        },
    )


@pytest.fixture(scope="module")
def setting(small_winograd, tmp_path_factory):
    """A model trained until validation is solved (its clean - counterfactual gap on these pairs is
    ~5.6 logits; an untrained model's is float noise, so its shares of that gap differ between
    devices by more than rounding), 16 held-out pairs and 32 reference rows."""
    from conftest import train_tiny
    from tasks.training.runs import Run

    run = Run(
        train_tiny(small_winograd, tmp_path_factory.mktemp("device"), {"block-2": SPEC}, steps=800)
        / "block-2"
        / "seed0"
    )
    batches = run.batches()
    spec = ModelSpec.from_dict(run.config["spec"])
    return (
        run.load_model(),
        spread_subset(batches["heldout"], 16),
        spread_subset(batches["train"], 32),
        graph_of(spec),
    )


def probe_calls(model, batch: Batch, reference: Batch, graph) -> dict:
    """Every probe entry a notebook calls with a model and a batch."""
    from probes import ablation, ablation_sweep, attention, composition, heads, patching
    from probes.circuits import named as edge_circuit, path_patching, search as circuit
    from probes.dynamics import snapshot_point
    from probes.chapter.scaling import trained_point
    from probes.shuffle import shuffle_test

    def search():
        return circuit.search_circuit(model, batch, reference, patching.activation_patching(model, batch))

    return {
        "ablate zero": lambda: ablation.ablate(model, batch, ["L0H0"], ablation.Ablation.ZERO),
        "ablate mean": lambda: ablation.ablate(model, batch, ["L1H1"], ablation.Ablation.MEAN, reference=reference),
        "ablate resample": lambda: ablation.ablate(
            model, batch, [(0, 1)], ablation.Ablation.RESAMPLE, reference=reference
        ),
        "head_ablation_sweep": lambda: ablation_sweep.head_ablation_sweep(
            model, batch, ablation.Ablation.RESAMPLE, reference=reference
        ),
        "scored_attention": lambda: attention.scored_attention(model, batch),
        "pair_attention": lambda: attention.pair_attention(model, batch),
        "attention_from": lambda: attention.attention_from(model, batch, 2),
        "shuffle_test": lambda: shuffle_test(model, batch),
        "composition_scores": lambda: composition.composition_scores(model, baseline_draws=2),
        "activation_patching": lambda: patching.activation_patching(model, batch),
        "path_sweep": lambda: path_patching.path_sweep(model, batch),
        "joint_path_patch": lambda: path_patching.joint_path_patch(model, batch, ["L0H0", "L0H1"], ["L1H0"], "k", [1]),
        "head_report": lambda: heads.head_report(model, batch, ablation.Ablation.MEAN, reference),
        "faithfulness": lambda: circuit.faithfulness(model, batch, [(0, 0), (1, 1)], reference),
        "search_circuit": search,
        "edge_circuit": lambda: edge_circuit.edge_circuit(model, batch, graph, ig_steps=2, acdc_threshold=0.05),
        "snapshot_point": lambda: snapshot_point(model, batch, 0),
        "trained_point": lambda: trained_point(model, batch, 0),
    }


def assert_same(a, b, where: str = "result", tolerance: float = 0.0) -> None:
    """Equal results (timings aside); `tolerance` relative, for another device's float rounding."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        a, b = ({f.name: getattr(x, f.name) for f in dataclasses.fields(x)} for x in (a, b))
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            if key != "seconds":
                assert_same(a[key], b[key], f"{where}.{key}", tolerance)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]", tolerance)
    elif isinstance(a, torch.Tensor):
        assert b.device.type == "cpu", f"{where} is on {b.device}, not the CPU"
        torch.testing.assert_close(b, a, rtol=tolerance, atol=tolerance, equal_nan=True, msg=where)
    elif isinstance(a, float) and isinstance(b, float):
        assert (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance), (
            f"{where}: {a} != {b}"
        )
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.fixture(scope="module")
def on_cpu(setting) -> dict:
    return {name: call() for name, call in probe_calls(*setting).items()}


def test_probes_create_what_they_compute_with_on_the_models_device(setting, on_cpu):
    for name, call in probe_calls(*setting).items():
        with torch.device("meta"):
            result = call()
        assert_same(on_cpu[name], result, name)


def test_probes_move_the_batch_to_the_models_device(setting, on_cpu):
    model, batch, reference, graph = setting
    for name, call in probe_calls(model, elsewhere(batch), elsewhere(reference), graph).items():
        assert_same(on_cpu[name], call(), name)


def test_the_elsewhere_stand_in_catches_a_batch_left_behind(setting):
    model, batch, _, _ = setting
    with pytest.raises(RuntimeError, match="without being moved"):
        model(elsewhere(batch).inputs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_probes_on_a_cuda_model_match_the_cpu(setting, on_cpu):
    model, batch, reference, graph = setting
    model = model.to("cuda", print_details=False)
    try:
        for name, call in probe_calls(model, batch, reference, graph).items():
            assert_same(on_cpu[name], call(), name, tolerance=1e-3)
    finally:
        model.to("cpu", print_details=False)


def test_the_report_measures_the_same_under_another_default_device(tiny_runs, tmp_path):
    from probes.report.measure import measure_run
    from tasks.training.runs import Run

    run = Run(tiny_runs / "attn-only-2x1" / "seed0")
    plain = measure_run(run, tmp_path / "plain")
    with torch.device("meta"):
        moved = measure_run(Run(run.path), tmp_path / "meta")
    assert_same(plain, moved)
