"""probes.chapter.params: the chapter's formula against parameters counted on a built model."""

from __future__ import annotations

import pytest

from models import ModelSpec, UsageError
from models.checkpoint import FORMAT
from probes.chapter.params import count_parameters, formula_counts, spec_from_args

SPECS = [
    ModelSpec(n_layers=1, d_model=64, n_heads=4, d_vocab=10, n_ctx=8),
    ModelSpec(n_layers=2, d_model=32, n_heads=1, mlp=False, d_vocab=12, n_ctx=16),
    ModelSpec(n_layers=2, d_model=48, n_heads=3, norm=None, d_vocab=7, n_ctx=5),
    ModelSpec(n_layers=1, d_model=32, n_heads=2, mlp=False, norm=None, positions="rotary", d_vocab=9, n_ctx=6),
    ModelSpec(n_layers=3, d_model=16, n_heads=2, attention="uniform", positions="none", d_vocab=5, n_ctx=4),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"L{s.n_layers}d{s.d_model}mlp{s.mlp}{s.norm}{s.positions}")
def test_formula_equals_counted_per_component(spec):
    result = count_parameters(spec)
    assert result.counted == formula_counts(spec)
    assert result.total == result.formula_total
    assert result.tied_total == result.total - spec.d_vocab * spec.d_model


def test_meta_count_equals_a_real_build():
    from models import build_model

    spec = SPECS[0]
    real = sum(p.numel() for p in build_model(spec).parameters())
    assert count_parameters(spec).total == real


def test_frozen_parameters_of_the_uniform_no_position_variant():
    spec = SPECS[4]
    d = spec.d_model
    assert count_parameters(spec).frozen == spec.n_layers * (d * d + d) + spec.n_ctx * d


def test_gpt2_small_shape():
    result = count_parameters(spec_from_args(["gpt2"]))
    assert result.tied_total == 124_439_808
    assert result.per_block_counted == 12 * 768**2 + 13 * 768
    assert result.mlp_share_of_block == pytest.approx(2 / 3, abs=0.001)
    assert result.buffers == {"unembed.bias": 50257}  # TL's zero bias: a buffer, not a parameter


def test_spec_from_key_values():
    spec = spec_from_args(["n_layers=2", "d_model=64", "mlp=false", "norm=none", "d_vocab=11"])
    assert (spec.n_layers, spec.d_model, spec.mlp, spec.norm, spec.d_vocab) == (2, 64, False, None, 11)
    for bad in (["d_model=x", "d_vocab=3"], ["nope=1"], ["d_model=64"], ["mlp=maybe", "d_vocab=3"]):
        with pytest.raises(UsageError):
            spec_from_args(bad)


def test_spec_from_run_folder(tmp_path):
    from common.atomic import write_json
    from tasks.training.runs import run_sha256

    spec = SPECS[1]
    config = {
        "format": FORMAT,
        "spec": spec.to_dict(),
        "vocabulary": ["a"],
        "model_name": "m",
        "seed": 0,
        "task": {"name": "winograd", "params": {}},
        "training": {},
    }
    write_json(tmp_path / "config.json", {**config, "run_sha256": run_sha256(config)})  # a whole config.json
    assert spec_from_args([str(tmp_path)]) == spec
