"""Joint path patching: a set of senders into a set of receivers' Q/K/V input at once."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models import ModelSpec, UsageError, build_model
from models.components import Head
from tasks.data import Batch
from tests.conftest import hand_batch


def two_key_readers():
    """2 layers x 2 heads (d_head 8), no norm. Dims: tokens 0-3 (one-hot), positions 8-11 (one-hot),
    L0H0 writes the prefix average of tokens into 4-7 (L0H1 is silent); both layer-1 heads read
    4-7 only through their keys (queries and values read positions) and write 12-15, the only dims
    the unembedding reads. So tokens reach the logits only along L0H0 -> L1H0.k and L0H0 -> L1H1.k:
    two redundant K edges that carry the whole clean - corrupt gap between them."""
    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, mlp=False, norm=None, n_ctx=4, d_vocab=4)
    model = build_model(spec, seed=0)
    generator = torch.Generator().manual_seed(0)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    token, sender, position, out = slice(0, 4), slice(4, 8), slice(8, 12), slice(12, 16)
    state["embed.weight"][:, token] = torch.eye(4)
    state["pos_embed.weight"][:, position] = torch.eye(4)
    state["blocks.0.attn.v.weight"][:4, token] = torch.eye(4)  # zero scores: a uniform prefix average
    state["blocks.0.attn.o.weight"][sender, :4] = 4 * torch.eye(4)
    for head in (slice(0, 8), slice(8, 16)):
        state["blocks.1.attn.q.weight"][head, position] = torch.randn(8, 4, generator=generator)
        state["blocks.1.attn.k.weight"][head, sender] = torch.randn(8, 4, generator=generator)
        state["blocks.1.attn.v.weight"][head, position] = torch.randn(8, 4, generator=generator)
        state["blocks.1.attn.o.weight"][out, head] = torch.randn(4, 8, generator=generator)
    state["unembed.weight"][:, out] = torch.randn(4, 4, generator=generator)
    model.load_state_dict(state)
    return model.eval()


def predicted_pairs(model) -> Batch:
    """hand_batch with answer = the clean prediction and foil = the corrupt one (another token
    where they agree), so the clean - corrupt gap is the model's own. With a foil the metric is the
    answer - foil logit, linear in the final residual of a model without norm."""
    batch = hand_batch()
    with torch.no_grad():
        clean = model(batch.inputs)[:, 3].argmax(-1)
        corrupt = model(batch.counterfactual[:, :-1])[:, 3].argmax(-1)
    return dataclasses.replace(batch, answers=clean, foils=torch.where(corrupt == clean, (clean + 1) % 4, corrupt))


def random_model(norm=None):
    """2 layers x 2 heads, random weights scaled up from the small init so every head matters."""
    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, mlp=False, norm=norm, n_ctx=4, d_vocab=4)
    model = build_model(spec, seed=5)
    model.load_state_dict({name: 3 * value for name, value in model.state_dict().items()})
    return model


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_a_joint_path_of_one_head_each_is_the_single_edge(component):
    from probes.circuits.path_patching import PathTarget, joint_path_patch, path_patch_many

    model, batch = random_model(norm="LN"), hand_batch()
    # The single-head form and the one-head sets, in different replicas of one forward.
    single, joint = path_patch_many(
        model, batch, [PathTarget((0, 1), None, (1, 0), component), PathTarget(((0, 1),), None, ((1, 0),), component)]
    )
    assert (joint.sender, joint.receiver) == (single.sender, single.receiver) == ((Head(0, 1),), (Head(1, 0),))
    for field in ("metric", "recovered", "restored", "attention_moved", "attention_recovered"):
        assert getattr(joint, field) == pytest.approx(getattr(single, field), abs=1e-6)
    assert joint_path_patch(model, batch, [(0, 1)], ["L1H0"], component).metric == pytest.approx(joint.metric, abs=1e-6)
    assert abs(single.recovered) > 1e-3


def test_redundant_receivers_need_the_joint_path():
    from probes.patching import patch_many
    from probes.circuits.path_patching import PathTarget, path_patch_many

    model = two_key_readers()
    batch = predicted_pairs(model)
    first, second, joint = path_patch_many(
        model,
        batch,
        [
            PathTarget((0, 0), None, (1, 0), "k"),
            PathTarget((0, 0), None, (1, 1), "k"),
            PathTarget(((0, 0),), None, ((1, 0), (1, 1)), "k"),
        ],
    )
    assert (str(joint.sender), str(joint.receiver)) == ("L0H0", "L1H0+L1H1")
    # The sender reaches the logits only through the two receivers' keys, so the joint path equals
    # restoring its whole output (two exact interventions), where either edge alone falls short.
    whole = patch_many(model, batch, "z", [(0, None, 0)])[0]
    assert joint.metric == pytest.approx(whole.metric, abs=1e-5)
    assert min(first.recovered, second.recovered) > 0.05
    assert joint.recovered > max(first.recovered, second.recovered) + 0.05
    # Without a final norm the answer - foil logit is a sum of the receivers' outputs: edges add up.
    assert joint.recovered == pytest.approx(first.recovered + second.recovered, abs=1e-5)
    assert joint.attention_moved == pytest.approx((first.attention_moved + second.attention_moved) / 2)


def test_joint_senders_add_their_writes_into_the_receiver_input():
    """Independent of probes.circuits.path_patching: K of L1H0 rebuilt by hand from the corrupt residual
    plus both layer-0 heads' clean - corrupt writes (no norm, so K is affine in the residual)."""
    from probes.patching import corrupt_inputs, outcome, replica_scored
    from probes.circuits.path_patching import joint_path_patch, path_patch

    model, batch = random_model(), hand_batch()
    corrupt = corrupt_inputs(batch)
    _, clean_cache = model.run_with_cache(batch.inputs)
    _, corrupt_cache = model.run_with_cache(corrupt)
    writes = sum(
        (clean_cache["blocks.0.attn.hook_z"][:, :, h] - corrupt_cache["blocks.0.attn.hook_z"][:, :, h])
        @ model.W_O[0, h]
        for h in (0, 1)
    )
    key = (corrupt_cache["blocks.1.hook_resid_pre"] + writes) @ model.W_K[1, 0] + model.b_K[1, 0]

    def swap_key(k, hook):
        k = k.clone()
        k[:, :, 0] = key
        return k

    logits = model.run_with_hooks(corrupt, fwd_hooks=[("blocks.1.attn.hook_k", swap_key)])
    expected = outcome(replica_scored(logits, batch), batch)[0]
    joint = joint_path_patch(model, batch, ["L0H0", "L0H1"], ["L1H0"], "k")
    assert joint.metric == pytest.approx(expected.metric, abs=1e-5)
    singles = [path_patch(model, batch, f"L0H{h}", "L1H0", "k").metric for h in (0, 1)]
    assert all(abs(joint.metric - single) > 1e-4 for single in singles)


@pytest.mark.parametrize(
    "senders, receivers",
    [
        (["L1H0"], ["L1H1"]),  # same block
        (["L0H0", "L1H0"], ["L1H1"]),  # one sender not before the receivers
        (["L0H0"], ["L1H0", "L2H0"]),  # receivers over two layers
        ([], ["L1H0"]),
    ],
)
def test_receivers_must_follow_every_sender_in_one_layer(senders, receivers):
    from probes.circuits.path_patching import joint_path_patch

    spec = ModelSpec(n_layers=3, d_model=8, n_heads=2, mlp=False, n_ctx=4, d_vocab=4)
    with pytest.raises(UsageError):
        joint_path_patch(build_model(spec, seed=0), hand_batch(), senders, receivers, "k")


def test_clean_values_swap_in_the_receivers_clean_value_input():
    """A K path with clean values = the hand-built K swap plus the clean run's v for the receiver;
    with no sender position patched it is the clean v alone."""
    from probes.patching import corrupt_inputs, outcome, replica_scored
    from probes.circuits.path_patching import PathTarget, path_patch_many

    model, batch = random_model(), hand_batch()
    corrupt = corrupt_inputs(batch)
    _, clean_cache = model.run_with_cache(batch.inputs)
    _, corrupt_cache = model.run_with_cache(corrupt)
    write = (clean_cache["blocks.0.attn.hook_z"][:, :, 1] - corrupt_cache["blocks.0.attn.hook_z"][:, :, 1]) @ model.W_O[
        0, 1
    ]
    key = (corrupt_cache["blocks.1.hook_resid_pre"] + write) @ model.W_K[1, 0] + model.b_K[1, 0]

    def swap(name, value):
        def hook(act, hook):
            act = act.clone()
            act[:, :, 0] = value
            return act

        return (name, hook)

    clean_v = swap("blocks.1.attn.hook_v", clean_cache["blocks.1.attn.hook_v"][:, :, 0])
    expected = [
        outcome(replica_scored(model.run_with_hooks(corrupt, fwd_hooks=hooks), batch), batch)[0].metric
        for hooks in ([swap("blocks.1.attn.hook_k", key), clean_v], [clean_v])
    ]
    with_path, values_only = path_patch_many(
        model,
        batch,
        [
            PathTarget((0, 1), None, (1, 0), "k", clean_values=True),
            PathTarget((0, 1), (), (1, 0), "k", clean_values=True),
        ],
    )
    assert [with_path.metric, values_only.metric] == pytest.approx(expected, abs=1e-5)
    assert abs(with_path.metric - values_only.metric) > 1e-4 and with_path.clean_values
    with pytest.raises(UsageError):
        PathTarget((0, 1), None, (1, 0), "v", clean_values=True)


def test_a_path_keeps_typed_heads_and_is_stored_by_their_names():
    from dataclasses import asdict

    from models.components import HeadSet
    from probes.circuits.path_patching import PathPatch
    from probes.report.parts import jsonable

    patch = PathPatch(HeadSet(["L0H1", (0, 3)]), None, HeadSet([Head(1, 0)]), "k", 0.0, 0.5, 0.5, 0.1, 0.2)
    assert patch.sender == (Head(0, 1), Head(0, 3)) and str(patch.sender) == "L0H1+L0H3"
    assert asdict(patch)["sender"] == patch.sender  # dataclasses.asdict rebuilds the HeadSet
    stored = jsonable(patch)
    assert (stored["sender"], stored["receiver"], stored["where"]) == ("L0H1+L0H3", "L1H0", "all positions")
