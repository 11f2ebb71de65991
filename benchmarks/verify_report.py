"""Recompute a report's numbers with code of its own, as the outside verifier does.

    .venv/bin/python benchmarks/verify_report.py RUNS_DIR [--sweep SWEEP_DIR] [--joint] [--tolerance T]

RUNS_DIR holds trained runs and report/ (python -m tasks.winograd train --report), optionally
exports/ (toylens export mib|attribution RUNS_DIR). Every measurement here is written
from the definitions in the docs, on a plain-torch forward of the stored weights (read with
safetensors, not toylens's model classes), and never calls toylens's probes: the run's data (task
splits, evenly spread subsets) and the settings report.json records are all it takes from toylens,
since they decide which examples a number was measured on, not what was measured. The forward is
first checked against the TransformerLens bridge's logits. With --joint, toylens's joint search is
run to have a joint.at_target to check (its result is checked by this file's measurements).

Each check prints PASS/FAIL, how many numbers it compared and the largest difference, in metric
units (a share of a gap times that gap); exit 1 on any FAIL, 2 when a needed file is missing.
What each check recomputes: docs/verify-report.md. In short: the basis counts; head circuits,
knock-outs and the search trace on both scales (recovered: (m - m_cf) / (m_clean - m_cf);
normalised: (m - m_empty) / (m_clean - m_empty), the empty circuit mean-ablating every head) and
the head-ablation table; edge and positional circuits, shares alone, redundancy and its verdict,
the head and edge views, CPR / CMD and report.html's curve; joint.at_target; MIB and attribution
exports; report.md's sentences against report.json; the census over training (--sweep).
"""

from __future__ import annotations

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

NO_FOIL = -1
EDGE = re.compile(r"^(\S+) -> (\S+?)(?: @p(\d+))?$")


# ---- the model, by hand --------------------------------------------------------------------------


@dataclass(frozen=True)
class Weights:
    tensors: dict
    n_layers: int
    n_heads: int
    d_head: int
    mlp: bool
    norm: bool

    @classmethod
    def load(cls, file: Path, spec: dict) -> "Weights":
        got = (spec["attention"], spec["norm_place"], spec["positions"], spec["residual"], spec["scale_scores"])
        if got != ("softmax", "pre", "learned", True, True) or spec["norm"] not in ("LN", None):
            raise ValueError(
                f"verify_report's forward covers softmax GPTs with learned positions and pre-LN or "
                f"no norm, not {(*got, spec['norm'])}"
            )
        return cls(
            load_file(str(file)),
            spec["n_layers"],
            spec["n_heads"],
            spec["d_model"] // spec["n_heads"],
            spec["mlp"],
            spec["norm"] == "LN",
        )

    def __getitem__(self, name: str) -> torch.Tensor | None:
        """A tensor by its checkpoint name; None only for the norms of a model without them."""
        if not self.norm and re.search(r"ln\w*\.(weight|bias)$", name):
            return None
        return self.tensors[name]

    def heads(self) -> list[str]:
        return [f"L{l}H{h}" for l in range(self.n_layers) for h in range(self.n_heads)]

    def senders(self) -> list[str]:
        out = ["embed"]
        for l in range(self.n_layers):
            out += [f"L{l}H{h}" for h in range(self.n_heads)] + ([f"MLP{l}"] if self.mlp else [])
        return out


def layer_norm(x, w, b):
    """TransformerLens's LayerNorm (eps 1e-5); a model without norms has no weights for it."""
    return x if w is None else F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def stage(node: str) -> int:
    """The order of writes and reads along the residual stream (a sender reaches later stages)."""
    if node == "embed":
        return 0
    if node == "logits":
        return 10**6
    layer = int(re.match(r"(?:L|MLP)(\d+)", node).group(1))
    return 2 * layer + (1 if node.startswith("L") else 2)


def all_edges(W: Weights) -> list[tuple[str, str]]:
    """(sender, receiver input) of every edge: receiver inputs 'L1H0.q', 'MLP0', 'logits'."""
    inputs = []
    for l in range(W.n_layers):
        inputs += [f"L{l}H{h}.{p}" for h in range(W.n_heads) for p in "qkv"] + ([f"MLP{l}"] if W.mlp else [])
    inputs.append("logits")
    return [(s, r) for r in inputs for s in W.senders() if stage(s) < stage(r.split(".")[0])]


def forward(
    W: Weights,
    tokens: torch.Tensor,
    other: dict | None = None,
    patched: dict | None = None,
    z_override: dict | None = None,
):
    """Logits [n, T, vocab] and every sender's write in this forward.

    patched: receiver input -> {sender: [T] mask of positions}: there the receiver reads
    `other[sender]` instead of the sender's write in this forward (an edge given another run's
    write). z_override: head -> ([n, T, d_head] values, [T] mask): the head's z replaced there."""
    patched, z_override = patched or {}, z_override or {}
    n, T = tokens.shape
    writes = {"embed": W["embed.weight"][tokens] + W["pos_embed.weight"][:T][None]}
    resid = writes["embed"]

    def read(receiver, residual):
        for sender, mask in patched.get(receiver, {}).items():
            residual = residual + mask[None, :, None] * (other[sender] - writes[sender])
        return residual

    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(W.n_layers):
        p = f"blocks.{l}."
        attn_out = W[p + "attn.o.bias"].expand(n, T, -1)
        for h in range(W.n_heads):
            name, rows = f"L{l}H{h}", slice(h * W.d_head, (h + 1) * W.d_head)
            qkv = {}
            for port in "qkv":
                x = layer_norm(read(f"{name}.{port}", resid), W[p + "ln1.weight"], W[p + "ln1.bias"])
                qkv[port] = x @ W[p + f"attn.{port}.weight"][rows].T + W[p + f"attn.{port}.bias"][rows]
            scores = qkv["q"] @ qkv["k"].transpose(-1, -2) / math.sqrt(W.d_head)
            pattern = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            z = pattern @ qkv["v"]
            if name in z_override:
                values, mask = z_override[name]
                z = torch.where(mask[None, :, None], values, z)
            writes[name] = z @ W[p + "attn.o.weight"][:, rows].T
            attn_out = attn_out + writes[name]
        resid = resid + attn_out
        if W.mlp:
            x = layer_norm(read(f"MLP{l}", resid), W[p + "ln2.weight"], W[p + "ln2.bias"])
            writes[f"MLP{l}"] = (
                F.gelu(x @ W[p + "mlp.in.weight"].T + W[p + "mlp.in.bias"]) @ W[p + "mlp.out.weight"].T
                + W[p + "mlp.out.bias"]
            )
            resid = resid + writes[f"MLP{l}"]
    x = layer_norm(read("logits", resid), W["ln_final.weight"], W["ln_final.bias"])
    return x @ W["unembed.weight"].T + W["unembed.bias"], writes


def zs(W: Weights, tokens: torch.Tensor) -> dict:
    """Every head's z [n, T, d_head] on a clean forward (recovered from its write: W_O is invertible
    on its rows only when d_head <= d_model, so z is recomputed from q, k, v instead)."""
    out = {}
    n, T = tokens.shape
    resid = W["embed.weight"][tokens] + W["pos_embed.weight"][:T][None]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(W.n_layers):
        p = f"blocks.{l}."
        x = layer_norm(resid, W[p + "ln1.weight"], W[p + "ln1.bias"])
        attn_out = W[p + "attn.o.bias"].expand(n, T, -1)
        for h in range(W.n_heads):
            rows = slice(h * W.d_head, (h + 1) * W.d_head)
            q, k, v = (x @ W[p + f"attn.{c}.weight"][rows].T + W[p + f"attn.{c}.bias"][rows] for c in "qkv")
            pattern = (q @ k.transpose(-1, -2) / math.sqrt(W.d_head)).masked_fill(~causal, float("-inf")).softmax(-1)
            out[f"L{l}H{h}"] = pattern @ v
            attn_out = attn_out + out[f"L{l}H{h}"] @ W[p + "attn.o.weight"][:, rows].T
        resid = resid + attn_out
        if W.mlp:
            x = layer_norm(resid, W[p + "ln2.weight"], W[p + "ln2.bias"])
            resid = (
                resid
                + F.gelu(x @ W[p + "mlp.in.weight"].T + W[p + "mlp.in.bias"]) @ W[p + "mlp.out.weight"].T
                + W[p + "mlp.out.bias"]
            )
    return out


# ---- the metric ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pairs:
    clean: torch.Tensor  # [n, T] inputs
    corrupt: torch.Tensor  # [n, T] counterfactual inputs
    rows: torch.Tensor  # [k] example of each scored position
    positions: torch.Tensor  # [k]
    answers: torch.Tensor
    foils: torch.Tensor
    lengths: torch.Tensor  # [n] token counts (inputs are tokens[:-1])

    @classmethod
    def of(cls, batch) -> "Pairs":
        return cls(
            batch.tokens[:, :-1],
            batch.counterfactual[:, :-1],
            batch.example_index,
            batch.positions,
            batch.answers,
            batch.foils,
            batch.lengths,
        )

    def select(self, row: int, position: int) -> "Pairs":
        """One prompt: example `row` scored at `position` only."""
        keep = (self.rows == row) & (self.positions == position)
        return Pairs(
            self.clean[row : row + 1],
            self.corrupt[row : row + 1],
            torch.zeros(int(keep.sum()), dtype=torch.long),
            self.positions[keep],
            self.answers[keep],
            self.foils[keep],
            self.lengths[row : row + 1],
        )


def metric(logits: torch.Tensor, pairs: Pairs) -> tuple[float, float]:
    """(mean metric, share restored) at the scored positions: answer - foil logit where a foil is
    given, else the answer's log-probability; restored: metric > 0 (with a foil) or top-1."""
    scored = logits[pairs.rows, pairs.positions]
    answer = scored.gather(1, pairs.answers[:, None])[:, 0]
    foil = scored.gather(1, pairs.foils.clamp(min=0)[:, None])[:, 0]
    has_foil = pairs.foils != NO_FOIL
    value = torch.where(has_foil, answer - foil, answer - scored.logsumexp(-1))
    right = torch.where(has_foil, value > 0, scored.argmax(-1) == pairs.answers)
    return float(value.double().mean()), float(right.double().mean())


# ---- edges and their patches ---------------------------------------------------------------------


def parse_edge(name: str) -> tuple[str, str, int | None]:
    match = EDGE.match(name)
    if match is None:
        raise ValueError(f"not an edge name: {name!r}")
    sender, receiver, position = match.groups()
    return sender, receiver, None if position is None else int(position)


def complement(W: Weights, kept: list[tuple[str, str, int | None]], T: int) -> dict:
    """Patches giving every write not in `kept` its other value: every edge at every position but
    the kept (edge, position)s."""
    patched = {}
    for sender, receiver in all_edges(W):
        mask = torch.ones(T)
        for s, r, p in kept:
            if (s, r) == (sender, receiver):
                mask[slice(None) if p is None else p] = 0.0
        if mask.any():
            patched.setdefault(receiver, {})[sender] = mask
    return patched


def only(edges: list[tuple[str, str, int | None]], T: int) -> dict:
    patched = {}
    for sender, receiver, position in edges:
        mask = patched.setdefault(receiver, {}).setdefault(sender, torch.zeros(T))
        mask[slice(None) if position is None else position] = 1.0
    return patched


class EdgeRuns:
    """A clean and a counterfactual run of the pairs; patched forwards start from the clean input."""

    def __init__(self, W: Weights, pairs: Pairs):
        self.W, self.pairs, self.T = W, pairs, pairs.clean.shape[1]
        logits, self.clean_writes = forward(W, pairs.clean)
        self.clean = metric(logits, pairs)[0]
        logits, self.corrupt_writes = forward(W, pairs.corrupt)
        self.corrupt = metric(logits, pairs)[0]

    @property
    def gap(self) -> float:
        return self.clean - self.corrupt

    def metric(self, patched: dict) -> float:
        return metric(forward(self.W, self.pairs.clean, self.corrupt_writes, patched)[0], self.pairs)[0]

    def kept(self, edges) -> float:
        """Faithfulness of a circuit: 0 = counterfactual run, 1 = clean run."""
        return (self.metric(complement(self.W, edges, self.T)) - self.corrupt) / self.gap

    def alone(self, edges) -> float:
        """Share of the gap lost when these edges alone get their counterfactual write."""
        return (self.clean - self.metric(only(edges, self.T))) / self.gap

    def every_alone(self) -> dict:
        """(sender, receiver) -> its share alone, for every edge of the graph (measured once)."""
        if not hasattr(self, "_alone"):
            self._alone = {edge: self.alone([(*edge, None)]) for edge in all_edges(self.W)}
        return self._alone

    def denoise(self, edges) -> float:
        """Share of the gap recovered when these edges alone get the clean write in the counterfactual
        run (path patching)."""
        logits = forward(self.W, self.pairs.corrupt, self.clean_writes, only(edges, self.T))[0]
        return (metric(logits, self.pairs)[0] - self.corrupt) / self.gap


# ---- the head view: node ablation by position means ----------------------------------------------


def position_means(W: Weights, reference, width: int) -> dict:
    """head -> [width, d_head]: its z at each position averaged over the reference rows real there
    (the mean over every real position where no row reaches)."""
    inputs = reference.tokens[:, :-1]
    real = (torch.arange(inputs.shape[1])[None] < (reference.lengths[:, None] - 1)).float()[:, :, None]
    out = {}
    for head, z in zs(W, inputs).items():
        total, count = (z * real).sum(0), real.sum(0)
        overall = total.sum(0) / count.sum()
        means = torch.where(count > 0, total / count.clamp(min=1), overall)
        if means.shape[0] < width:
            means = torch.cat([means, overall.expand(width - means.shape[0], -1)])
        out[head] = means[:width]
    return out


def head_metric(W: Weights, pairs: Pairs, means: dict, kept: dict) -> tuple[float, float]:
    """Metric and restored share with every head outside `kept` (head -> positions | None) at its
    position mean (a pinned head at its other positions)."""
    T = pairs.clean.shape[1]
    override = {}
    for head in W.heads():
        mask = torch.ones(T, dtype=torch.bool)
        if head in kept:
            if kept[head] is None:
                continue
            mask[list(kept[head])] = False
        override[head] = (means[head][None].expand(len(pairs.clean), -1, -1), mask)
    return metric(forward(W, pairs.clean, z_override=override)[0], pairs)


def head_circuits(W: Weights, circuit: dict) -> list[tuple[str, dict, dict]]:
    """(what, kept, stored Faithfulness) of a run's head circuit: the circuit, its heads at every
    position, each knock-out (the full model minus one head) and each step of the search's trace.
    A result naming its heads ('nodes') is read as named; otherwise from the circuit's 'kept'."""
    kept = {head: None if where is None else tuple(where) for head, where in circuit_kept(circuit).items()}
    out = [("circuit", kept, circuit["faithfulness"])]
    if circuit.get("head_faithfulness"):
        out.append(("its heads at every position", dict.fromkeys(kept), circuit["head_faithfulness"]))
    for head, result in (circuit.get("knockout") or {}).items():
        out.append((f"knockout {head}", dict.fromkeys(h for h in W.heads() if h != head), result))
    out = [(what, parse_kept(result["nodes"]) if "nodes" in result else heads, result) for what, heads, result in out]
    for heads, recovered, normalised in circuit.get("trace") or []:
        out.append(
            (f"trace {'+'.join(heads)}", dict.fromkeys(heads), {"recovered": recovered, "normalised": normalised})
        )
    return out


def circuit_kept(circuit: dict) -> dict:
    """A stored head circuit's heads -> kept positions: its 'kept', else parsed from its faithfulness's nodes."""
    return circuit["kept"] if "kept" in circuit else parse_kept((circuit.get("faithfulness") or {}).get("nodes", []))


def parse_kept(nodes: list[str]) -> dict:
    out = {}
    for node in nodes:
        head, where = node.split("@")
        out[head] = None if where == "all positions" else tuple(int(p[1:]) for p in where.split("/"))
    return out


# ---- checks --------------------------------------------------------------------------------------


class Checks:
    """Each check: what, on how many numbers, the largest difference, PASS/FAIL."""

    def __init__(self, tolerance: float):
        self.tolerance, self.failed, self.lines = tolerance, [], []

    def values(
        self, what: str, pairs: list[tuple[float, float]], tolerance: float | None = None, scale: float = 1.0
    ) -> None:
        """Differences in metric units: a share of a gap is compared times that gap (`scale`), so a
        run whose gap is tiny (a share then amplifies float noise) is judged on what was measured."""
        tolerance = self.tolerance if tolerance is None else tolerance
        diffs = [abs(a - b) * abs(scale) if not (a is None or b is None) else math.inf for a, b in pairs]
        worst = max(diffs, default=0.0)
        self.report(what, len(pairs), worst, worst <= tolerance and bool(pairs))

    def truth(self, what: str, ok: bool, n: int = 1, detail: str = "") -> None:
        self.report(what + (f" ({detail})" if detail else ""), n, 0.0 if ok else math.inf, ok)

    def report(self, what: str, n: int, worst: float, ok: bool) -> None:
        line = f"{'PASS' if ok else 'FAIL'}  n={n:<4d} max diff {worst:.2e}  {what}"
        print(line, flush=True)
        self.lines.append(line)
        if not ok:
            self.failed.append(line)


def run_pairs(run, settings: dict):
    """The report's held-out pairs and training reference rows (tasks.data.spread_subset: which
    examples, not what is measured on them)."""
    from tasks.data import spread_subset

    heldout = run.batches()["heldout"]
    per_pair = len(heldout.answers) / max(len(heldout), 1)
    count = max(1, min(settings["patch_pairs"], math.ceil(settings["patch_scored"] / max(per_pair, 1))))
    return (spread_subset(heldout, count), spread_subset(run.batches()["train"], settings["reference_rows"]))


def check_forward(checks: Checks, name: str, run, W: Weights, pairs: Pairs) -> None:
    model = run.load_model()
    with torch.no_grad():
        theirs = model(pairs.clean)
    mine = forward(W, pairs.clean)[0]
    checks.values(
        f"{name}: forward = the bridge's logits on {len(pairs.clean)} pairs",
        [(float((theirs - mine).abs().max()), 0.0)],
        1e-4,
    )


def check_edges(checks: Checks, name: str, runs: EdgeRuns, stored: dict) -> list:
    circuit = [parse_edge(e["edge"]) for e in stored["circuit"]]
    checks.values(
        f"{name}: clean, counterfactual metric ({stored['pairs']} pairs)",
        [(runs.clean, stored["clean_metric"]), (runs.corrupt, stored["counterfactual_metric"])],
    )
    checks.values(
        f"{name}: named edge circuit's faithfulness (gap scale)",
        [(runs.kept(circuit), stored["faithfulness"])],
        scale=runs.gap,
    )
    checks.values(
        f"{name}: circuit edges' share alone",
        [(runs.alone([e]), s["alone"]) for e, s in zip(circuit, stored["circuit"])],
        scale=runs.gap,
    )
    positional = stored.get("positional")
    if positional:
        edges = [parse_edge(e["edge"]) for e in positional["circuit"]]
        checks.values(
            f"{name}: positional circuit's faithfulness (gap scale), {len(edges)} positional edges",
            [(runs.kept(edges), positional["faithfulness"])],
            scale=runs.gap,
        )
        checks.values(
            f"{name}: positional edges' share alone",
            [(runs.alone([e]), s["alone"]) for e, s in zip(edges, positional["circuit"])],
            scale=runs.gap,
        )
        parents = list(dict.fromkeys(f"{s} -> {r}" for s, r, _ in edges))
        named = [e["edge"] for e in stored["circuit"]]
        share = len(set(parents) ^ set(named)) / len(set(parents) | set(named))
        checks.values(f"{name}: positional vs aggregated changed share", [(share, positional["changed_share"])])
    return circuit


def check_redundancy(checks: Checks, name: str, runs: EdgeRuns, circuit: list, stored: dict) -> None:
    named = (stored.get("redundancy") or {}).get("named")
    if not named:
        return
    whole = runs.kept(circuit)
    alone = sum(abs(runs.alone([e])) for e in circuit)
    checks.values(
        f"{name}: redundancy additivity (sum of single-edge shares / f(C); difference per edge)",
        [(alone / whole, named["additivity"])],
        scale=whole * runs.gap / len(circuit),
    )
    necessity, sufficiency = [], []
    for group in named["groups"]:
        sender = group["sender"]
        without = [e for e in circuit if e[0] != sender]
        necessity.append((whole - runs.kept(without), group["necessity"]))
        if group["sufficiency"] is not None:
            layer = re.match(r"L(\d+)H", sender).group(1)
            others = {e[0] for e in circuit if e[0].startswith(f"L{layer}H") and e[0] != sender}
            sufficiency.append((runs.kept([e for e in circuit if e[0] not in others]), group["sufficiency"]))
    checks.values(f"{name}: redundancy necessity per sender (f(C) - f(C without its edges))", necessity, scale=runs.gap)
    verdict = structure_of(runs, circuit, whole)
    checks.truth(
        f"{name}: redundancy verdict {verdict[0]}, alternatives {verdict[1]}, shared {verdict[2]}",
        verdict[:3] == (named["structure"], named["alternatives"], named["shared"]),
        1,
        f"report: {named['structure']}, {named['alternatives']}, {named['shared']}",
    )
    joint = (stored.get("redundancy") or {}).get("joint")
    checks.truth(f"{name}: the joint search ran (it runs on every traced circuit)", joint is not None, 1)
    if sufficiency:
        checks.values(
            f"{name}: redundancy sufficiency per head (f with its layer's other circuit heads out)",
            sufficiency,
            scale=runs.gap,
        )


def structure_of(runs: EdgeRuns, circuit: list, whole: float):
    """(structure, alternatives, shared) of a circuit from this file's measurements, by the rule
    docs/joint.md states: a layer's circuit heads are alternatives when two or more each keep >= 90%
    of f(C) with the layer's other circuit heads out and none costs >= 10% knocked out; shared when
    none suffices and their single knock-outs add up to less than knocking all out (by 10%)."""
    heads = list(dict.fromkeys(e[0] for e in circuit if re.match(r"L\d+H\d+$", e[0])))
    layers = sorted({int(h[1:].split("H")[0]) for h in heads})
    alternatives, shared = [], []
    for layer in layers:
        peers = [h for h in heads if h.startswith(f"L{layer}H")]
        if len(peers) < 2:
            continue
        cost = {h: whole - runs.kept([e for e in circuit if e[0] != h]) for h in peers}
        keeps = {h: runs.kept([e for e in circuit if e[0] not in set(peers) - {h}]) for h in peers}
        together = whole - runs.kept([e for e in circuit if e[0] not in peers])
        sufficient = [h for h in peers if keeps[h] >= 0.9 * whole]
        if len(sufficient) >= 2 and all(c < 0.1 for c in cost.values()):
            alternatives.append(sufficient)
        elif together >= 0.1 and not sufficient and sum(cost.values()) < together - 0.1:
            shared.append(peers)
    structure = "alternatives" if alternatives else "shared" if shared else "series"
    return structure, alternatives, shared


def check_heads(checks: Checks, name: str, W: Weights, pairs: Pairs, reference, runs: EdgeRuns, stored: dict) -> None:
    """The report's head circuit(s) as node ablation by position means over the reference."""
    circuit = stored.get("circuit")
    if not circuit:
        return
    means = position_means(W, reference, pairs.clean.shape[1])
    empty = head_metric(W, pairs, means, {})[0]
    clean_m, corrupt_m = runs.clean, runs.corrupt
    rows = [(what, *head_metric(W, pairs, means, kept), result) for what, kept, result in head_circuits(W, circuit)]
    full = [row for row in rows if "metric" in row[3]]
    checks.values(
        f"{name}: head view's empty circuit (every head mean-ablated) metric",
        [(empty, r["empty"]) for _, _, _, r in full],
    )
    checks.values(
        f"{name}: head circuits' metric ({len(full)} circuits: named, its heads everywhere, knock-outs)",
        [(m, r["metric"]) for _, m, _, r in full],
    )
    checks.values(
        f"{name}: head circuits and search trace, recovered (0 = counterfactual run, 1 = clean run)",
        [((m - corrupt_m) / (clean_m - corrupt_m), r["recovered"]) for _, m, _, r in rows],
        scale=clean_m - corrupt_m,
    )
    checks.values(
        f"{name}: head circuits and search trace, normalised (0 = every head mean-ablated, 1 = full model)",
        [((m - empty) / (clean_m - empty), r["normalised"]) for _, m, _, r in rows],
        scale=clean_m - empty,
    )
    checks.values(f"{name}: head circuits' restored share", [(restored, r["accuracy"]) for _, _, restored, r in full])
    if circuit.get("upstream"):
        m = rows[0][1]
        checks.values(
            f"{name}: 'faithfulness 1 by construction': the circuit recovers the clean metric", [(m, clean_m)]
        )


def check_ablations(checks: Checks, name: str, W: Weights, run, reference, settings: dict, stored: dict) -> None:
    """The head-ablation table and the circuit's ablation: the heads' z zeroed or replaced by its
    per-position mean over the reference rows, at every position, on the ablation rows (held-out);
    accuracy (top-1 = answer), foil rate, mean answer - foil logit, share of the commonest prediction."""
    from tasks.data import spread_subset

    sample = spread_subset(run.batches()["heldout"], settings["ablation_rows"])
    rows = Pairs.of(clean_only(sample))
    means = position_means(W, reference, rows.clean.shape[1])
    entries = [
        (method, entry) for method in ("zero", "mean") for entry in (stored.get("ablations") or {}).get(method, [])
    ]
    if stored.get("circuit_ablation"):
        entries.append((stored["circuit_ablation"]["method"], stored["circuit_ablation"]))
    found = []
    for method, entry in entries:
        T, n = rows.clean.shape[1], len(rows.clean)
        override = {
            h: (
                torch.zeros(n, T, W.d_head) if method == "zero" else means[h][None].expand(n, -1, -1),
                torch.ones(T, dtype=torch.bool),
            )
            for h in entry["heads"]
        }
        scored = forward(W, rows.clean, z_override=override)[0][rows.rows, rows.positions]
        predicted = scored.argmax(-1)
        diff = scored.gather(1, rows.answers[:, None])[:, 0] - scored.gather(1, rows.foils.clamp(min=0)[:, None])[:, 0]
        found += [
            (float((predicted == rows.answers).double().mean()), entry["accuracy"]),
            (float((predicted == rows.foils).double().mean()), entry["foil_rate"]),
            (float(diff.double().mean()), entry["logit_diff"]),
            (float(torch.bincount(predicted).max()) / len(predicted), entry["top_share"]),
            (float(len(sample)), float(entry["n"])),
        ]
    if found:
        checks.values(
            f"{name}: head ablation table and the circuit's ablation ({len(entries)} rows x accuracy, "
            f"foil rate, logit diff, top share, n; {len(sample)} held-out rows)",
            found,
        )


def clean_only(batch):
    """Pairs.of needs a counterfactual; ablation rows are scored on the clean input only."""
    import dataclasses

    return dataclasses.replace(batch, counterfactual=batch.tokens)


MIB_NODE = re.compile(r"^a(\d+)\.h(\d+)$|^m(\d+)$|^input$|^logits$")


def mib_node(name: str) -> str:
    match = MIB_NODE.match(name)
    if match is None:
        raise ValueError(f"unknown MIB node {name!r}")
    if match.group(1) is not None:
        return f"L{match.group(1)}H{match.group(2)}"
    if match.group(3) is not None:
        return f"MLP{match.group(3)}"
    return "embed" if name == "input" else "logits"


def check_mib(checks: Checks, name: str, file: Path, W: Weights, runs: EdgeRuns, circuit: list) -> None:
    data = json.loads(file.read_text())
    mine_edges = set(all_edges(W))
    scores, flags, zero = [], [], []
    kept = {(s, r) for s, r, _ in circuit}
    for key, edge in data["edges"].items():
        sender, rest = key.split("->")
        receiver, port = (rest[:-3], rest[-2]) if rest.endswith(">") else (rest, None)
        s, r = mib_node(sender), mib_node(receiver) + (f".{port}" if port else "")
        if (s, r) not in mine_edges:  # an MLP of an attention-only model: MIB's graph always has one
            zero.append((edge["score"], 0.0))
            continue
        scores.append((edge["score"], runs.every_alone()[s, r] * runs.gap))
        flags.append((float(edge["in_graph"]), float((s, r) in kept)))
    checks.values(f"{name}: MIB scores = -(metric change with the edge alone counterfactual), metric units", scores)
    if zero:
        checks.values(f"{name}: MIB edges of absent MLPs score 0", zero, 0.0)
    checks.values(f"{name}: MIB in_graph = the named circuit", flags, 0.0)
    checks.truth(f"{name}: MIB holds every edge of the graph", len(scores) == len(mine_edges), len(scores))


def page_data(runs_dir: Path) -> dict:
    """report.html's embedded data (the script element report.js draws from), by run id."""
    html = (runs_dir / "report" / "report.html").read_text()
    text = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S).group(1)
    return {run["id"]: run for run in json.loads(text.replace("<\\/", "</"))["runs"]}


def check_curve(checks: Checks, name: str, runs: EdgeRuns, stored: dict, graph: dict | None) -> None:
    """Faithfulness of every top-k oracle-ranked circuit (k = 0 .. all edges; the curve report.html
    draws and CPR / CMD integrate over the share of edges), and the page's per-edge numbers."""
    alone = runs.every_alone()
    edges = list(alone)
    order = sorted(range(len(edges)), key=lambda i: -abs(alone[edges[i]]))  # stable: graph order on ties
    every = [runs.kept([(*edges[i], None) for i in order[:k]]) for k in range(len(edges) + 1)]
    if graph is None:
        return
    oracle = graph["curves"][0]
    # CPR and CMD integrate over the share of edges at the sizes the report measured (MIB's ladder
    # of fractions, as the page records them).
    shares, values = [k / len(edges) for k in oracle["sizes"]], [every[k] for k in oracle["sizes"]]
    pieces = range(len(shares) - 1)
    cpr = sum((shares[i + 1] - shares[i]) * (values[i] + values[i + 1]) / 2 for i in pieces)
    cmd = sum((shares[i + 1] - shares[i]) * (abs(1 - values[i]) + abs(1 - values[i + 1])) / 2 for i in pieces)
    checks.values(
        f"{name}: the oracle's CPR and CMD (areas over the share of edges at sizes {oracle['sizes']})",
        [(cpr, stored["cpr"]), (cmd, stored["cmd"])],
        scale=runs.gap,
    )
    rounding = 0.5e-3 + 1e-9  # the page keeps 3 decimals of a share
    checks.values(
        f"{name}: report.html's faithfulness of every top-k circuit (3 decimals)",
        list(zip(every, graph["every_k"])),
        rounding,
    )
    by_id = {e["id"]: e for e in graph["edges"]}
    page = [(alone[s, r], by_id[f"{s} -> {r}"]["alone"]) for s, r in edges]
    checks.values(f"{name}: report.html's edge shares alone (3 decimals)", page, rounding)
    effects = [(-alone[s, r] * runs.gap, by_id[f"{s} -> {r}"]["effect"]) for s, r in edges]
    checks.values(f"{name}: report.html's edge effects (metric change, 4 decimals)", effects, 0.5e-4 + 1e-6)


def check_views(checks: Checks, name: str, runs: EdgeRuns, view: dict, claim: float, entry: dict, stored: dict) -> None:
    """The head view (path patching: a head's clean write restored into one later head's q, k or v
    input in the counterfactual run, at every position at once or at one position) and the edge view
    (head-to-head edges whose share alone, noising, is at least the claim), each recomputed; the
    head circuit's heads (the report's runs entry) and the heads among the edge circuit's senders
    (its edge_circuits entry). The views agree when they name the same paths and the same heads."""
    heads = set(runs.W.heads())
    pairs = [(s, r) for s, r in all_edges(runs.W) if s in heads and r.split(".")[0] in heads]
    edge_view = sorted(f"{s} -> {r}" for s, r in pairs if abs(runs.every_alone()[s, r]) >= claim)
    head_view = sorted(
        f"{s} -> {r}" for s, r in pairs if max(runs.denoise([(s, r, p)]) for p in [None, *range(runs.T)]) >= claim
    )
    head_circuit = sorted(circuit_kept(entry.get("circuit") or {}))
    edge_senders = sorted({s for s, _, _ in (parse_edge(e["edge"]) for e in stored["circuit"]) if s in heads})
    checks.truth(
        f"{name}: edge view {edge_view}", edge_view == view["edge_view"], len(pairs), f"report: {view['edge_view']}"
    )
    checks.truth(
        f"{name}: head view {head_view}", head_view == view["head_view"], len(pairs), f"report: {view['head_view']}"
    )
    checks.truth(
        f"{name}: the views' heads {head_circuit} and {edge_senders}",
        (head_circuit, edge_senders) == (view["head_circuit"], view["edge_senders"]),
        2,
        f"report: {view['head_circuit']} and {view['edge_senders']}",
    )
    same = edge_view == head_view and head_circuit == edge_senders
    checks.truth(f"{name}: the views agree iff they name the same paths and heads", view["agree"] == same, 1)


def check_at_target(checks: Checks, name: str, runs: EdgeRuns, at_target: dict, target: float) -> None:
    """joint.at_target: the joint circuit pruned until one more edge would take it below the target."""
    edges = [parse_edge(e) for e in at_target["circuit"]]
    value = runs.kept(edges)
    checks.values(
        f"{name}: joint.at_target faithfulness ({len(edges)} edges)",
        [(value, at_target["faithfulness"])],
        scale=runs.gap,
    )
    checks.truth(f"{name}: joint.at_target keeps the target {target:.0%}", value >= target, 1, f"{value:.4f}")
    without = [runs.kept(edges[:i] + edges[i + 1 :]) for i in range(len(edges))]
    checks.truth(
        f"{name}: joint.at_target has no edge to spare (each one dropped goes below {target:.0%})",
        all(v < target for v in without),
        len(edges),
        f"best without one: {max(without, default=0):.4f}",
    )


def attribution_node(node: dict, n_heads: int, receiving: bool) -> tuple[str, str | None]:
    """(component, port) of an attribution-graph node from its id: E_tok_p (embeddings),
    layer_feature_p with features 4 per head (output and q, k, v) then the MLP, L_token_p (logit)."""
    kind, layer = node["node_id"].split("_")[0], node["layer"]
    if node["feature_type"] == "logit":
        return "logits", None
    if kind == "E":
        return "embed", None
    feature = node["feature"]
    if feature == 4 * n_heads:
        return f"MLP{layer}", None
    port = "qkv"[feature % 4] if receiving else None
    return f"L{layer}H{feature // 4}", port


def check_attribution(checks: Checks, name: str, file: Path, W: Weights, vocabulary: list[str]) -> None:
    """Every link of one exported prompt: weight = clean metric - metric with that edge alone, at
    its position, given its counterfactual write; the prompt rebuilt from the file's own tokens."""
    data = json.loads(file.read_text())
    info, nodes = data["metadata"]["info"], {n["node_id"]: n for n in data["nodes"]}
    index = {word: i for i, word in enumerate(vocabulary)}
    logit = next(n for n in data["nodes"] if n["feature_type"] == "logit")
    foil_word = re.search(r" - logit '(.*)' at p\d+$", logit["clerp"])
    tokens = torch.tensor([[index[w] for w in data["metadata"]["prompt_tokens"]]])
    corrupt = torch.tensor([[index[w] for w in info["counterfactual_tokens"]]])
    pairs = Pairs(
        tokens,
        corrupt,
        torch.zeros(1, dtype=torch.long),
        torch.tensor([logit["ctx_idx"]]),
        torch.tensor([logit["feature"]]),
        torch.tensor([index[foil_word.group(1)] if foil_word else NO_FOIL]),
        torch.tensor([tokens.shape[1] + 1]),
    )
    runs = EdgeRuns(W, pairs)
    checks.values(
        f"{name}: clean, counterfactual metric of the prompt",
        [(runs.clean, info["clean_metric"]), (runs.corrupt, info["counterfactual_metric"])],
    )
    weights = []
    for link in data["links"]:
        sender, _ = attribution_node(nodes[link["source"]], W.n_heads, False)
        receiver, port = attribution_node(nodes[link["target"]], W.n_heads, True)
        position = nodes[link["source"]]["ctx_idx"]
        edge = (sender, receiver + (f".{port}" if port else ""), position)
        weights.append((runs.clean - runs.metric(only([edge], runs.T)), link["weight"]))
    checks.values(f"{name}: link weights (-(metric change), the edge alone at its position)", weights)
    floor = 0.01 * abs(runs.gap)
    checks.truth(
        f"{name}: every link at least 1% of the prompt's gap",
        all(abs(w) >= floor * 0.999 for _, w in weights),
        len(weights),
    )


def pct(value: float, digits: int = 0) -> str:
    """A share as the report writes it ("-0%" reads "0%")."""
    text = f"{value:.{digits}%}"
    return text[1:] if text.startswith("-") and text.strip("-0.%") == "" else text


def sections(markdown: str, level: str) -> dict:
    """'model seed k' -> the text under its headings of `level` ('###' or '####'): a run's story
    and its appendix section, together."""
    out, name = {}, None
    for line in markdown.splitlines():
        if line.startswith("#"):
            match = re.match(rf"^{level} (\S+ seed \d+)$", line)
            name = match.group(1) if match else None
            if name:
                out.setdefault(name, [])
            continue
        if name:
            out[name].append(line)
    return {key: "\n".join(lines) for key, lines in out.items()}


def check_words(checks: Checks, runs_dir: Path) -> None:
    """Each number a run's sentences and the summary tables state, against report.json, by the
    formatting the sentence uses (a claim whose number differs from its table fails)."""
    report = json.loads((runs_dir / "report" / "report.json").read_text())
    markdown = (runs_dir / "report" / "report.md").read_text()
    edge_text, run_text = sections(markdown, "####"), sections(markdown, "###")
    summary = markdown.split("## Bases and scales")[0]
    for e in report["edge_circuits"]:
        name = f"{e['model_name']} seed {e['seed']}"
        text = edge_text.get(name, "")
        headline = e["headline"]
        if headline is None:  # no circuit below the whole graph: no sentence states one
            continue
        expected = [
            f"{name}: edge circuit ({headline['method']}) of {len(headline['circuit'])} of "
            f"{e['graph']['edges']} edges keeps {pct(headline['faithfulness'])} of the gap on {e['pairs']} pairs",
            f"clean {e['clean_metric']:.2f}, counterfactual {e['counterfactual_metric']:.2f}",
            f"**{len(e['circuit'])} edges**, faithfulness {pct(e['faithfulness'], 1)}",
        ]
        expected += [f"- {c['edge']} ({c['alone']:+.0%})" for c in e["circuit"]]
        positional, structure = e.get("positional"), e.get("redundancy") or {}
        # The sentence states the joint search's circuit's additivity where the search ran.
        named = (structure.get("joint") or {}).get("redundancy") or structure.get("named")
        if positional:
            expected.append(
                f"by position, {len(positional['circuit'])} positional edges keep "
                f"{pct(positional['faithfulness'])} and ignoring positions changes "
                f"{pct(positional['changed_share'])} of the circuit's edges"
            )
        if named:
            expected.append(f"add up to {pct(named['additivity'])} of its faithfulness {pct(named['faithfulness'])}")
        story = (
            f"Edges: {len(headline['circuit'])} of {e['graph']['edges']} keep {pct(headline['faithfulness'])} of "
            f"the gap on {e['pairs']} pairs ({headline['method']}"
        )
        checks.truth(f"{name}: the story's mechanism states the headline circuit", story in run_text.get(name, ""), 1)
        missing = [x for x in expected if x not in text]
        checks.truth(
            f"{name}: edge sentences state report.json's numbers",
            not missing,
            len(expected),
            f"missing: {missing[:2]}" if missing else "",
        )
        row = re.search(rf"\| {e['model_name']} \|.*?\n((?:\|.*\n)+)", summary)
        joint = " joint" if headline["method"] == "joint search" else ""
        cell = f"| {len(headline['circuit'])}/{e['graph']['edges']}, {pct(headline['faithfulness'])}{joint} |"
        line = next(
            (l for l in (row.group(1).splitlines() if row else []) if l.startswith(f"| seed {e['seed']} |")), ""
        )
        checks.truth(f"{name}: summary table's edges (gap) cell {cell}", cell in line, 1)
    for r in report["runs"]:
        circuit, name = r.get("circuit"), f"{r['model_name']} seed {r['seed']}"
        if not circuit:
            continue
        f, h = circuit["faithfulness"], circuit.get("head_faithfulness")
        text = run_text.get(name, "")
        if circuit.get("upstream"):
            expected = ["its faithfulness is 1 by construction (not a finding)"]
        else:
            expected = [
                f"faithfulness {f['normalised']:.2f} on the null scale ({pct(f['recovered'])} of the clean - "
                "counterfactual gap)"
            ]
            if h and not circuit.get("head_upstream"):
                expected.append(f"its heads at every position: {h['normalised']:.2f} ({pct(h['recovered'])})")
        for head, k in (circuit.get("knockout") or {}).items():
            mention = f"the full model without it keeps {k['normalised']:.2f} on the null scale"
            if f"{head} (kept" in text and "matters when mean-ablated" in text.split(f"{head} (kept")[1].split(");")[0]:
                expected.append(mention)
        missing = [x for x in expected if x not in text]
        checks.truth(
            f"{name}: run sentences state the head circuit's faithfulness",
            not missing,
            len(expected),
            f"missing: {missing[:2]}" if missing else "",
        )


# ---- the census over training --------------------------------------------------------------------


def path_label(circuit: dict, claim: float):
    """The mechanism a step names, from its stored facts: the paths whose sender patched at every
    position or at its best single one recovers `claim` of the gap; the heads when none does."""
    if not circuit["nodes"]:
        return None
    paths = circuit.get("paths") or ([circuit["edge"]] if circuit.get("edge") else [])
    named = frozenset(
        (p["component"], p["sender"], p["receiver"])
        for p in paths
        if max(v for v in (p["recovered"], p["everywhere"], -math.inf) if v is not None) >= claim
    )
    return named or ("heads", tuple(dict.fromkeys(n.split("@")[0] for n in circuit["nodes"])))


def check_timeline(checks: Checks, sweep: Path) -> None:
    from probes.settings import DEFAULT  # the report's settings: how many pairs, the path claim
    from dataclasses import asdict
    from tasks.training.runs import Run

    settings = asdict(DEFAULT)
    census = json.loads((sweep / "census" / "census.json").read_text())
    checks.truth(
        f"{sweep}: the census has a timeline to check (the sweep was trained with --snapshot-every)",
        any(group.get("timeline") for group in census["groups"]),
        len(census["groups"]),
    )
    for group in census["groups"]:
        stored = group.get("timeline")
        if not stored:
            continue
        folder = sweep / group["point"] / group["model_name"]
        labels, gaps, paths = {}, [], []
        for timeline_file in sorted(folder.glob("seed*/timeline.json")):
            run = Run(timeline_file.parent)
            data = json.loads(timeline_file.read_text())
            batch, _ = run_pairs(run, settings)
            pairs = Pairs.of(batch)
            for entry in data["snapshots"]:
                W = Weights.load(run.path / entry["file"], run.config["spec"])
                runs = EdgeRuns(W, pairs)
                gaps.append((runs.gap, entry["gap"]))
                for p in entry["circuit"].get("paths") or []:
                    edge = (p["sender"], f"{p['receiver']}.{p['component']}")
                    paths.append((runs.denoise([(*edge, None)]) * runs.gap, p["everywhere"] * runs.gap))
                    if p["position"] >= 0:
                        paths.append((runs.denoise([(*edge, p["position"])]) * runs.gap, p["recovered"] * runs.gap))
            labels[run.seed] = [
                (e["step"], path_label(e["circuit"], settings["path_claim"])) for e in data["snapshots"]
            ]
        where = f"timeline {group['point']}/{group['model_name']}"
        checks.values(f"{where}: every snapshot's gap (clean - counterfactual metric, {len(labels)} seeds)", gaps)
        if paths:
            checks.values(
                f"{where}: traced snapshots' path shares times the gap (every position, best single position)", paths
            )
        else:
            print(f"skip  {where}: no snapshot was traced (no path shares to check)")
        grid = sorted({step for entries in labels.values() for step, _ in entries})
        agreeing, stopped, training, training_shares = [], [], [], []
        for step, row in zip(grid, stored["steps"]):
            now = {seed: [label for s, label in entries if s <= step][-1] for seed, entries in labels.items()}
            agree = {seed: now[seed] == entries[-1][1] for seed, entries in labels.items()}
            still = [seed for seed, entries in labels.items() if entries[-1][0] > step]
            agreeing.append((sum(agree.values()), row["agreeing"]))
            stopped.append((len(labels) - len(still), row["stopped"]))
            training.append(
                (sum(agree[seed] for seed in still), (row["training"]["value"] or 0.0) * row["training"]["n"])
            )
            training.append((len(still), row["training"]["n"]))
            training_shares.append(sum(agree[seed] for seed in still) / len(still) if still else math.nan)
        checks.truth(
            f"{where}: census steps = the snapshot steps", grid == [r["step"] for r in stored["steps"]], len(grid)
        )
        checks.values(f"{where}: seeds naming their final mechanism per step", agreeing, 0.0)
        checks.values(f"{where}: seeds stopped per step", stopped, 0.0)
        shares = [a / len(labels) for a, _ in agreeing]
        first = None
        for step, share in zip(grid[:-1], shares[:-1]):
            first = (step if first is None else first) if share >= 0.9 else None
        checks.truth(
            f"{where}: told from step {first}",
            first == stored["predictable_from"],
            1,
            f"census says {stored['predictable_from']}",
        )
        checks.values(
            f"{where}: seeds still training, and those naming their final mechanism, per step", training, 1e-9
        )
        first = None
        for step, share in zip(grid[:-1], training_shares[:-1]):
            if not math.isnan(share):
                first = (step if first is None else first) if share >= 0.9 else None
        checks.truth(
            f"{where}: told from step {first} on the seeds still training",
            first == stored["predictable_while_training"],
            1,
            f"census says {stored['predictable_while_training']}",
        )
        traced = {
            seed: next((s for s, label in entries if label is not None), entries[-1][0])
            for seed, entries in labels.items()
        }
        checks.truth(
            f"{where}: first traced step per seed",
            {str(k): v for k, v in traced.items()} == stored["first_traced"],
            len(traced),
        )
        settled = {}
        for seed, entries in labels.items():
            index = len(entries) - 1
            while index > 0 and entries[index - 1][1] == entries[-1][1]:
                index -= 1
            settled[str(seed)] = entries[index][0]
        checks.truth(f"{where}: step each seed's label settles at", settled == stored["settled"], len(settled))
        finals = {str(seed): entries[-1][0] for seed, entries in labels.items()}
        checks.truth(f"{where}: last training step per seed", finals == stored["final_steps"], len(finals))
        final_share = sum(
            label == entries[-1][1]
            for seed, entries in labels.items()
            for step, label in entries
            if step == traced[seed]
        ) / len(labels)
        checks.values(
            f"{where}: share of seeds naming their final mechanism at their first traced step",
            [(final_share, stored["first_traced_final"]["value"])],
            0.0,
        )


# ---- the whole report ----------------------------------------------------------------------------


def verify_runs(checks: Checks, runs_dir: Path, joint: bool) -> None:
    from tasks.training.runs import find_runs

    report = json.loads((runs_dir / "report" / "report.json").read_text())
    settings = report["settings"]
    edge_circuits = {(e["model_name"], e["seed"]): e for e in report["edge_circuits"]}
    entries = {(r["model_name"], r["seed"]): r for r in report["runs"]}
    views = {(v["model_name"], v["seed"]): v for v in report.get("views") or []}
    page = page_data(runs_dir)
    for run in find_runs(runs_dir):
        key, name = (run.model_name, run.seed), f"{run.model_name} seed {run.seed}"
        if key not in entries:
            continue
        try:
            W = Weights.load(run.path / "model.safetensors", run.config["spec"])
        except ValueError as skipped:
            print(f"skip  {name}: {skipped}")
            continue
        batch, reference = run_pairs(run, settings)
        pairs = Pairs.of(batch)
        basis = entries[key]["basis"]
        counts = {
            "pairs": len(batch),
            "reference": len(reference),
            "train": len(run.batches()["train"]),
            "heldout": len(run.batches()["heldout"]),
            "ablation": min(len(run.batches()["heldout"]), settings["ablation_rows"]),
        }
        checks.truth(
            f"{name}: basis {counts}", all(basis[k] == v for k, v in counts.items()), len(counts), f"report: {basis}"
        )
        check_forward(checks, name, run, W, pairs)
        runs = EdgeRuns(W, pairs)
        check_heads(checks, name, W, pairs, reference, runs, entries[key])
        check_ablations(checks, name, W, run, reference, settings, entries[key])
        for file in sorted((runs_dir / "exports" / "attribution").glob(f"{run.model_name}_seed{run.seed}_pair*.json")):
            check_attribution(checks, f"{name} {file.relative_to(runs_dir)}", file, W, run.config["vocabulary"])
        if key not in edge_circuits:
            continue
        stored = edge_circuits[key]
        circuit = check_edges(checks, name, runs, stored)
        check_redundancy(checks, name, runs, circuit, stored)
        if key in views:
            check_views(checks, name, runs, views[key], settings["path_claim"], entries[key], stored)
        check_curve(checks, name, runs, stored, page.get(f"{run.model_name}-seed{run.seed}", {}).get("graph"))
        found = ((stored.get("redundancy") or {}).get("joint") or {}).get("at_target")
        if found:
            check_at_target(checks, name, runs, found, stored["target"])
        if joint:
            check_at_target(
                checks, f"{name} (joint search run here)", runs, joint_at_target(run, batch, circuit), stored["target"]
            )
        for folder in (runs_dir / "report" / "mib", runs_dir / "exports" / "mib"):
            for file in sorted(folder.glob(f"{run.model_name}_seed{run.seed}*.json")):
                if file.stem in (f"{run.model_name}_seed{run.seed}", f"{run.model_name}_seed{run.seed}_oracle"):
                    check_mib(checks, f"{name} {file.relative_to(runs_dir)}", file, W, runs, circuit)


def joint_at_target(run, batch, circuit) -> dict:
    """toylens's joint search pruned from the named circuit, as the report runs it (without stand-in
    searches): the product's result, checked above by this file's own measurements."""
    from models.graph import graph_of
    from probes.circuits.methods.joint import joint_search

    model = run.load_model()
    graph = graph_of(run.spec)
    by_name = {str(e): e for e in graph.edges}
    start = frozenset(by_name[f"{s} -> {r}"] for s, r, _ in circuit)
    found = joint_search(model, batch, graph, start=start, alternatives=0, tighten=True)
    return {
        "circuit": [str(e) for e in graph.edges if e in found.at_target.circuit],
        "faithfulness": found.at_target.faithfulness,
    }


def main(argv=None) -> int:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, help="a runs folder with report/report.json")
    parser.add_argument("--sweep", type=Path, help="a sweep folder trained with --snapshot-every (its census)")
    parser.add_argument("--joint", action="store_true", help="also run the joint search here and check its at_target")
    parser.add_argument(
        "--tolerance", type=float, default=1e-5, help="largest difference that passes, in metric units (default 1e-5)"
    )
    args = parser.parse_args(argv)
    needed = [
        args.runs_dir / "report" / "report.json",
        args.runs_dir / "report" / "report.md",
        args.runs_dir / "report" / "report.html",
    ] + ([args.sweep / "census" / "census.json"] if args.sweep else [])
    missing = [str(path) for path in needed if not path.is_file()]
    if missing:
        print(
            f"verify_report: {missing[0]} is missing; write the report first (python -m probes.circuit report "
            f"RUNS_DIR, or toylens census SWEEP_DIR for --sweep)",
            file=sys.stderr,
        )
        return 2
    checks = Checks(args.tolerance)
    try:
        with torch.no_grad():  # not set_grad_enabled: a caller's (a test's) later training keeps its gradients
            verify_runs(checks, args.runs_dir, args.joint)
            check_words(checks, args.runs_dir)
            if args.sweep:
                check_timeline(checks, args.sweep)
    except (KeyError, ValueError) as error:  # json.JSONDecodeError is a ValueError
        print(
            f"verify_report: a stored file lacks what the report writes ({type(error).__name__}: {error}); "
            "rewrite the report with this toylens",
            file=sys.stderr,
        )
        return 2
    print(f"{len(checks.lines)} checks, {len(checks.failed)} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(lambda: sys.exit(main()))  # a UsageError raised anywhere in it: one line, exit 2
