"""The census's circuit labels follow the report's naming rule (a path is named only above its
claim threshold) and keep every run: unnamed and untraced runs get labels of their own."""

from __future__ import annotations

import pytest

from probes.circuits.labels import CircuitSummary, Edge, circuit_label
from probes.settings import DEFAULT

EDGE_CLAIM = DEFAULT.path_claim


def summary(nodes=("L0H0", "L1H0@p14"), recovered=None, n_layers=2) -> CircuitSummary:
    edge = None if recovered is None else Edge("L0H0", "L1H0", "q", 14, "p14 the", recovered, 1.0)
    return CircuitSummary("attn-only-2x1", 0, n_layers, 1.0, tuple(nodes), edge, 1.0)


def test_a_path_at_the_claim_threshold_is_named():
    label = circuit_label(summary(recovered=EDGE_CLAIM))
    assert (label.kind, label.text, label.named) == ("path", "Q-composition L0H0->L1H0 at p14 the", True)


def test_a_path_below_the_threshold_is_not_named_but_counted():
    label = circuit_label(summary(recovered=EDGE_CLAIM - 0.01))
    assert not label.named and label.kind == "no single path" and "L0H0+L1H0@p14" in label.text


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

    from probes.census import Census, group_census, markdown, summary_lines

    def member(seed, stop_reason, heldout):
        run = SimpleNamespace(seed=seed, metrics={"stop_reason": stop_reason, "accuracy": {"heldout": heldout}})
        return run, "untraced", "no circuit traced", None

    group = group_census("attn-only-2x1", "default", {}, [member(0, "validation solved", 1.0),
                                                           member(27, "validation stalled", 0.5)], 0)
    assert (group.unsolved.label, group.unsolved.count) == ("unsolved (validation never solved)", 1)
    census = Census((group,), ())
    text = markdown(census, None) + "\n".join(summary_lines(census))
    assert "collapsed" not in text.lower() and "1/2 = 50% [9%, 91%] unsolved" in text
