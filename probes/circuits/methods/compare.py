"""Every edge method on one pair of recorded runs (probes.circuits.ablations: counterfactual, mean
or zero writes for the edges left out), each an EdgeScores timed from the recorded runs on: the
exact oracle (each edge alone), EAP, EAP-IG, ACDC, the joint search and learned masks."""

from __future__ import annotations

from models.graph import Graph
from models import Model
from probes.circuits.methods.joint import joint_search
from probes.circuits.methods.masks import MaskSettings, learned_masks
from probes.circuits.methods.attribution import EdgeScores, acdc, eap, eap_ig
from probes.circuits.named import ORACLE
from probes.circuits.oracle import Runs, edge_effects
from tasks.data import Batch


def every_method(
    model: Model,
    batch: Batch,
    graph: Graph,
    runs: Runs,
    ig_steps: int = 5,
    acdc_threshold: float = 0.01,
    masks: MaskSettings = MaskSettings(),
) -> list[EdgeScores]:
    oracle = edge_effects(model, batch, graph, runs=runs)
    single = oracle.normalised()
    return [
        EdgeScores(ORACLE, graph.edges, oracle.effect, oracle.seconds),
        eap(model, batch, graph, runs=runs),
        eap_ig(model, batch, graph, ig_steps, runs=runs),
        acdc(model, batch, graph, acdc_threshold, runs=runs),
        joint_search(model, batch, graph, runs, single).scores,
        learned_masks(model, batch, graph, runs, single, masks).scores,
    ]
