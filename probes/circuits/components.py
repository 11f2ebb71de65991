"""A circuit's components (its heads and MLPs, the senders of models/graph.py other than the
embeddings), in order, and how sets of them are knocked out: what probes.circuits.logic,
.subsets, .interactions, .rows and .relation_classes all build on (here, below them all, so each
imports it and none imports another back)."""

from __future__ import annotations

import torch
from transformer_lens.utilities import get_act_name

from common.stats import share
from models.bridge import device_of
from models.graph import MLP, Edge, Head
from models.resume import resumable
from models import Model
from probes.circuits.edge_hooks import mlp_out_name
from probes.circuits.oracle import Direction, Runs
from probes.patching import corrupt_inputs, outcome, replica_scored, replicas_per_forward, scored_logits, scored_metric
from tasks.data import Batch

Component = Head | MLP


def ordered(components) -> tuple[Component, ...]:
    return tuple(sorted(components, key=lambda c: (c.layer, isinstance(c, MLP), getattr(c, "head", 0))))


class KnockOut:
    """f of sets of kept components: every other head's z and MLP's output from the counterfactual
    run, on the clean run (0 = the counterfactual run, 1 = the clean run)."""

    def __init__(self, model: Model, batch: Batch, runs: Runs | None, components: tuple[Component, ...]):
        """`runs`: the pairs' recorded runs where the caller has them; None runs the clean forward here,
        keeping only what a knock-out reads (record_runs also keeps every sender's write)."""
        if runs is not None and runs.direction is not Direction.NOISE:
            raise ValueError("components are kept clean: pass runs recorded with direction 'noise'")
        self.model, self.batch, self.components = model, batch.to(device_of(model)), components
        names = {name_of(c) for c in components}
        logits, cache = model.run_with_cache(corrupt_inputs(self.batch), names_filter=lambda n: n in names)
        self.other = {name: cache[name] for name in names}
        # the counterfactual run's metric at each scored position: 0 of the gap, row by row
        self.other_rows = scored_metric(replica_scored(logits, self.batch), self.batch)[0].detach().cpu()
        if runs is None:
            embedded = get_act_name("resid_pre", 0)
            clean, cache = model.run_with_cache(self.batch.inputs, names_filter=lambda n: n == embedded)
            self.entering = cache[embedded]
            self.empty, self.full = (
                outcome(replica_scored(x, self.batch), self.batch)[0].metric for x in (logits, clean)
            )
        else:
            self.entering = runs.base.resid_pre[0]
            self.empty, self.full = runs.other.outcome.metric, runs.base.outcome.metric
        self.measured = 0

    def hook(self, name: str, members: list[frozenset]):
        """Replica r's activation, with the components of `name` outside members[r] from the other run
        (one masked select per hook: a loop over replicas and components cost seconds per 100 sets)."""
        mine = [c for c in self.components if name_of(c) == name]
        out = torch.tensor([[c not in kept for c in mine] for kept in members], device=self.other[name].device)
        other = self.other[name]
        if name == mlp_out_name(self.model.cfg.n_layers - 1):  # the last MLP runs at the scored positions alone
            other = other[self.batch.example_index, self.batch.positions][:, None]

        def patch(act, hook):
            view = act.view(len(members), -1, *act.shape[1:])
            if isinstance(mine[0], Head):
                mask = torch.zeros(len(members), act.shape[2], dtype=torch.bool, device=act.device)
                mask[:, [c.head for c in mine if isinstance(c, Head)]] = out
                view = torch.where(mask[:, None, None, :, None], other[None], view)
            else:
                view = torch.where(out[:, 0, None, None, None], other[None], view)
            return view.reshape(act.shape)

        return patch

    @torch.no_grad()
    def scored(self, sets: list[frozenset]):
        """[replicas, k, vocab] scored logits of each set, in order. The residual entering the last
        block depends only on the members kept before it, so the earlier blocks run once per distinct
        choice of those (`early`) and the last block once per set: on block-2 the 2^n sets of n members
        cost about half as many block forwards as running every set from the embeddings."""
        self.measured += len(sets)
        per_forward = replicas_per_forward(self.batch)
        last = self.model.cfg.n_layers - 1
        order = sorted(range(len(sets)), key=lambda i: sorted(map(str, self.early(sets[i], last))))
        found: dict[int, torch.Tensor] = {}
        entering: dict[frozenset, torch.Tensor] = {}
        for first in range(0, len(order), per_forward):
            chunk = order[first : first + per_forward]
            keys = list(dict.fromkeys(self.early(sets[i], last) for i in chunk))
            entering = {k: entering[k] for k in keys if k in entering}  # the sorted order reuses the last chunk's
            entering.update(zip(missing := [k for k in keys if k not in entering], self.enter_last(missing, last)))
            resid = torch.cat([entering[self.early(sets[i], last)] for i in chunk])
            hooks = [(name, self.hook(name, [sets[i] for i in chunk])) for name in self.names(last, last + 1)]
            with self.model.hooks(fwd_hooks=hooks):  # only the scored logits are read
                logits = scored_logits(self.model, resid, last, self.batch, len(chunk))
            found.update(zip(chunk, logits))
        for first in range(0, len(sets), per_forward):
            yield torch.stack([found.pop(i) for i in range(first, min(first + per_forward, len(sets)))])

    def early(self, kept: frozenset, last: int) -> frozenset:
        return frozenset(c for c in kept if c.layer < last)

    def names(self, start: int, stop: int) -> list[str]:
        return sorted({name_of(c) for c in self.components if start <= c.layer < stop})

    def enter_last(self, keys: list[frozenset], last: int) -> list[torch.Tensor]:
        """The residual entering the last block with the members before it kept as each key says."""
        if not keys:
            return []
        resid = self.entering.repeat(len(keys), 1, 1)
        if last == 0:
            return list(resid.chunk(len(keys)))
        hooks = [(name, self.hook(name, keys)) for name in self.names(0, last)]
        with self.model.hooks(fwd_hooks=hooks):
            for block in resumable(self.model).blocks[:last]:
                (resid,) = block(resid)
        return list(resid.chunk(len(keys)))

    def __call__(self, sets: list[frozenset]) -> list[float]:
        return [
            share(o.metric, self.empty, self.full) for scored in self.scored(sets) for o in outcome(scored, self.batch)
        ]

    def rows(self, sets: list[frozenset]) -> torch.Tensor:
        """[sets, k] the metric at each scored position (probes.patching.scored_metric) of each set."""
        return torch.cat([scored_metric(scored, self.batch) for scored in self.scored(sets)]).detach().cpu()


def name_of(component: Component) -> str:
    return get_act_name("z", component.layer) if isinstance(component, Head) else mlp_out_name(component.layer)


def member_links(members: frozenset, links: frozenset[Edge]) -> dict:
    """Member -> the members it writes to through a link."""
    out: dict = {m: set() for m in members}
    for edge in links:
        if edge.sender in members and edge.receiver.node in members:
            out[edge.sender].add(edge.receiver.node)
    return out
