"""What the outside-model path costs on a GPT-2-small-shaped checkpoint (124M weights, random, built
here with from_config + save_pretrained; nothing loads from a hub), or one of the same width and depth
in the GPT-NeoX (Pythia-160m's shape: parallel blocks) or Llama (grouped-query attention, 4 key / value
groups; gated MLP 2048 wide) family:

    .venv/bin/python benchmarks/byom_cost.py [--pairs 8] [--verify 200] [--layers 12] [--device cuda]
        [--family gpt2|gpt_neox|llama]

Steps, each timed in this process's CPU seconds (`time.process_time`; on a shared machine wall time
mostly measures the wait for a core) with wall seconds beside: loading the folder offline, the hook
preflight, EAP over every edge of the graph (probes.circuits.methods.attribution), the exact oracle on
the top `--verify` edges of that ranking, and the same edge-level attribution in plain
TransformerLens (`tools.analysis.attribution_patching.attribution_patch`, granularity "edge") with the
ratio of the two from this one run (TL's metric reads the first pair's answer and foil for every pair:
it is told one pair's logits at a time, not which pair; the cost per call is the same). The process's peak resident memory is printed last. IOI's held-out
pairs (`--pairs`) are encoded by a word-level tokenizer of the task's words saved in the folder.
On a GPU (`--device cuda`) CPU seconds undercount the work (the GPU's time is not the process's): read
the wall column there, with the GPU otherwise idle.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path


def timed(label: str, function):
    cpu, wall = time.process_time(), time.perf_counter()
    result = function()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(f"{label:<52} {cpu:8.1f} CPU s {wall:8.1f} wall s", flush=True)
    return result, cpu


FAMILIES = ("gpt2", "gpt_neox", "llama")


def config(family: str, layers: int):
    """GPT-2 small's shape (d_model 768, 12 heads), in `family`."""
    from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig

    if family == "gpt2":
        return GPT2Config(n_layer=layers)
    if family == "gpt_neox":
        return GPTNeoXConfig(
            vocab_size=50304, hidden_size=768, num_hidden_layers=layers, num_attention_heads=12, intermediate_size=3072
        )
    return LlamaConfig(
        vocab_size=32000,
        hidden_size=768,
        num_hidden_layers=layers,
        num_attention_heads=12,
        num_key_value_heads=4,
        intermediate_size=2048,
    )


def build(folder: Path, layers: int, family: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from models.hf_export import word_tokenizer
    from tasks.ioi import IOITask

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config(family, layers)).save_pretrained(folder)
    word_tokenizer(IOITask().vocabulary()).save_pretrained(folder)


def main(pairs: int, verify: int, layers: int, device: str, family: str) -> None:
    import torch

    from models.hf_load import load_folder
    from models.preflight import preflight, require
    from probes.circuits.methods.attribution import eap
    from probes.circuits.oracle import model_graph, patched_outcomes, record_runs
    from probes.circuits.scaled import hooks_used
    from tasks.ioi import IOITask
    from tasks.templates import heldout_batch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp) / f"{family}-small-random"
        timed(f"build and save the checkpoint ({family})", lambda: build(folder, layers, family))
        loaded, _ = timed("load offline (models.hf_load)", lambda: load_folder(folder, device=device))
    model, batch = loaded.bridge, heldout_batch(IOITask(), 0, loaded.tokenizer, pairs).to(device)
    hooks = hooks_used(model)
    checked, _ = timed(
        "preflight (models.preflight)", lambda: require(preflight(model, batch.inputs[:2], loaded.hf_model, hooks))
    )
    print(f"  ({len(checked.checks)} checks, {checked.forwards} forwards)")
    graph = model_graph(model)
    runs, _ = timed("record the clean and counterfactual runs", lambda: record_runs(model, batch, graph))
    scores, ours = timed(f"EAP over every edge ({len(graph.edges)} edges)", lambda: eap(model, batch, graph, runs=runs))
    top = scores.score.abs().argsort(descending=True)[:verify].tolist()
    sets = [frozenset([graph.edges[i]]) for i in top]
    timed(f"exact oracle on the top {verify} edges", lambda: patched_outcomes(model, batch, graph, sets, runs))
    theirs = tl_edge_attribution(model, batch)
    if theirs is not None:
        print(f"TransformerLens edge attribution / toylens EAP, CPU seconds: {theirs / ours:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"process peak resident memory: {peak:.0f} MiB ({len(batch)} pairs, {batch.inputs.shape[1]} positions)")


def tl_edge_attribution(model, batch):
    """CPU seconds of TL's edge-granularity attribution_patch on the same pairs, or None (said why)."""
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    # TL calls the metric on one pair's logits at a time without saying which pair: every call reads
    # pair 0's scored position, answer and foil. The same work per call: a timing, not a comparison of values.
    position, answer, foil = int(batch.positions[0]), int(batch.answers[0]), int(batch.foils[0])

    def metric(logits):
        return logits[0, position, answer] - logits[0, position, foil]

    try:
        clean, corrupt = batch.inputs, batch.counterfactual[:, :-1]
        config = EdgeAttributionConfig(granularity="edge")
        _, cpu = timed(
            "TransformerLens attribution_patch, edges", lambda: attribution_patch(model, clean, corrupt, metric, config)
        )
        return cpu
    except Exception as error:  # noqa: BLE001  (report TL's refusal, whatever it raises, and go on)
        print(f"TransformerLens attribution_patch (edges) did not run: {type(error).__name__}: {str(error)[:200]}")
        return None


if __name__ == "__main__":
    from common.cli import Parser, device_name, positive_int, run_cli

    parser = Parser(prog="benchmarks/byom_cost.py", description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=positive_int, default=8)
    parser.add_argument("--verify", type=positive_int, default=200)
    parser.add_argument("--layers", type=positive_int, default=12, help="12: GPT-2 small")
    parser.add_argument("--family", choices=FAMILIES, default="gpt2", help="the checkpoint's family (default gpt2)")
    parser.add_argument("--device", type=device_name, default="cpu", help="cpu (default), cuda, cuda:N or mps")
    args = parser.parse_args(sys.argv[1:])
    run_cli(main, args.pairs, args.verify, args.layers, args.device, args.family)
