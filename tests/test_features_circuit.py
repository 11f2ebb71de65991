"""The feature circuit (probes.features.circuit): with its error nodes the spliced model gives the
model's logits, and each feature -> feature and feature -> logits edge equals the exact oracle's
(probes.circuits.oracle) edge patch with the MLP's write moved by that feature's change alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models import ModelSpec, build_model
from models.graph import MLP, Edge, Input, Logits
from tests.conftest import hand_batch

SPEC = ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4)


@pytest.fixture(scope="module")
def traced():
    from probes.features.activations import collect, mlp_site
    from probes.features.circuit import feature_circuit
    from probes.features.dictionary import DictionaryConfig, train_dictionary

    model = build_model(SPEC, seed=0).eval()
    tokens = torch.randint(0, 4, (256, 4), generator=torch.Generator().manual_seed(0))
    dictionaries = {}
    for layer in range(SPEC.n_layers):
        site = mlp_site(layer)
        acts = collect(model, tokens, torch.ones_like(tokens, dtype=torch.bool), [site.hook_in, site.hook_out])
        config = DictionaryConfig(site.kind, site.hook_in, site.hook_out, 16, 16, 32, 4, steps=100)
        dictionaries[layer] = train_dictionary(
            acts.values[site.hook_in], acts.values[site.hook_out], config, progress=False
        )
    batch = hand_batch()
    return model, batch, dictionaries, feature_circuit(model, batch, dictionaries, "tiny")


def test_error_nodes_reproduce_the_logits(traced):
    from probes.features.splice import spliced_logits

    model, batch, dictionaries, circuit = traced
    clean = model(batch.inputs)
    assert circuit.spliced_error < 1e-5
    assert torch.allclose(spliced_logits(model, batch.inputs, *dictionaries.values()), clean, atol=1e-5)
    # Without them the transcoders alone do not give the model's logits: the test could fail.
    assert not torch.allclose(
        spliced_logits(model, batch.inputs, *dictionaries.values(), error_node=False), clean, atol=1e-3
    )


def oracle_edge(model, batch, dictionaries, sender, receiver):
    """The oracle's edge MLP(sender.layer) -> receiver's MLP (or the logits), the counterfactual MLP
    write being the clean one moved by the sender's change alone; for a feature receiver, the
    transcoder's reading of the input the oracle recomputed."""
    from probes.circuits.oracle import Direction, model_graph, patched_runs, record_runs
    from probes.circuits.edge_hooks import resid_mid_name
    from probes.features.circuit import mlp_in_name, sender_changes, split_writes

    graph = model_graph(model)
    observe = tuple(name for l in dictionaries for name in (mlp_in_name(l), resid_mid_name(l)))
    runs = record_runs(model, batch, graph, Direction.NOISE, observe)
    clean, other = split_writes(runs, dictionaries)
    delta = dict(sender_changes(dictionaries, clean, other))[sender]
    moved = {**runs.base.writes, MLP(sender.layer): runs.base.writes[MLP(sender.layer)] + delta}
    runs = dataclasses.replace(runs, other=dataclasses.replace(runs.other, writes=moved))
    target = Input(Logits()) if receiver is None else Input(MLP(receiver.layer))
    watch = () if receiver is None else (mlp_in_name(receiver.layer),)
    (patched,) = patched_runs(model, batch, graph, [frozenset([Edge(MLP(sender.layer), target)])], runs, watch)
    if receiver is None:
        return patched.outcome.metric - runs.base.outcome.metric
    acts = dictionaries[receiver.layer].encode(patched.observed[mlp_in_name(receiver.layer)].float())
    change = acts[..., receiver.feature] - clean.acts[receiver.layer][..., receiver.feature]
    return float(change[batch.example_index, batch.positions].mean())


def test_edges_equal_the_oracle(traced):
    model, batch, dictionaries, circuit = traced
    effect = circuit.effect
    assert len(circuit.senders) > 4 and bool(torch.isfinite(effect[:, -1]).all())
    checked = []
    to_logits = effect[:, -1].abs().argsort(descending=True)[:4].tolist()
    upstream = [s for s, node in enumerate(circuit.senders) if node.layer == 0]
    feature_columns = [r for r, node in enumerate(circuit.receivers) if node is not None]
    strongest = effect[upstream][:, feature_columns].abs()
    pairs = [
        (upstream[i // len(feature_columns)], feature_columns[i % len(feature_columns)])
        for i in strongest.flatten().argsort(descending=True)[:4].tolist()
    ]
    error = next(s for s, node in enumerate(circuit.senders) if node.feature is None and node.layer == 0)
    for s, r in [(s, len(circuit.receivers) - 1) for s in to_logits + [error]] + pairs:
        ours = float(effect[s, r])
        theirs = oracle_edge(model, batch, dictionaries, circuit.senders[s], circuit.receivers[r])
        checked.append((str(circuit.senders[s]), str(circuit.receivers[r]), ours, theirs))
        assert abs(ours - theirs) < 1e-5, checked[-1]
    # Not a comparison of zeros: the edges checked move their receivers.
    assert max(abs(ours) for *_, ours, _ in checked[:5]) > 1e-3, checked
    assert max(abs(ours) for *_, ours, _ in checked[5:]) > 1e-3, checked
    print("feature edges vs the oracle:", checked)
    # A feature has no edge to a feature of its own layer, and the first layer's features receive none.
    later = next(s for s, node in enumerate(circuit.senders) if node.layer == 1)
    assert bool(torch.isnan(effect[later, feature_columns]).all())
    assert {node.layer for node in circuit.receivers if node is not None} == {1}
