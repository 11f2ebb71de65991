"""The census's circuit labels follow the report's naming rule (a path is named only above its
claim threshold) and keep every run: unnamed and untraced runs get labels of their own."""

from __future__ import annotations

import pytest

from probes.circuits.labels import CircuitSummary, PathFacts, circuit_label
from probes.settings import DEFAULT

EDGE_CLAIM = DEFAULT.path_claim


def summary(nodes=("L0H0", "L1H0@p14"), recovered=None, n_layers=2, everywhere=None, paths=()) -> CircuitSummary:
    edge = None if recovered is None else PathFacts("L0H0", "L1H0", "q", 14, "p14 the", recovered, 1.0, everywhere)
    return CircuitSummary(
        "attn-only-2x1", 0, n_layers, 1.0, tuple(nodes), edge, 1.0, paths=tuple(paths) or ((edge,) if edge else ())
    )


def test_a_path_at_the_claim_threshold_is_named_by_its_mechanism_alone():
    label = circuit_label(summary(recovered=EDGE_CLAIM))
    assert (label.kind, label.text, label.named) == ("path", "Q-composition L0H0->L1H0", True)


def test_a_path_below_the_threshold_is_not_named_but_counted():
    label = circuit_label(summary(recovered=EDGE_CLAIM - 0.01))
    assert not label.named and label.kind == "no single path" and "(L0H0+L1H0)" in label.text


# A path whose position varies per example recovers little at any one position but all of it with
# the sender at every position (the edge oracle's view). Catches: a two-hop circuit read as one hop
# because its first hop's position varied.
def test_a_path_is_named_from_the_sender_at_every_position():
    hop1 = PathFacts("L0H0", "L1H0", "k", 7, "p7", 0.46, 0.4, 1.01)
    hop2 = PathFacts("L1H0", "L2H0", "q", 17, "p17", 0.9, 0.9, 0.95)
    weak = PathFacts("L0H0", "L2H0", "v", 3, "p3", 0.05, 0.0, 0.1)
    label = circuit_label(summary(nodes=("L0H0", "L1H0", "L2H0@p17"), n_layers=3, paths=(hop2, hop1, weak)))
    assert label.text == "K-composition L0H0->L1H0 + Q-composition L1H0->L2H0"
    unnamed = circuit_label(summary(recovered=0.3, everywhere=EDGE_CLAIM - 0.01))
    assert unnamed.kind == "no single path"


# Labels carry no position and no token found there: one mechanism over seeds is one label.
# Catches: "... at p17 (a, b, ...)" and "... at p17 (c, f, ...)" counted as two circuits.
def test_one_mechanism_at_different_positions_is_one_label():
    first = summary(paths=(PathFacts("L0H0", "L1H0", "k", 7, "p7 (a, b, ...)", 0.2, 0.1, 0.9),))
    second = summary(paths=(PathFacts("L0H0", "L1H0", "k", 11, "p11 (c, f, ...)", 0.3, 0.2, 0.8),))
    assert circuit_label(first) == circuit_label(second)


@pytest.mark.parametrize("n_layers, words", [(2, "within one block"), (1, "one block")])
def test_no_edge_means_one_block(n_layers, words):
    label = circuit_label(summary(nodes=("L0H0", "L0H2"), n_layers=n_layers))
    assert label.kind == "one block" and label.text.startswith(words + " (")


def test_no_circuit_is_untraced():
    assert circuit_label(summary(nodes=())).kind == "untraced"


def test_summary_round_trips_through_json():
    import json

    original = summary(recovered=0.8)
    assert CircuitSummary.from_dict(json.loads(json.dumps(original.to_dict()))) == original


# A run whose validation was never solved is counted as "unsolved", not "collapsed": the report
# keeps that word for its run-health flag (a constant output, or train accuracy far below its
# peers'), which a stalled run at 50% need not meet. Catches: the census and the report giving
# one run two verdicts under one word.
def test_a_stalled_run_is_counted_unsolved_not_collapsed():
    from types import SimpleNamespace

    from probes.census import Census, group_census
    from probes.report.outputs.census import markdown, summary_lines

    def member(seed, stop_reason, heldout):
        run = SimpleNamespace(seed=seed, metrics={"stop_reason": stop_reason, "accuracy": {"heldout": heldout}})
        return run, "untraced", "no circuit traced", None

    group = group_census(
        "attn-only-2x1", "default", {}, [member(0, "validation solved", 1.0), member(27, "validation stalled", 0.5)], 0
    )
    assert (group.unsolved.label, group.unsolved.count) == ("unsolved (validation never solved)", 1)
    census = Census((group,), ())
    text = markdown(census, None) + "\n".join(summary_lines(census))
    assert "collapsed" not in text.lower() and "1/2 = 50% [9%, 91%] unsolved" in text


# A traced two-block run's circuit.json holds its paths as objects: the census must read them
# (a schema typing them as a list of strings refused every such run as unreadable). Catches: every
# real 2-layer run counted as unreadable.
def test_a_circuit_json_with_paths_is_read_back(tmp_path):
    import json
    from types import SimpleNamespace

    from models.spec import ModelSpec
    from probes.census import circuit_record, read_circuit
    from probes.circuits.labels import CircuitSummary, PathFacts, circuit_label

    path = PathFacts("L0H0", "L1H0", "q", 14, "p14", 0.9, 1.0, 0.95)
    summary = CircuitSummary(
        "attn-only-2x1", 3, 2, 1.0, nodes=("L0H0@p14", "L1H0@p14"), edge=path, paths=(path,), faithfulness=0.97
    )
    config = {"run_sha256": "r" * 64, "weights_sha256": "w" * 64, "spec": {"n_layers": 2}}
    (tmp_path / "circuit.json").write_text(json.dumps(circuit_record(summary, config)))
    run = SimpleNamespace(
        path=tmp_path,
        config=config,
        model_name="attn-only-2x1",
        seed=3,
        spec=ModelSpec(n_layers=2),
        metrics={"accuracy": {"heldout": 1.0}},
    )
    assert circuit_label(read_circuit(run)).text == "Q-composition L0H0->L1H0"
