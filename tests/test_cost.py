"""probes.chapter.cost: the exponent fit on synthetic timings, the fused path against the bridge's
attention, the profiler's peak on a known allocation, and a short real measurement."""

from __future__ import annotations

import pytest
import torch

from probes.chapter.cost import attention_layer, fit_exponent, measure_cost, peak_bytes, sdpa_forward, tl_forward


def test_fit_recovers_a_known_exponent():
    ns = [64, 128, 256, 512, 1024, 2048]
    exponent, _ = fit_exponent(ns, [3e-9 * n**1.91 for n in ns])
    assert exponent == pytest.approx(1.91, abs=1e-9)
    # The overhead-dominated short lengths are left out of the fit (n >= 256).
    noisy = [1.0, 1.0] + [2e-6 * n**2 for n in ns[2:]]
    assert fit_exponent(ns, noisy)[0] == pytest.approx(2.0, abs=1e-9)


def test_sdpa_path_computes_the_bridge_attention():
    attention = attention_layer(128)
    x = torch.randn(2, 96, 512, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(sdpa_forward(attention)(x), tl_forward(attention)(x), atol=1e-5, rtol=1e-5)


def test_peak_bytes_sees_a_known_allocation():
    def forward(x):
        big = torch.ones(1024, 1024)  # 4 MiB held while a second 4 MiB tensor is made
        return (big * 2).sum()

    assert 8 * 2**20 <= peak_bytes(forward, torch.zeros(1)) < 9 * 2**20


def test_short_measurement():
    result = measure_cost(max_len=256, budget=0.01, progress=False)
    tl, sdpa = result.curves
    assert [p.n for p in tl.points] == [64, 128, 256]
    assert result.score_matrix_bytes == 8 * 16384**2 * 4  # 8 GiB, the source's 8 GB
    # The bridge materialises [8, n, n] float32 scores (2 MiB at n = 256); the fused path never does.
    assert tl.points[-1].peak_bytes >= sdpa.points[-1].peak_bytes + 8 * 256**2 * 4
    assert result.max_output_difference < 1e-5
