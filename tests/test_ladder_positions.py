"""The ladder's rungs are the models they name; the positions probe scores lengths correctly; both
commands run end to end on tiny settings and refuse bad arguments in one line."""

import json
import math
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from models import build_model
from models.spec import Attention, Norm, Positions
from probes.chapter.ladder import RUNGS, ladder_specs
from probes.chapter.positions import context_for, position_specs, score_lengths


def rung(name: str):
    return build_model(replace(ladder_specs(16)[name], n_ctx=10, d_vocab=7), seed=1)


def test_rungs_run_from_no_context_to_two_blocks():
    specs = ladder_specs(16)
    assert list(specs) == [name for name, _, _ in RUNGS]
    s = list(specs.values())
    assert (s[0].attention, s[0].positions) == (Attention.NONE, Positions.NONE)
    assert (s[1].attention, s[1].positions, s[1].residual) == (Attention.UNIFORM, Positions.NONE, False)
    assert (s[2].attention, s[2].positions, s[2].residual) == (Attention.UNIFORM, Positions.LEARNED, False)
    assert (s[3].attention, s[3].residual) == (Attention.UNIFORM, True)
    assert (s[4].attention, s[4].n_heads, s[5].n_heads) == (Attention.SOFTMAX, 1, 4)
    assert [(x.mlp, x.norm, x.n_layers) for x in s[5:]] == [
        (False, None, 1),
        (True, None, 1),
        (True, Norm.LN, 1),
        (True, Norm.LN, 2),
    ]


def test_no_context_rung_reads_only_the_current_token():
    model = rung("no-context")
    tokens = torch.randint(7, (6, 10), generator=torch.Generator().manual_seed(0))
    logits = model(tokens)
    for t in range(10):
        # Every position holding the same token gets the same logits, whatever came before it.
        same = model(tokens[:, t : t + 1].expand(6, 10))
        torch.testing.assert_close(logits[:, t], same[:, 0], rtol=0, atol=1e-6)


def test_uniform_rungs_are_order_blind_and_replace_the_token():
    for name in ("uniform-average", "uniform+positions"):
        model = rung(name)
        tokens = torch.randint(7, (4, 10), generator=torch.Generator().manual_seed(1))
        shuffled = tokens[:, torch.randperm(9, generator=torch.Generator().manual_seed(2)).tolist() + [9]]
        # The last position's summary is the same average, whatever the order of the prefix.
        torch.testing.assert_close(model(shuffled)[:, -1], model(tokens)[:, -1], rtol=0, atol=1e-5)
        _, cache = model.run_with_cache(tokens)
        torch.testing.assert_close(cache["blocks.0.hook_resid_post"], cache["blocks.0.hook_attn_out"], rtol=0, atol=0)


def constant_batches(lengths):
    """Length-invariant input: one token repeated; every position scored, the answer that token."""
    from tasks.base import NO_FOIL
    from tasks.data import Batch

    batches = {}
    for length in lengths:
        tokens = torch.arange(1, 5)[:, None].expand(4, length + 1).clone()
        rows, positions = torch.meshgrid(torch.arange(4), torch.arange(length), indexing="ij")
        batches[length] = Batch(
            tokens=tokens,
            lengths=torch.full((4,), length + 1),
            example_index=rows.flatten(),
            positions=positions.flatten(),
            answers=tokens[rows.flatten(), positions.flatten() + 1],
            foils=torch.full((4 * length,), NO_FOIL),
            groups=[""] * 4,
            counterfactual=None,
        )
    return batches


def test_a_model_without_positions_scores_the_same_at_every_length_on_a_length_invariant_input():
    batches = constant_batches([6, 12, 24])
    spec = position_specs(["none", "learned"], d_model=16)
    none = build_model(replace(spec["none"], n_ctx=24, d_vocab=7), seed=0)
    scores = score_lengths(none, batches)
    assert [s.factor for s in scores] == [6, 12, 24]
    assert all(math.isclose(s.loss, scores[0].loss, rel_tol=1e-5) for s in scores)
    assert all(s.accuracy.value == scores[0].accuracy.value for s in scores)
    # The same measurement tells lengths apart once the model reads positions.
    learned = build_model(replace(spec["learned"], n_ctx=24, d_vocab=7), seed=0)
    losses = [s.loss for s in score_lengths(learned, batches)]
    assert max(losses) - min(losses) > 1e-4


def test_context_covers_the_longest_evaluated_sequence():
    # R = 12 at 4x is 48: BOS + 96 tokens, of which the model reads 96.
    assert context_for(12, (1, 2, 4)) == 96


def run_module(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["toylens", "ladder"], "required: task"),
        (["toylens", "ladder", "nosuchtask"], "nosuchtask"),
        (["toylens", "ladder", "winograd", "--seeds", "0"], "write 0-0 for seed 0 alone"),
        (["toylens", "ladder", "winograd", "--rungs", "nope", "--nouns", "8"], "unknown rung"),
        (["toylens", "ladder", "winograd", "--d-model", "30"], "divisible by 4"),
        (["toylens", "positions", "--kinds", "absolute"], "unknown position kind"),
        (["toylens", "positions", "--factors", "2,4"], "must start at 1"),
        (["toylens", "positions", "--factors", "1,8"], "distinct tokens"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, message):
    result = run_module(*args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_ladder_runs_end_to_end(tmp_path):
    out = tmp_path / "ladder"
    result = run_module(
        "toylens",
        "ladder",
        "winograd",
        "--nouns",
        "8",
        "--rungs",
        "no-context,uniform-average",
        "--seeds",
        "0-1",
        "--steps",
        "10",
        "--d-model",
        "16",
        "--jobs",
        "1",
        "--no-progress",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    written = json.loads((out / "ladder.json").read_text())
    assert [r["rung"] for r in written["rungs"]] == ["no-context", "uniform-average"]
    assert all(len(r["seeds"]) == 2 for r in written["rungs"])
    # No context cannot see the prefix: the shuffle test moves its logits by exactly nothing.
    assert written["rungs"][0]["shuffle_max_logit_change"] == 0
    assert (out / "ladder.png").stat().st_size > 0 and "no context" in result.stdout


def test_positions_runs_end_to_end(tmp_path):
    out = tmp_path / "positions"
    result = run_module(
        "toylens",
        "positions",
        "--kinds",
        "none,alibi",
        "--seeds",
        "0-0",
        "--steps",
        "5",
        "--train",
        "200",
        "--eval-sequences",
        "16",
        "--d-model",
        "16",
        "--min-repeat",
        "3",
        "--max-repeat",
        "4",
        "--jobs",
        "1",
        "--no-progress",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    written = json.loads((out / "positions.json").read_text())
    assert written["n_ctx"] == 32 and [k["kind"] for k in written["kinds"]] == ["none", "alibi"]
    assert [l["repeat"] for l in written["kinds"][0]["lengths"]] == [[3, 4], [6, 8], [12, 16]]
    assert (out / "positions.png").stat().st_size > 0
