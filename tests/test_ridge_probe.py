"""The closed-form ridge probe beside the logistic one: it reads a linearly coded answer without an
optimiser, its penalty is chosen on held-out training rows, and the profile says "decodable after X"
by the better held-out score, naming a disagreement of more than 5 points."""

from __future__ import annotations

from types import SimpleNamespace

import torch


def test_ridge_reads_a_linearly_coded_answer_and_picks_its_penalty_from_the_grid():
    from probes.ridge_probe import LAMBDAS, fit_ridge

    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 4, (400,), generator=generator)
    x = torch.randn(400, 16, generator=generator) + 3.0 * torch.nn.functional.one_hot(y, 16).float()
    ridge = fit_ridge(x[:300], y[:300], 4)
    assert (ridge.predict(x[300:]) == y[300:]).float().mean() > 0.95
    assert any(abs(ridge.penalty - scale * 300) < 1e-6 * 300 for scale in LAMBDAS)


def stage(after, logistic, ridge):
    from probes.sublayers import Decodable

    return Decodable(after, "hook", logistic, 512, 480, 16, ridge, 1.0)


def test_the_profile_reads_the_better_probe_and_names_a_disagreement():
    from probes.report.sublayer_part import profile_words
    from probes.settings import DEFAULT

    profile = (stage("embeddings", 0.05, 0.06), stage("attention 0", 0.93, 1.0), stage("attention 1", 1.0, 1.0))
    words = profile_words(SimpleNamespace(profile=profile, mlps=()), DEFAULT)
    assert "decodable (>= 95% by the better probe) from after attention 0" in words, words
    assert "disagree by more than 5% after attention 0 (logistic 93%, ridge 100%)" in words
    agreeing = (stage("embeddings", 0.05, 0.06), stage("attention 0", 0.93, 0.94), stage("attention 1", 1.0, 1.0))
    words = profile_words(SimpleNamespace(profile=agreeing, mlps=()), DEFAULT)
    assert "from after attention 1" in words and "disagree" not in words
