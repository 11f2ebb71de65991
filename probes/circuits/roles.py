"""Each head's role, measured, in words a reader knows, so a mechanism's signature
(probes.circuits.signature) names a head by its layer and role, never by its index.

A head's role is read from its measured profile (`role_masses`): its mean attention mass on each
role's target, from TransformerLens's head-detector patterns over every query row (probes.heads:
previous-token, duplicate-token, induction) and from attention at the scored positions (on the
current token, on each position role the task names, and on each role set: the roles `NAME_0`,
`NAME_1`, ... of a task form the set NAME, e.g. "inside"). The rule (`RoleMasses.role`) names the
best-matching role: the one whose mass's 95% interval lies, at its lower end, above every rival's
mean and at least RATIO times what uniform attention would put there; a sharper or blurrier copy of
one role passes alike, so two seeds that differ only in how sharp one head is get one word. A role
set does not compete with its own members, and a member names the head over its set only at RATIO
times each of its siblings (a head that reads the span from its start is a head of the span): the
most specific role that passes names the head. Where the task has groups, the rule runs per group too, and a head whose best role differs
between groups is named for both ("attends the adjective role (crosser) / the first_noun role
(crossed)"). Pattern words hold only where their defining test can: an induction head needs the
earlier token's successor written into the stream by an earlier layer, so no layer-0 head is one.

Attention at the scored positions names a head only when the circuit reads that head's output
there (`read_at_scored`: into the logits, or into a query or an MLP read there in turn); a head
read only through keys and values is read at the positions it is attended from, so what it does at
the scored position is no part of the mechanism (markcopy's layer-0 head flapped between seeds
without that rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.stages import timed
from tasks.validate import ROLE_MEMBER
from models import Model

if TYPE_CHECKING:
    from torch import Tensor

UNNAMED = "unnamed role"
RATIO = 2.0  # a named role's mass (its interval's lower end) over uniform attention's and, for a role
# set's member, over each sibling's: at 2, twice what chance or the next slot holds
PREVIOUS, DUPLICATE, INDUCTION = "previous-token head", "duplicate-token head", "induction head"
CURRENT = "attends the current token"
DETECTOR_ROLES = {"previous_token": PREVIOUS, "duplicate_token": DUPLICATE, "induction": INDUCTION}


def attends_role(role: str) -> str:
    return f"attends the {role} role"


def role_sets(roles) -> dict[str, tuple[str, ...]]:
    """Role set -> its member roles in index order, from role names NAME_0, NAME_1, ... (a set of
    one member is no region)."""
    sets: dict[str, list] = {}
    for role in roles:
        match = ROLE_MEMBER.fullmatch(role)
        if match:
            sets.setdefault(match["set"], []).append((int(match["index"]), role))
    return {name: tuple(r for _, r in sorted(members)) for name, members in sets.items() if len(members) > 1}


@dataclass(frozen=True)
class Profile:
    """One head's measured masses: role word -> (mean, lower end of its 95% interval)."""

    masses: dict
    floors: dict  # role word -> what uniform attention over the visible keys would put there
    nested: dict = field(default_factory=dict)  # role word -> role words it does not compete with

    def best(self, ratio: float) -> tuple[str, float, float] | None:
        """(role, mass, margin) of the most specific role that passes the rule, else None; margin:
        its lower end over the largest of its rivals' means and uniform attention's mass."""
        passing = []
        for role, (mean, low) in self.masses.items():
            nested = self.nested.get(role, ())
            siblings = {
                m for s in nested for m in self.nested.get(s, ()) if m != role and role in self.nested.get(s, ())
            }
            others = [m for r, (m, _) in self.masses.items() if r != role and r not in nested and r not in siblings]
            strict = max([self.floors.get(role, 0.0), *(self.masses[r][0] for r in siblings)])
            bar = max([strict, *others])
            if low >= ratio * strict and all(low > m for m in others) and (low > 0 or not ratio):
                passing.append((len(nested), -mean, role, low / bar if bar > 0 else math.inf))
        if not passing:
            return None
        _, mean, role, margin = min(passing)  # fewest members first, then the largest mass
        return role, -mean, margin


@dataclass(frozen=True)
class RoleMasses:
    """Each head's mean attention mass on each role's target, measured two ways: `everywhere` over
    every query row (TL's head detectors), `scored` from the scored positions only, and `low`, the
    lower end of each mean's 95% interval (role_masses). role words -> [layer, head]. `groups`:
    group -> (its scored means, their lower ends), for tasks with two groups or more."""

    everywhere: dict
    scored: dict
    ratio: float = RATIO
    low: dict = field(default_factory=dict)  # a role without one: its mean stands in
    groups: dict = field(default_factory=dict)
    floors: dict = field(default_factory=dict)  # role word -> uniform attention's mass there
    sets: dict = field(default_factory=dict)  # role-set word -> its members' words, in order

    def profile(self, head, read_at_scored: bool, scored=None, low=None) -> Profile:
        """The head's masses that compete for its role: the detectors' (no induction at layer 0),
        and the scored positions' for a head read there (`scored`/`low`: one group's)."""
        scored, low = (self.scored, self.low) if scored is None else (scored, {**self.low, **low})
        means = {**self.everywhere, **(scored if read_at_scored else {})}
        if head.layer == 0:
            means.pop(INDUCTION, None)
        at = (head.layer, head.head)
        masses = {r: (float(m[at]), float(low[r][at]) if r in low else float(m[at])) for r, m in means.items()}
        nested: dict = {s: members for s, members in self.sets.items() if s in masses}
        for s, members in self.sets.items():
            for member in members if s in masses else ():
                nested[member] = (*nested.get(member, ()), s)
        return Profile(masses, self.floors, nested)

    def role(self, head, read_at_scored: bool) -> str:
        """The role the rule names (see the module docstring), else UNNAMED; for a head read at the
        scored positions whose role differs between groups, each group's role."""
        if read_at_scored and len(self.groups) > 1:
            each = {g: self.profile(head, True, *masses).best(self.ratio) for g, masses in self.groups.items()}
            if all(each.values()) and len({b[0] for b in each.values() if b}) > 1:
                return group_words({g: b[0] for g, b in each.items() if b})
        found = self.profile(head, read_at_scored).best(self.ratio)
        return found[0] if found else UNNAMED

    def by_group(self, head) -> dict[str, float]:
        """'(group) role word' -> the head's mean mass there from that group's scored rows, for a task
        with groups (what a group-dependent role was read from)."""
        at = (head.layer, head.head)
        return {f"({g}) {r}": float(m[at]) for g, (means, _) in sorted(self.groups.items()) for r, m in means.items()}

    def describe(self, head, read_at_scored: bool) -> str:
        """The role with its numbers, e.g. 'attends the adjective role (0.94, 2.1x its nearest rival)',
        or a role set's profile inside it."""
        profile = self.profile(head, read_at_scored)
        found = profile.best(self.ratio)
        if found is None:
            top = sorted(profile.masses.items(), key=lambda item: -item[1][0])[:2]
            return UNNAMED + " (" + ", ".join(f"{r} {m:.2f}" for r, (m, _) in top) + ")"
        role, mass, margin = found
        inside = region_profile(role, {r: m for r, (m, _) in profile.masses.items()})
        return f"{role} ({mass:.2f}, {margin:.1f}x its nearest rival{'; ' + inside if inside else ''})"


def region_profile(role: str, masses: dict) -> str:
    """For a role set's word ('attends the inside role') with its members' masses among `masses`
    (role word -> mean mass), the profile inside it in slot order and the shape it makes:
    'decaying from inside_0: inside_0 0.46, inside_1 0.26, inside_2 0.14'; '' for any other role."""
    slots = sorted(
        (int(match["index"]), role_name(word), mass)
        for word, mass in masses.items()
        if word.startswith("attends the ")
        and (match := ROLE_MEMBER.fullmatch(role_name(word)))
        and match["set"] == role_name(role)
    )
    if len(slots) < 2:
        return ""
    values = [mass for _, _, mass in slots]
    if all(a > b for a, b in zip(values, values[1:])):
        shape = f"decaying from {slots[0][1]}"
    elif all(a < b for a, b in zip(values, values[1:])):
        shape = f"rising to {slots[-1][1]}"
    else:
        shape = f"largest at {max(slots, key=lambda slot: slot[2])[1]}"
    return f"{shape}: " + ", ".join(f"{name} {mass:.2f}" for _, name, mass in slots)


def role_name(word: str) -> str:
    """'inside_0' of 'attends the inside_0 role' (attends_role's inverse)."""
    return word.removeprefix("attends the ").removesuffix(" role")


def group_words(best: dict) -> str:
    """'attends the adjective role (crosser) / the first_noun role (crossed)': each group's role."""
    parts = [f"{role} ({group})" for group, role in sorted(best.items())]
    return " / ".join([parts[0], *(p.replace("attends ", "", 1) for p in parts[1:])])


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
def role_masses(model: Model, batch, ratio: float = RATIO, attention=None) -> RoleMasses:
    """TL's head-detector patterns over every query row (probes.heads.attention_scores), and at the
    scored positions the current token, each position role the task names and each role set
    (role_rows), overall and per group. A head is named only when the lower end of its mass's 95%
    interval passes the rule: a mean within sampling noise of a rival would otherwise name one
    mechanism's head differently in two seeds. The interval is over examples for the detectors
    (each example's mean over its rows) and over the scored rows for the scored masses (taken as
    independent: a task scored at many positions per example gets an interval narrower than its
    examples support). `attention`: probes.attention.patterns of the batch, when the caller has
    them."""
    import torch

    from probes.heads import attention_spread

    batch = batch.to("cpu")
    if attention is None:
        from probes.attention import patterns

        attention = patterns(model, batch.inputs)
    spread = {DETECTOR_ROLES[name]: value for name, value in attention_spread(model, batch, attention).items()}
    everywhere = {role: mean for role, (mean, _) in spread.items()}
    low = {role: lower_end(mean, each) for role, (mean, each) in spread.items()}
    rows = role_rows(attention, batch)
    scored, lows = mean_and_low(rows, torch.ones(len(batch.positions), dtype=torch.bool, device=batch.positions.device))
    groups = {}
    names = sorted(set(batch.groups))
    if len(names) > 1:
        for group in names:
            keep = torch.tensor(
                [batch.groups[int(i)] == group for i in batch.example_index],
                dtype=torch.bool,
                device=batch.example_index.device,
            )
            groups[group] = mean_and_low(rows, keep)
    sets = {attends_role(s): tuple(attends_role(m) for m in members) for s, members in role_sets(batch.roles).items()}
    return RoleMasses(everywhere, scored, ratio, {**low, **lows}, groups, uniform_floors(batch), sets)


def uniform_floors(batch) -> dict:
    """Role word -> the mass attention spread evenly over each row's visible keys puts on its
    target, measured like the heads' own masses (so a role set's floor counts its members)."""
    import torch

    from probes.heads import attention_spread

    width = batch.inputs.shape[1]
    even = torch.tril(torch.ones(width, width, device=batch.inputs.device))
    even = (even / even.sum(-1, keepdim=True)).expand(len(batch), 1, 1, width, width)
    floors = {DETECTOR_ROLES[name]: float(mean) for name, (mean, _) in attention_spread(None, batch, even).items()}
    means, _ = mean_and_low(
        role_rows(even, batch), torch.ones(len(batch.positions), dtype=torch.bool, device=batch.positions.device)
    )
    return floors | {role: float(mean) for role, mean in means.items()}


def mean_and_low(rows: dict, keep) -> tuple[dict, dict]:
    """(means, lower ends) of each role's `rows` ([k, layer, head], NaN where not measured) over
    the scored rows `keep`; a role measured on none of them is left out."""
    means, lows = {}, {}
    for role, each in rows.items():
        kept = each[keep & ~each[:, 0, 0].isnan()]
        if len(kept):
            means[role] = kept.mean(0)
            lows[role] = lower_end(means[role], kept)
    return means, lows


def role_rows(attention, batch) -> dict:
    """Role word -> [k, layer, head]: the attention from each scored row onto that role's target
    (NaN where it is not measured): the current token, each role the task names, each role set
    (its members' sum). Where a task names a role at some scored rows (induction's `second_A`),
    the named roles are measured from those rows alone (the pattern they name holds there); a role
    at the scored position of every such row is the current token, not a role of its own (float
    noise would break the tie between the two)."""
    import torch

    k = len(batch.positions)
    full = attention[batch.example_index, :, :, batch.positions]  # [k, layer, head, key]
    out = {CURRENT: full[torch.arange(k, device=full.device), :, :, batch.positions]}
    named = {role: where[batch.example_index] for role, where in batch.roles.items()}  # [k] each
    anchors = [key == batch.positions for key in named.values() if bool((key == batch.positions).any())]
    keep = torch.stack(anchors).any(0) if anchors else torch.ones(k, dtype=torch.bool, device=full.device)
    each = {}
    for role, key in named.items():
        seen = keep & (key >= 0) & (key <= batch.positions)
        if bool((key[keep] == batch.positions[keep]).all()) or not bool(seen.any()):
            continue
        mass = torch.zeros(k, *full.shape[1:3], dtype=full.dtype, device=full.device)
        mass[seen] = full[seen].gather(-1, key[seen].view(-1, 1, 1, 1).expand(-1, *full.shape[1:3], 1))[..., 0]
        each[role] = (mass, seen)
    for name, members in role_sets(batch.roles).items():
        present = [each[m] for m in members if m in each]
        if present:
            each[name] = (
                torch.stack([mass for mass, _ in present]).sum(0),
                torch.stack([s for _, s in present]).any(0),
            )
    for role, (mass, seen) in each.items():
        out[attends_role(role)] = torch.where(seen[:, None, None], mass, torch.nan)
    return out


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
