"""probes.chapter.scaling: known answers of the softmax statistics, the variance of q.k, saturation against
d_k, the recomputed scores against the model's own pattern, and a tiny end-to-end training."""

from __future__ import annotations

import math

import pytest
import torch

from models import ModelSpec, build_model
from models.bridge import native_attention
from probes.chapter.scaling import attention_inputs, attention_scores, init_point, row_stats
from toylens.chapter.scaling import measure_trained


def test_row_stats_known_answers():
    uniform = row_stats(torch.zeros(10, 8))
    assert uniform.entropy == pytest.approx(math.log(8))
    assert uniform.jacobian_trace == pytest.approx(1 - 1 / 8)
    assert uniform.saturated == 0 and uniform.score_std == 0
    one_hot = row_stats(torch.tensor([[100.0, 0, 0, 0]]))
    assert one_hot.saturated == 1 and one_hot.entropy == pytest.approx(0, abs=1e-6)
    assert one_hot.jacobian_trace == pytest.approx(0, abs=1e-6)
    # A causal row with two real keys of equal score: the masked keys take no weight.
    valid = torch.tensor([[True, True, False, False]])
    assert row_stats(torch.zeros(1, 4), valid).entropy == pytest.approx(math.log(2))


@pytest.mark.parametrize("d_k", [4, 64, 256])
def test_variance_of_q_dot_k_is_d_k(d_k):
    # 20,000 pairs: the sample variance's relative sd is ~1%, so 5% is a wide margin.
    assert init_point(d_k, seed=3, rows=8).var_qk == pytest.approx(d_k, rel=0.05)


def test_unscaled_saturation_grows_with_d_k_and_scaled_stays_flat():
    points = [init_point(d, seed=0, pairs=100, rows=600) for d in (4, 16, 64, 256, 1024)]
    unscaled = [p.unscaled.saturated for p in points]
    assert unscaled == sorted(unscaled) and unscaled[0] < 0.05 and unscaled[-1] > 0.5
    assert all(p.scaled.saturated == 0 for p in points)
    # Scaled scores have unit variance: E[sum p^2] ~ e / 64 for 64 keys, so the trace is ~0.96.
    assert all(0.94 < p.scaled.jacobian_trace < 0.975 for p in points)


@pytest.mark.parametrize("scaled", [True, False])
def test_recomputed_scores_give_the_models_own_pattern(scaled):
    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, mlp=False, d_vocab=6, n_ctx=7, scale_scores=scaled)
    model = build_model(spec, seed=1)
    tokens = torch.randint(6, (3, 7), generator=torch.Generator().manual_seed(0))
    store, handles = attention_inputs(model)
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name.endswith("hook_pattern"))
    for handle in handles:
        handle.remove()
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    for layer, block in enumerate(model.blocks):
        scores = attention_scores(native_attention(block), store[layer])
        pattern = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1)
        torch.testing.assert_close(pattern, cache[f"blocks.{layer}.attn.hook_pattern"])


def test_trained_curves_end_to_end(small_winograd, tmp_path):
    curves = measure_trained(
        small_winograd, widths=[8], seeds=[0], steps=20, every=10, out=tmp_path, jobs=1, progress=False
    )
    assert [(c.d_k, c.scaled) for c in curves] == [(8, True), (8, False)]
    for c in curves:
        assert [p.step for p in c.points] == [0, 10, 20] and c.stop_reason == "step budget"
        assert all(0 <= p.heldout_accuracy <= 1 and p.attention.rows > 0 for p in c.points)
    # The same initial weights: only the divisor differs, so layer 0's step-0 score std differs by
    # sqrt(8) (layer 1 reads what layer 0's different pattern wrote).
    ratio = curves[1].points[0].layers[0].score_std / curves[0].points[0].layers[0].score_std
    assert ratio == pytest.approx(math.sqrt(8), rel=1e-3)
