"""Tasks toylens had not seen (tests/plugins/newcomer_tasks.py, written from docs/plugins.md and
docs/guide.md alone): what accuracy, the shuffle test, the shortcut audit and the summary say about
them must follow from the numbers.

- echo (`x y` -> x, 120 tokens, context 2, scored at position 1): one token before the scored
  position, so the shuffle test has nothing to permute.
- majority (which of a, b occurs more often): a bag of words solves it.
- reverse (random length 2..8, every answer position scored): an untrained run is flagged.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.refusals import fixture_plugins_on_path


@pytest.fixture(scope="module", autouse=True)
def newcomer_plugins():
    yield from fixture_plugins_on_path("newcomer_tasks")


def train(task_name: str, out: Path, models: tuple[str, ...], params: dict, **overrides) -> Path:
    from tasks.registry import build_task, get_task_class
    from tasks.settings import model_settings
    from toylens.family import plan_family, train_family

    task = build_task(get_task_class(task_name), params)
    settings = {name: model_settings(task, name, overrides) for name in task.default_models()}
    train_family(plan_family(task, list(models), [0], settings, out), progress=False)
    return out


def family(runs: Path):
    from probes.accuracy import compare_runs

    return compare_runs(runs)


# 1. Scored at position 1, the prefix is one token: no permutation changes it. Catches: "shuffle
# max|dlogit| 0.0e+00" for an attention model that reads position 0 (the audit's mark of an
# order-blind model) and no word on why the shortcut audit is missing.
def test_a_prefix_of_one_token_gives_no_shuffle_number_and_says_why(tmp_path):
    from probes.health import family_audit
    from probes.report.render import accuracy_table, health_lines

    models = family(
        train("echo", tmp_path / "echo", ("attn-only-1x1",), {"examples": 300}, max_steps=50, eval_every=25)
    )
    assert all(math.isnan(m.shuffle_max_logit_change) for m in models)
    assert family_audit(models) is None
    assert "n/a (no order to permute)" in accuracy_table(models)
    assert any(
        line.startswith("no shortcut audit: the shuffle test has no order to permute") for line in health_lines(models)
    )


def test_the_shuffle_test_measures_where_some_prefix_has_two_tokens():
    """The NaN is for prefixes with nothing to permute only: one row that has two different
    tokens before its scored position gives a number."""
    import torch

    from models import ModelSpec, build_model
    from probes.shuffle import shuffle_test
    from tasks.data import Batch

    model = build_model(ModelSpec(n_layers=1, d_model=16, n_heads=1, mlp=False, n_ctx=4, d_vocab=6), seed=0).eval()

    def batch(rows):
        tokens = torch.tensor(rows)
        n = len(rows)
        return Batch(
            tokens=tokens,
            lengths=torch.full((n,), 5),
            example_index=torch.arange(n),
            positions=torch.full((n,), 2),
            answers=tokens[:, 3],
            foils=tokens[:, 4],
            groups=[""] * n,
            counterfactual=None,
        )

    assert math.isnan(shuffle_test(model, batch([[1, 1, 2, 3, 4], [5, 5, 2, 3, 4]])).max_abs_logit_change)
    assert shuffle_test(model, batch([[1, 1, 2, 3, 4], [1, 5, 2, 3, 4]])).max_abs_logit_change > 1e-4


# 2. A task order does not matter for: the bag of words matches the attention model. Catches: the
# summary calling a head or block of the attention model "needed" with nothing saying that the
# task itself needs no attention.
def test_a_task_the_bag_of_words_solves_is_said_to_need_no_circuit(tmp_path):
    from probes.health import AuditVerdict, family_audit
    from probes.report.render import health_lines

    models = family(
        train(
            "majority",
            tmp_path / "majority",
            ("bag-of-words", "attn-only-1x1"),
            {"examples": 600},
            max_steps=200,
            eval_every=25,
        )
    )
    blind = next(m for m in models if m.model_name == "bag-of-words")
    assert blind.heldout.value >= 0.95 and blind.shuffle_max_logit_change < 1e-3
    audit = family_audit(models)
    assert audit.verdict is AuditVerdict.FAILED
    words = audit.words()
    assert "a model that cannot read order does" in words and "needed by that model only" in words
    assert words in [line.strip() for line in health_lines(models)]


# 3. Several scored positions per example, lengths 2..8 in one batch: a run the health checks flag
# is not "ok" in the summary. Catches: the summary's health cell reading "ok" beside the note that
# flags the same run.
def test_a_flagged_run_is_not_ok_in_the_summary(tmp_path):
    from probes.report.summary import accuracy_cells

    models = family(
        train("reverse", tmp_path / "reverse", ("attn-only-1x1",), {"examples": 400}, max_steps=25, eval_every=25)
    )
    (m,) = models
    assert m.runs[0].splits["heldout"].n > len(m.runs) * 80  # several scored positions per example
    assert m.suspect, "the 25-step run should be flagged (below chance or neither answer nor foil)"
    assert accuracy_cells(models)[("attn-only-1x1", 0)]["health"] == "flagged"
