"""A plugin whose answer needs three heads in series and whose layout varies per example
(tests/plugins/pointer_tasks.py, twohop: `a 3 d a c 7 b c ? d` -> 3, statements shuffled, each
source before its alias; the partner swaps the sources' names). The edge oracle's circuit is a
multi-hop chain, and the summary, the census and the role view must say what it says.

The chain the task is built for (measured, seeds 0-2): L0H0 copies each statement's lhs onto its
rhs; L1H0, at the alias's rhs, finds the source whose lhs is that name (reading L0H0 through its
keys) and copies the value; L2H0, at the query, finds the alias whose lhs is the query (L0H0 through
its keys) and reads L1H0's copy through its values: oracle edges embed -> L0H0.v, L0H0 -> L1H0.k,
L1H0 -> L2H0.v, L2H0 -> logits at 91-103% of the gap each. With one head per block the architecture
leaves no other way, so every seed shares the mechanism: the census case "two mechanisms, two rows"
is checked only in the sense that rows must follow the oracle's partition of the seeds.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from probes.settings import ReportSettings
from tests.refusals import fixture_plugins_on_path

SMALL = ReportSettings(ablation_rows=128, reference_rows=128, patch_pairs=32)
SEEDS = (1, 2)  # seeds 0-2 all learn the chain (measured); 1 and 2 are the quicker (900, 1,300 steps)


@pytest.fixture(scope="module", autouse=True)
def pointer_plugin():
    """The fixture plugin, installed for this module only (a dist-info folder on sys.path)."""
    yield from fixture_plugins_on_path("pointer_tasks")


@pytest.fixture(scope="module")
def twohop_runs(tmp_path_factory) -> Path:
    """The 3-layer attention-only model, trained with the plugin's own settings, one run per seed."""
    from tasks.registry import build_task, get_task_class
    from tasks.settings import model_settings
    from toylens.family import plan_family, train_family

    task = build_task(get_task_class("twohop"), {})
    settings = {name: model_settings(task, name, {}) for name in task.default_models()}
    out = tmp_path_factory.mktemp("twohop") / "runs"
    train_family(plan_family(task, ["attn-only-3x1"], list(SEEDS), settings, out), progress=False, jobs=2)
    return out


@pytest.fixture(scope="module")
def analyses(twohop_runs):
    """(Run, RunAnalysis, EdgeRun) per seed, on the small report basis."""
    from probes.report.edge_part import measure_edge_circuit
    from probes.report.parts import RunContext
    from probes.report.run_analysis import analyse_run
    from tasks.training.runs import find_runs

    out = []
    for run in find_runs(twohop_runs):
        context = RunContext(run, None, SMALL)
        out.append((run, analyse_run(context), measure_edge_circuit(context)))
    return out


def oracle_head_edges(edges) -> tuple[str, ...]:
    """The edge oracle's head-to-head edges at the claim, as probes.report.words.views_agree reads them."""
    from probes.report.words import views_agree

    return views_agree(edges[1], edges[2].result, SMALL).edge_view


def series(names) -> list[str]:
    """The longest run of head-to-head edges in series (each edge's receiver the next one's sender),
    from edge names 'L0H0 -> L1H0.k'."""

    def ends(name):
        sender, receiver = name.split(" -> ")
        return sender, receiver.split(".")[0]

    def longest(head, used):
        best = []
        for name in names:
            if name not in used and ends(name)[0] == head:
                tail = [name] + longest(ends(name)[1], used | {name})
                best = max(best, tail, key=len)
        return best

    return max((longest(ends(name)[0], frozenset()) for name in names), key=len, default=[])


def test_order_blind_models_cannot_tell_a_pair_apart():
    """By construction of the data: every held-out pair holds the same tokens with different answers,
    so a model that ignores order gives both the same prediction (at most half of each pair right)."""
    from pointer_tasks import TwoHopTask

    task = TwoHopTask()
    for example in task.generate(0)["heldout"][:200]:
        clean, partner = example.tokens, example.counterfactual
        assert sorted(clean[:-1]) == sorted(partner[:-1]) and clean[-1] != partner[-1]


# 1. The edge oracle's circuit is a chain: at least two head-to-head edges in series, each alone at
# the claim. Catches: a task (or training setting) that no longer needs three heads, which would make
# the tests below pass on a two-head circuit.
def test_every_seed_learns_and_the_oracle_finds_a_multi_hop_chain(analyses):
    for run, analysis, edges in analyses:
        assert analysis.accuracy.splits["heldout"].accuracy.value >= 0.9, f"seed {run.seed} did not learn the task"
        chain = series(oracle_head_edges((run, analysis, edges)))
        assert len(chain) >= 2, f"seed {run.seed}: the oracle's head-to-head edges {chain} are not a chain"


# 2. The summary names that chain the way the oracle does: the same heads, the same ports, and the
# chain itself in order. Catches: a summary that reads the run as one hop (a hop whose position
# varies per example missed by the single-position rule), or says "no path" while a table shows one.
def test_the_summary_names_the_oracles_chain(analyses):
    from probes.report.words import describe, paths_of, views_agree

    for run, analysis, edges in analyses:
        agreement = views_agree(analysis, edges.result, SMALL)
        assert agreement.agree, agreement.words
        words = describe(analysis, SMALL, analysis.vocabulary)
        chain = series(agreement.edge_view)
        for name in chain:
            assert name in words, f"seed {run.seed}: {name} missing from the summary"
        assert "in series: " + ", then ".join(chain) in words
        strong = [p for p in paths_of(analysis) if p.strength >= SMALL.path_claim]
        assert strong and "no head-to-head path" not in words


# 3. The census counts one mechanism once: seeds whose oracle chains are the same edges share one
# label and one row; seeds whose chains differ get one row each. The expected rows come from the
# oracle, not from the labels. Catches: labels carrying positions or sample tokens (one mechanism
# split in two because its positions vary), or labels that lose a hop (two mechanisms merged).
def test_the_census_counts_each_oracle_chain_once(analyses):
    from probes.census import group_census
    from probes.circuits.labels import CircuitSummary, circuit_label
    from probes.report.words import circuit_summary

    members, by_chain = [], defaultdict(list)
    for run, analysis, edges in analyses:
        stored = CircuitSummary.from_dict(json.loads(json.dumps(circuit_summary(analysis).to_dict())))  # as stored
        label = circuit_label(stored)
        members.append((run, label.kind, label.text, None))
        by_chain[frozenset(oracle_head_edges((run, analysis, edges)))].append(run.seed)
        # The label names heads by role ("L1 induction head"), so an edge is matched by layers and port.
        labelled = {
            (sender.split()[0], receiver.split()[0], receiver.rsplit(".", 1)[1])
            for sender, receiver in (edge.split(" -> ") for edge in label.text.split("; "))
            if "." in receiver
        }
        for name in oracle_head_edges((run, analysis, edges)):
            sender, receiver = name.split(" -> ")
            head, port = receiver.split(".")
            assert (sender.split("H")[0], head.split("H")[0], port) in labelled, (label.text, name)
    group = group_census("attn-only-3x1", "default", {}, members, 0)
    assert sorted(group.seeds.values()) == sorted(sorted(seeds) for seeds in by_chain.values())
    assert group.named.count == len(analyses)


# 4. The hop heads attend by role: the head reading through the first hop attends, from the alias's
# rhs, the source's value; the last head attends, from the query, the alias's rhs. Those sit at
# different absolute positions in different examples, so no absolute position holds what the role
# holds. Catches: attention summarised by absolute position only (an average over examples whose
# binder sits elsewhere).
def test_the_hop_heads_attend_by_role(analyses):
    for run, analysis, edges in analyses:
        first, second = series(oracle_head_edges((run, analysis, edges)))[-2:]
        middle = [int(n) for n in second.split(" -> ")[0][1:].split("H")]
        last = [int(n) for n in second.split(" -> ")[1].split(".")[0][1:].split("H")]
        view = analysis.roles
        assert float(view.attention["alias_rhs"]["source_rhs"][middle[0], middle[1]]) > 0.5, (run.seed, first)
        role_mass = float(view.attention["query"]["alias_rhs"][last[0], last[1]])
        by_position = analysis.attention.mean["all"][last[0], last[1]]
        assert role_mass > 0.5 and role_mass > float(by_position.max()) + 0.2, (role_mass, by_position.tolist())
