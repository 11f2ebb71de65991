"""The hooks of one patched forward of the exact edge oracle (probes.circuits.oracle): each receiver
input of a patched edge is recomputed from the residual stream it reads in this forward plus, per
patched sender, the sender's write in the other run minus its write in this forward; every other
reader sees the sender as it is. Also the runs' writes these hooks read (`Writes`, `sender_write`)
and the hook names they sit at."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from models.bridge import native
from models.graph import MLP, Embed, Graph, Head, Input, Logits, port_heads
from models import Model
from probes.patching import Outcome


def mlp_out_name(layer: int) -> str:
    return get_act_name("mlp_out", layer)


def resid_mid_name(layer: int) -> str:
    return get_act_name("resid_mid", layer)


FINAL_RESIDUAL, LOGITS_IN = "ln_final.hook_in", "unembed.hook_in"


def parallel_blocks(cfg) -> bool:
    """GPT-NeoX's parallel blocks: the MLP reads the stream entering the block (not the heads' writes)."""
    return bool(getattr(cfg, "parallel_attn_mlp", False))


def mlp_residual_name(cfg, layer: int) -> str:
    """The stream block `layer`'s MLP reads: after its heads, or, in a parallel block, before them."""
    return get_act_name("resid_pre", layer) if parallel_blocks(cfg) else resid_mid_name(layer)


def keeper(store: dict, name: str):
    """A hook that stores the activation passing it in `store[name]`, unchanged."""

    def keep(value, hook):
        store[name] = value

    return keep


def receiver_input(model: Model, layer: int, port: str, residual: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """[n, pos, len(heads), d_head]: block `layer`'s own norm (LayerNorm or RMSNorm) and Q/K/V
    projection of `residual` for `heads` alone, key / value groups for k and v under grouped-query
    attention (a patched receiver needs no other head's rows: projecting every head for one cost
    n_heads times the work). The raw torch modules are called so no hook fires inside a hook."""
    block, d_head = model.blocks[layer], model.cfg.d_head
    linear, normed = native(getattr(block.attn, port)), native(block.ln1)(residual)
    if len(heads) == port_heads(model.cfg, port):
        out = linear(normed)
    else:
        rows = torch.cat([torch.arange(h * d_head, (h + 1) * d_head, device=normed.device) for h in heads])
        bias = None if linear.bias is None else linear.bias[rows]
        out = torch.nn.functional.linear(normed, linear.weight[rows], bias)
    return out.view(*out.shape[:2], len(heads), d_head)


@dataclass(frozen=True)
class Writes:
    """One run: each sender's residual write [n, pos, d_model], the residual entering each block
    (resid_pre[n_layers]: the final residual, before the final norm), and any activations a caller
    asked to observe (hook name -> tensor)."""

    outcome: Outcome
    writes: dict
    resid_pre: dict
    observed: dict


def sender_write(W_O: torch.Tensor, sender, read) -> torch.Tensor:
    """A sender's write from activations `read(name)`; a head's b_O is the block's, not the head's,
    and equal in every run, so a head writes z @ W_O and the bias stays with the residual."""
    if isinstance(sender, Embed):
        return read(get_act_name("resid_pre", 0))
    if isinstance(sender, Head):
        return read(get_act_name("z", sender.layer))[:, :, sender.head] @ W_O[sender.layer, sender.head]
    return read(mlp_out_name(sender.layer))


class EdgeHooks:
    """Hooks for one forward over replicas of the base batch resumed at block `start`; replica i
    patches the edges of sets[i]."""

    def __init__(
        self, model: Model, sets: list[frozenset], base: Writes, other: Writes, n: int, start: int, scored=None
    ):
        self.model, self.sets, self.base, self.other, self.n, self.start = model, sets, base, other, n, start
        # (examples, positions) when the forward runs its last block's MLP and the unembedding at the
        # scored positions alone (models.resume's `at`): their inputs are patched there, [replicas, k].
        self.scored = scored
        self.by_receiver = {}
        for replica, edges in enumerate(sets):
            for edge in edges:
                self.by_receiver.setdefault(edge.receiver, []).append((replica, edge))
        self.seen, self.writes, self.W_O = {}, {}, model.W_O
        self.scored_writes: dict = {}
        self.changes: dict = {}  # (sender, replicas, scored) -> its change (`change`)

    def actual(self, sender) -> torch.Tensor:
        """The sender's write in this forward, [replicas, n, pos, d] ([1, ...] below `start`)."""
        if sender not in self.writes:
            if not isinstance(sender, Embed) and sender.layer >= self.start:
                write = sender_write(self.W_O, sender, self.seen.__getitem__)
                self.writes[sender] = write.view(len(self.sets), self.n, *write.shape[1:])
            else:
                self.writes[sender] = self.base.writes[sender][None]
        return self.writes[sender]

    def at_scored(self, sender, other: bool) -> torch.Tensor:
        """The sender's write at the scored positions, [1, k, d] from the other run, [replicas or 1, k,
        d] in this forward; the last block's MLP ran there alone, so its write is read as it is."""
        key = (sender, other)
        if key not in self.scored_writes:
            examples, positions = self.scored
            last = self.model.cfg.n_layers - 1
            if not other and isinstance(sender, MLP) and sender.layer == last:
                write = self.seen[mlp_out_name(last)]  # [replicas * k, 1, d]
                self.scored_writes[key] = write.view(len(self.sets), len(examples), write.shape[-1])
            else:
                write = self.other.writes[sender][None] if other else self.actual(sender)
                self.scored_writes[key] = write[:, examples, positions]
        return self.scored_writes[key]

    def patches(self, receiver: Input):
        """What this input receives, canonically ordered (None: nothing): per sender, by name, the
        replicas patching it and their positions (None: every position). Inputs with equal patches
        get equal deltas."""
        pending = self.by_receiver.get(receiver)
        if not pending:
            return None
        where = {}
        for replica, edge in pending:
            patched = where.setdefault(edge.sender, {})
            whole = edge.position is None or (replica in patched and patched[replica] is None)
            patched[replica] = None if whole else tuple(sorted((*patched.get(replica, ()), edge.position)))
        return tuple((sender, tuple(sorted(where[sender].items()))) for sender in sorted(where, key=str))

    def change(self, sender, replicas: tuple[int, ...], scored: bool) -> torch.Tensor:
        """The other run's write minus this forward's in `replicas`, once per forward: a sender
        reaches many receiver inputs."""
        key = (sender, replicas, scored)
        if key not in self.changes:
            actual = self.at_scored(sender, False) if scored else self.actual(sender)
            other = self.at_scored(sender, True)[0] if scored else self.other.writes[sender]
            self.changes[key] = other - (actual[list(replicas)] if len(actual) > 1 else actual)
        return self.changes[key]

    def delta(self, patches, scored: bool = False):
        """(replicas these patches touch, [those, n, pos, d] added to the input's residual): one
        change per sender and replica patching it, masked to the positions patched, so an edge
        resolved by position costs no more than a whole one. `scored`: at the scored positions
        alone, [those, k, 1, d]."""
        rows = sorted({replica for _, patched in patches for replica, _ in patched})
        row_of = {replica: i for i, replica in enumerate(rows)}
        like = self.other.writes[patches[0][0]]
        if scored:
            like = like[self.scored]  # [k, d]
        out = torch.zeros(len(rows), *like.shape, device=like.device)
        for sender, patched in patches:
            replicas = [replica for replica, _ in patched]
            change = self.change(sender, tuple(replicas), scored)
            if any(positions is not None for _, positions in patched):
                mask = torch.zeros(len(replicas), self.other.writes[sender].shape[1], device=like.device)
                for i, (_, positions) in enumerate(patched):
                    mask[i, slice(None) if positions is None else list(positions)] = 1.0
                if scored:
                    change = mask[:, self.scored[1], None] * change
                else:
                    change = mask[:, None, :, None] * change
            if replicas == rows:  # every row: the same float adds as index_add_, without its index
                out += change
            else:
                index = torch.tensor([row_of[r] for r in replicas], device=like.device)
                out.index_add_(0, index, change.expand(len(replicas), *like.shape))
        return torch.tensor(rows, device=like.device), out[:, :, None] if scored else out

    def residual(self, name: str, rows: torch.Tensor) -> torch.Tensor:
        """The stream at `name` in the replicas `rows` (sorted, distinct: all of them are every row)."""
        value = self.seen[name]
        value = value.view(len(self.sets), -1, *value.shape[1:])
        return value if len(rows) == len(self.sets) else value[rows]

    def head_input(self, layer: int, port: str, heads: list[Head]):
        def hook(act, hook):
            by_patches: dict = {}  # patches -> the heads receiving them (equal patches, equal inputs)
            for head in heads:
                patches = self.patches(Input(head, port))
                if patches is not None:
                    by_patches.setdefault(patches, []).append(head.head)
            if not by_patches:
                return act
            act = act.clone()
            view = act.view(len(self.sets), self.n, *act.shape[1:])
            for patches, indices in by_patches.items():
                rows, delta = self.delta(patches)
                residual = self.residual(get_act_name("resid_pre", layer), rows) + delta
                value = receiver_input(self.model, layer, port, residual.flatten(0, 1), indices)
                view[rows[:, None], :, :, indices] = value.view(len(rows), *view.shape[1:3], len(indices), -1).movedim(
                    3, 1
                )
            return act

        return hook

    def single_input(self, receiver: Input, residual_name: str, norm, scored: bool = False):
        """A hook patching an MLP's or the logits' input; `scored`: it fires at the scored positions alone."""

        def hook(act, hook):
            patches = self.patches(receiver)
            if patches is None:
                return act
            rows, delta = self.delta(patches, scored=True) if scored else self.delta(patches)
            act = act.clone()
            view = act.view(len(self.sets), -1, *act.shape[1:])
            view[rows] = norm(self.residual(residual_name, rows) + delta)
            return act

        return hook

    def hooks(self, graph: Graph) -> list:
        model, out = self.model, []
        layers = range(self.start, graph.n_layers)
        for l in layers:
            out.append((get_act_name("resid_pre", l), keeper(self.seen, get_act_name("resid_pre", l))))
            out.append((get_act_name("z", l), keeper(self.seen, get_act_name("z", l))))
        for sender in graph.senders:
            if isinstance(sender, MLP) and sender.layer >= self.start:
                if not parallel_blocks(model.cfg):  # a parallel block's MLP reads resid_pre, kept above
                    out.append((resid_mid_name(sender.layer), keeper(self.seen, resid_mid_name(sender.layer))))
                out.append((mlp_out_name(sender.layer), keeper(self.seen, mlp_out_name(sender.layer))))
        out.append((FINAL_RESIDUAL, keeper(self.seen, FINAL_RESIDUAL)))
        for receiver in graph.inputs:
            node = receiver.node
            if isinstance(node, Head) and node.layer >= self.start and node.head == 0:
                heads = [Head(node.layer, h) for h in range(port_heads(model.cfg, receiver.port))]
                out.append((get_act_name(receiver.port, node.layer), self.head_input(node.layer, receiver.port, heads)))
            elif isinstance(node, MLP) and node.layer >= self.start:
                norm = native(model.blocks[node.layer].ln2)
                scored = self.scored is not None and node.layer == graph.n_layers - 1
                # The MLP's own input hook (after ln2); get_act_name's hook_mlp_in fires only behind a flag.
                out.append(
                    (
                        f"blocks.{node.layer}.mlp.hook_in",
                        self.single_input(receiver, mlp_residual_name(model.cfg, node.layer), norm, scored),
                    )
                )
            elif isinstance(node, Logits):
                final = native(model.ln_final)
                out.append((LOGITS_IN, self.single_input(receiver, FINAL_RESIDUAL, final, self.scored is not None)))
        return out
