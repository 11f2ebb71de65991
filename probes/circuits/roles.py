"""Each head's role, measured, in words a reader knows, so a mechanism's signature
(probes.circuits.signature) names a head by its layer and role, never by its index.

Roles come from measurement (`head_roles`): TransformerLens's head-detector patterns over every
query row (probes.heads: previous-token, duplicate-token, induction), and attention at the scored
positions (probes.attention: on the current token, on a role's position). A head gets the role
whose mean attention mass is largest when it is at least ROLE_CLAIM; otherwise its role is
UNNAMED, never its index. Attention at the scored positions names a head only when the circuit
reads that head's output there (`read_at_scored`: into the logits, or into a query or an MLP read
there in turn); a head read only through keys and values is read at the positions it is attended
from, so what it does at the scored position is no part of the mechanism. Without that rule the
same circuit flapped between seeds: markcopy's layer-0 head, read only through the layer-1 keys
and values, attended the current token at the scored position in some seeds and not in others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.stages import timed

if TYPE_CHECKING:
    from torch import Tensor

UNNAMED = "unnamed role"
ROLE_CLAIM = 0.5  # mean attention mass on a role's target from which the head is named for it (more
# than half its attention: no other target can hold as much)
PREVIOUS, DUPLICATE, INDUCTION = "previous-token head", "duplicate-token head", "induction head"
CURRENT = "attends the current token"
DETECTOR_ROLES = {"previous_token": PREVIOUS, "duplicate_token": DUPLICATE, "induction": INDUCTION}


def attends_role(role: str) -> str:
    return f"attends the {role} role"


@dataclass(frozen=True)
class RoleMasses:
    """Each head's mean attention mass on each role's target, measured two ways: `everywhere` over
    every query row (TL's head detectors), `scored` from the scored positions only, and `low`, the
    lower end of each mean's 95% interval (role_masses). role words -> [layer, head]."""

    everywhere: dict
    scored: dict
    claim: float = ROLE_CLAIM
    low: dict = field(default_factory=dict)  # a role without one: its mean stands in

    def role(self, head, read_at_scored: bool) -> str:
        """The role with the largest mass when its interval lies at or above the claim, else
        UNNAMED; attention at the scored positions competes only for a head read there. Ties go to
        the first role in role_masses' order (the same for every head, so relabelling keeps them)."""
        masses = {**self.everywhere, **(self.scored if read_at_scored else {})}
        best, mass = max(((r, float(m[head.layer, head.head])) for r, m in masses.items()), key=lambda item: item[1])
        low = float(self.low[best][head.layer, head.head]) if best in self.low else mass
        return best if mass >= self.claim and low >= self.claim else UNNAMED


def lower_end(mean: Tensor, rows: Tensor, confidence: float = 0.95) -> Tensor:
    """[layer, head] lower end of `mean`'s t interval from the spread of `rows` ([n, layer, head]),
    at least 0 (a mass); with under two rows, 0: one row pins nothing down."""
    from scipy.stats import t

    n = rows.shape[0]
    if n < 2:
        return mean.new_zeros(mean.shape)
    half = float(t.ppf(0.5 + confidence / 2, n - 1)) * rows.std(0) / math.sqrt(n)
    return (mean - half).clamp(min=0.0)


@timed("role masses")
def role_masses(model, batch, claim: float = ROLE_CLAIM, attention=None) -> RoleMasses:
    """TL's head-detector patterns over every query row (probes.heads.attention_scores), and at the
    scored positions the current token and each position role the task names
    (probes.attention.role_attention). A role that sits at the scored position in every row is the
    current token, not a second role with the same mass (which float noise would break ties for).

    A head is named for a role only when the lower end of its mass's 95% interval reaches the claim:
    a mean within sampling noise of the claim (0.504 +- 0.014 was seen) would otherwise name one
    mechanism's head differently in two seeds, by which side of the claim it fell. The interval is
    over examples for the detectors (each example's mean over its rows) and over the scored rows
    for the scored masses (taken as independent: a task scored at many positions per example gets
    an interval narrower than its examples support). `attention`: probes.attention.patterns of the
    batch, when the caller has them."""
    import torch

    from probes.attention import offsets, patterns, role_attention_rows
    from probes.heads import attention_spread

    batch = batch.to("cpu")
    attention = patterns(model, batch.inputs) if attention is None else attention
    spread = {DETECTOR_ROLES[name]: value for name, value in attention_spread(model, batch, attention).items()}
    everywhere = {role: mean for role, (mean, _) in spread.items()}
    low = {role: lower_end(mean, each) for role, (mean, each) in spread.items()}
    rows = attention[batch.example_index, :, :, batch.positions]
    scored = {CURRENT: offsets(rows, batch.positions)[:, :, 0]}
    low[CURRENT] = lower_end(scored[CURRENT], rows[torch.arange(len(rows)), :, :, batch.positions])
    at_query = {
        role for role, where in batch.roles.items() if bool((where[batch.example_index] == batch.positions).all())
    }
    for role, each in role_attention_rows(attention, batch).items():
        if role not in at_query:
            mean = scored[attends_role(role)] = each.mean(0)
            low[attends_role(role)] = lower_end(mean, each)
    return RoleMasses(everywhere, scored, claim, low)


def read_at_scored(edges, sinks=()) -> set:
    """The nodes whose output the circuit reads at the scored positions: the logits' senders and
    `sinks`, and, in turn, whatever feeds a query or an MLP among them (a query and an MLP read the
    stream at the position they write; keys and values read the positions attended to)."""
    from models.graph import Logits

    read = {Logits(), *sinks}
    grown = True
    while grown:
        before = len(read)
        read |= {e.sender for e in edges if e.receiver.node in read and e.receiver.port in ("q", "in")}
        grown = len(read) > before
    return read


def circuit_roles(edges, measured: RoleMasses, heads=(), sinks=()) -> dict:
    """Head -> its role in the circuit of `edges` (and `heads` without an edge)."""
    from models.components import Head

    read = read_at_scored(edges, sinks)
    nodes = {n for e in edges for n in (e.sender, e.receiver.node)} | set(heads)
    return {n: measured.role(n, n in read) for n in nodes if isinstance(n, Head)}
