"""Positions by role: where a task's layout varies per example, a plugin names positions by what they
hold (tasks.base.Example.roles, e.g. {"binder_end": 7}), and attention and patching are summarised
per role instead of per absolute position. An absolute position then mixes examples whose binder
sits there with examples whose binder is elsewhere; a role is the same thing in every example.

Per role: the attention mass each head's scored-position rows put on the key at that role's
position, and the share of the clean - counterfactual gap restored by patching each head's output
at that role's position in every pair (probes.patching, one position per example).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.data import Batch


@dataclass(frozen=True)
class RoleView:
    roles: tuple[str, ...]                  # the task's role names, sorted
    rows: int                               # examples the attention is averaged over
    attention: dict[str, dict[str, torch.Tensor]]   # query role (or SCORED) -> key role -> [layer, head]
                                            # mean mass from that query to the key at the role's position
    pairs: int                              # counterfactual pairs the patching is measured on
    recovered: dict[str, torch.Tensor]      # role -> [layer, head] share of the gap, head output patched there


def role_patching(model, pairs: Batch, patching) -> dict[str, torch.Tensor]:
    """role -> [layer, head] share of the gap restored by each head's clean output at that role's
    position of every pair (`patching`: the run's probes.patching.ActivationPatching, for its scale)."""
    from probes.patching import patch_many

    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    out = {}
    for role, where in sorted(pairs.roles.items()):
        if bool((where < 0).any()):     # a role some pairs lack has no position to patch there
            continue
        targets = [(layer, where, head) for layer in range(n_layers) for head in range(n_heads)]
        metric = torch.tensor([o.metric for o in patch_many(model, pairs, "z", targets)], device="cpu")
        out[role] = patching.recovered(metric.view(n_layers, n_heads))
    return out


def role_view(model, sample: Batch, pairs: Batch, patching) -> RoleView | None:
    """Attention (on `sample`'s scored rows) and patching (on `pairs`) by role; None for a task
    that names no roles."""
    from probes.attention import SCORED, patterns, role_attention

    if not sample.roles:
        return None
    sample = sample.to("cpu")
    attention = patterns(model, sample.inputs)
    by_query = {SCORED: role_attention(attention, sample)}
    by_query.update({role: role_attention(attention, sample, role) for role in sorted(sample.roles)})
    return RoleView(tuple(sorted(sample.roles)), len(sample), by_query, len(pairs),
                    role_patching(model, pairs, patching) if pairs.counterfactual is not None and patching else {})
