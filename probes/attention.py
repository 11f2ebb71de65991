"""Attention at the scored positions: per block and head, averaged per group, and for one example
next to its counterfactual partner.

Which key a row attends to is summarised three ways that mean something for any task: the mean
row over absolute key positions (labelled by the token there when it is the same in every example),
the mass on keys holding the answer or the foil token, and the mean mass by offset (query - key).
Patterns are computed on the model's device and summarised on the CPU, where results live.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from common.stages import timed
from models.bridge import device_of
from models import Model
from tasks.data import Batch

ALL = "all"


@torch.no_grad()
@timed("attention patterns")
def patterns(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    """[n, layer, head, query, key] attention patterns, on the CPU."""
    names = [get_act_name("pattern", layer) for layer in range(model.cfg.n_layers)]
    _, cache = model.run_with_cache(tokens.to(device_of(model)), names_filter=names)
    return torch.stack([cache[name] for name in names], dim=1).cpu()


def quoted(word: str) -> str:
    """A token as prose shows it: quoted unless it is a plain word, so a token ';' or ',' never reads
    as the sentence's own punctuation."""
    return word if word.isalnum() else repr(word)


def position_labels(tokens: torch.Tensor, vocabulary: list[str] | None, places: dict | None = None) -> list[str]:
    """'p3 so' where every example has the same token at p3, else 'p3 (dog, cat, ...)'; a token that
    is not a plain word is quoted ("p11 ';'"). `places` (role_places, for a layout that moves): a
    position one role holds in every example is named by that role ('query ?'), not its number."""
    labels = []
    for position in range(tokens.shape[1]):
        column = Counter(tokens[:, position].tolist())
        words = [quoted(vocabulary[t]) if vocabulary else str(t) for t, _ in column.most_common(2)]
        name = (places or {}).get(position, f"p{position}")
        labels.append(f"{name} {words[0]}" if len(column) == 1 else f"{name} ({words[0]}, {words[1]}, ...)")
    return labels


@dataclass(frozen=True)
class HeadFocus:
    """Where one head's scored-position rows put most weight, for one group."""

    position: int
    label: str
    weight: float
    on_answer: float  # mean mass on keys holding the answer token
    on_foil: float  # mean mass on keys holding the foil token (nan without foils)
    top_offset: int  # the offset (query - key) with most mean mass


@dataclass(frozen=True)
class ScoredAttention:
    labels: list[str]  # per key position
    mean: dict[str, torch.Tensor]  # group (and "all") -> [layer, head, key]
    by_offset: dict[str, torch.Tensor]  # group -> [layer, head, offset]
    focus: dict[str, list[list[HeadFocus]]]  # group -> [layer][head]
    rows: dict[str, int]  # scored rows per group
    by_role: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # role -> [layer, head] mass
    # on the key at that role's position (all rows; role_attention)


SCORED = "scored position"  # the query "role" of the scored rows themselves


def role_attention(attention: torch.Tensor, batch: Batch, query_role: str | None = None) -> dict[str, torch.Tensor]:
    """key role -> [layer, head] mean attention mass from each query row to the key at the example's
    role position, over the rows whose example names that role at or before the query. The query
    rows: the scored positions (`query_role` None) or each example's `query_role` position.
    `attention`: [n, layer, head, query, key] patterns (patterns)."""
    return {role: rows.mean(0) for role, rows in role_attention_rows(attention, batch, query_role).items()}


def role_attention_rows(
    attention: torch.Tensor, batch: Batch, query_role: str | None = None
) -> dict[str, torch.Tensor]:
    """role_attention before its mean: key role -> [rows, layer, head], one row per query row counted."""
    if query_role is None:
        examples, queries = batch.example_index, batch.positions
    else:
        where = batch.roles[query_role]
        examples = (where >= 0).nonzero()[:, 0]
        queries = where[examples]
    rows = attention[examples, :, :, queries]  # [k, layer, head, key]
    out = {}
    for role, where in sorted(batch.roles.items()):
        key = where[examples]  # [k]
        seen = (key >= 0) & (key <= queries)
        if bool(seen.any()):
            index = key[seen].view(-1, 1, 1, 1).expand(-1, *rows.shape[1:3], 1)
            out[role] = rows[seen].gather(-1, index)[..., 0]
    return out


def token_mass(rows: torch.Tensor, keys: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[layer, head] mean mass on keys whose token equals each row's target token."""
    hit = (keys == targets[:, None]).float()  # [k, key]
    return (rows * hit[:, None, None, :]).sum(-1).mean(0)


def offsets(rows: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """[layer, head, offset] mean mass at query - key = offset."""
    k, n_layers, n_heads, width = rows.shape
    offset = queries[:, None] - torch.arange(width, device=rows.device)[None, :]  # [k, key]
    keep = offset >= 0
    out = torch.zeros(n_layers, n_heads, width, device=rows.device)
    out.index_add_(2, offset[keep], rows.permute(1, 2, 0, 3)[:, :, keep])
    return out / max(k, 1)


@timed("scored attention")
def scored_attention(
    model: Model, batch: Batch, vocabulary: list[str] | None = None, attention: torch.Tensor | None = None
) -> ScoredAttention:
    """`attention`: patterns(model, batch.inputs), when the caller has them."""
    batch = batch.to("cpu")
    attention = patterns(model, batch.inputs) if attention is None else attention
    rows = attention[batch.example_index, :, :, batch.positions]  # [k, layer, head, key]
    keys = batch.inputs[batch.example_index]  # [k, key]
    row_groups = [batch.groups[i] for i in batch.example_index.tolist()]
    labels = position_labels(batch.inputs, vocabulary)
    mean, by_offset, focus, counts = {}, {}, {}, {}
    for group in [ALL] + sorted(set(row_groups)):
        mask = torch.tensor([group in (ALL, g) for g in row_groups], device="cpu")
        group_rows, group_keys = rows[mask], keys[mask]
        mean[group] = group_rows.mean(0)
        by_offset[group] = offsets(group_rows, batch.positions[mask])
        on_answer = token_mass(group_rows, group_keys, batch.answers[mask])
        on_foil = token_mass(group_rows, group_keys, batch.foils[mask])
        counts[group] = int(mask.sum())
        focus[group] = [
            [
                HeadFocus(
                    position=int(mean[group][layer, head].argmax()),
                    label=labels[int(mean[group][layer, head].argmax())],
                    weight=float(mean[group][layer, head].max()),
                    on_answer=float(on_answer[layer, head]),
                    on_foil=float(on_foil[layer, head]) if bool((batch.foils[mask] >= 0).all()) else float("nan"),
                    top_offset=int(by_offset[group][layer, head].argmax()),
                )
                for head in range(rows.shape[2])
            ]
            for layer in range(rows.shape[1])
        ]
    return ScoredAttention(labels, mean, by_offset, focus, counts, role_attention(attention, batch))


@dataclass(frozen=True)
class PairAttention:
    """One example and its counterfactual: attention rows at the example's first scored position."""

    example: int
    position: int
    clean_tokens: list[str]
    corrupt_tokens: list[str]
    clean: torch.Tensor  # [layer, head, key]
    corrupt: torch.Tensor


@timed("pair attention")
def pair_attention(model: Model, batch: Batch, example: int = 0, vocabulary: list[str] | None = None) -> PairAttention:
    from probes.patching import corrupt_inputs

    batch = batch.to("cpu")
    position = int(batch.positions[batch.example_index == example][0])
    length = int(batch.lengths[example]) - 1
    clean_in = batch.inputs[example : example + 1, :length]
    corrupt_in = corrupt_inputs(batch)[example : example + 1, :length]
    words = lambda ts: [vocabulary[t] if vocabulary else str(t) for t in ts.tolist()]  # noqa: E731
    return PairAttention(
        example=example,
        position=position,
        clean_tokens=words(clean_in[0]),
        corrupt_tokens=words(corrupt_in[0]),
        clean=patterns(model, clean_in)[0, :, :, position],
        corrupt=patterns(model, corrupt_in)[0, :, :, position],
    )


@timed("attention rows")
def attention_from(model: Model, batch: Batch, position: int) -> dict[str, torch.Tensor]:
    """Group (and "all") -> [layer, head, key] mean attention row of query `position`, over the
    examples long enough to have it: what a head does at a position that is not scored."""
    batch = batch.to("cpu")
    attention = patterns(model, batch.inputs)[:, :, :, position]  # [n, layer, head, key]
    present = batch.lengths - 1 > position
    out = {}
    for group in [ALL] + sorted(set(batch.groups)):
        mask = present & torch.tensor([group in (ALL, g) for g in batch.groups], device="cpu")
        if mask.any():
            out[group] = attention[mask].mean(0)
    return out


@dataclass(frozen=True)
class ExampleAttention:
    """One example's attention, for reading a task whose layout varies: every head's row at each
    scored position, over the example's own tokens, with the roles the task names there."""

    example: int
    tokens: list[str]  # the input tokens (what the model reads)
    roles: dict[int, str]  # position -> role name(s), '+'-joined where several share one
    positions: list[int]  # the scored positions
    rows: torch.Tensor  # [scored, layer, head, key]


def example_attention(
    model: Model, batch: Batch, example: int = 0, vocabulary: list[str] | None = None
) -> ExampleAttention:
    """Attention rows of one example (index into `batch`) at its scored positions."""
    batch = batch.to("cpu")
    length = int(batch.lengths[example]) - 1
    inputs = batch.inputs[example : example + 1, :length]
    positions = batch.positions[batch.example_index == example].tolist()
    roles: dict[int, list[str]] = {}
    for role, where in sorted(batch.roles.items()):
        if int(where[example]) >= 0:
            roles.setdefault(int(where[example]), []).append(role)
    words = [vocabulary[t] if vocabulary else str(t) for t in inputs[0].tolist()]
    rows = patterns(model, inputs)[0][:, :, positions].permute(2, 0, 1, 3)
    return ExampleAttention(example, words, {p: "+".join(r) for p, r in roles.items()}, positions, rows)


# Positions by role -------------------------------------------------------------------------------
# Positions by role: where a task's layout varies per example, a plugin names positions by what they
# hold (tasks.base.Example.roles, e.g. {"binder_end": 7}), and attention and patching are summarised
# per role instead of per absolute position. An absolute position then mixes examples whose binder
# sits there with examples whose binder is elsewhere; a role is the same thing in every example.
#
# Per role: the attention mass each head's scored-position rows put on the key at that role's
# position, and the share of the clean - counterfactual gap restored by patching each head's output
# at that role's position in every pair (probes.patching, one position per example).


def role_places(batch: Batch) -> dict[int, str] | None:
    """None where the layout is fixed, as the task's data show it: every role the task names sits at
    one position in every example (or it names none), so an absolute position names the same role
    in each. Else position -> the role every example holds there (a scored query at one place, say):
    the positions a report may still name by a role; any other position holds different roles in
    different examples, so its number names nothing the examples share."""
    where = {role: set(position.tolist()) for role, position in batch.roles.items()}
    if all(len(positions) == 1 for positions in where.values()):
        return None
    return {
        next(iter(positions)): role
        for role, positions in sorted(where.items())
        if len(positions) == 1 and -1 not in positions
    }


@dataclass(frozen=True)
class RoleView:
    roles: tuple[str, ...]  # the task's role names, sorted
    rows: int  # examples the attention is averaged over
    attention: dict[str, dict[str, torch.Tensor]]  # query role (or SCORED) -> key role -> [layer, head]
    # mean mass from that query to the key at the role's position
    pairs: int  # counterfactual pairs the patching is measured on
    recovered: dict[str, torch.Tensor]  # role -> [layer, head] share of the gap, head output patched there


def role_patching(model: Model, pairs: Batch, patching) -> dict[str, torch.Tensor]:
    """role -> [layer, head] share of the gap restored by each head's clean output at that role's
    position of every pair (`patching`: the run's probes.patching.ActivationPatching on these
    pairs, for its scale and its per-position grid)."""
    from probes.patching import patch_many

    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    out = {}
    for role, where in sorted(pairs.roles.items()):
        if bool((where < 0).any()):  # a role some pairs lack has no position to patch there
            continue
        if bool((where == where[0]).all()):
            # The role sits at one position p in every pair: patching there is the patch activation
            # patching made at p (head_out[:, p], the same forwards up to float rounding), not redone.
            out[role] = patching.recovered(patching.head_out[:, int(where[0])])
            continue
        targets = [(layer, where, head) for layer in range(n_layers) for head in range(n_heads)]
        metric = torch.tensor([o.metric for o in patch_many(model, pairs, "z", targets)], device="cpu")
        out[role] = patching.recovered(metric.view(n_layers, n_heads))
    return out


@timed("role view")
def role_view(
    model: Model, sample: Batch, pairs: Batch, patching, attention: torch.Tensor | None = None
) -> RoleView | None:
    """Attention (on `sample`'s scored rows) and patching (on `pairs`) by role; None for a task
    that names no roles. `attention`: patterns(model, sample.inputs), when the caller has them."""
    if not sample.roles:
        return None
    sample = sample.to("cpu")
    attention = patterns(model, sample.inputs) if attention is None else attention
    by_query = {SCORED: role_attention(attention, sample)}
    by_query.update({role: role_attention(attention, sample, role) for role in sorted(sample.roles)})
    return RoleView(
        tuple(sorted(sample.roles)),
        len(sample),
        by_query,
        len(pairs),
        role_patching(model, pairs, patching) if pairs.counterfactual is not None and patching else {},
    )
