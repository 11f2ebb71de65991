"""The public API (`toylens`) is enough to write a plugin and to probe a model from a notebook, and
the plugin guide and example use nothing else."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import toylens
from toylens import Batch, Example, ModelSpec, Task, UsageError

REPO = Path(__file__).resolve().parents[1]
IMPORT = re.compile(r"^\s*(?:from|import)\s+(models|tasks|probes|common)\b", re.M)


@dataclass(frozen=True)
class CopyParams:
    examples: int = 40


class CopyFirst(Task):
    """Repeat the first token after a marker: `a b c = a`."""

    name, Params = "copyfirst", CopyParams

    def vocabulary(self) -> list[str]:
        return ["a", "b", "c", "d", "="]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng = random.Random(seed)

        def example():
            first, other = rng.sample(range(4), 2)
            tokens = (first, other, other, 4, first)
            return Example(tokens, (3,), (other,), "all", (other, other, other, 4, other))

        return {split: [example() for _ in range(self.params.examples)] for split in ("train", "validation", "heldout")}

    def default_models(self) -> dict[str, ModelSpec]:
        return {"attn-only-1x2": ModelSpec(n_layers=1, d_model=16, n_heads=2, mlp=False, norm=None)}


def test_every_public_name_resolves():
    import importlib

    for name in toylens.__all__:
        # The very object its home module defines, not a stand-in or a wrapper.
        home = toylens if name == "load_run" else importlib.import_module(toylens._SOURCES[name])
        assert getattr(toylens, name) is vars(home)[name], name
    with pytest.raises(AttributeError, match="no public name"):
        toylens.internal_helper  # noqa: B018


def test_a_plugin_built_on_the_public_api_is_probed_through_it():
    task = CopyFirst()
    data = task.generate(0)["heldout"]
    spec = ModelSpec(**{**task.default_models()["attn-only-1x2"].__dict__, "n_ctx": 8, "d_vocab": len(task.vocabulary())})
    model = toylens.build_model(spec, seed=0)
    batch = Batch.from_tokens([e.tokens for e in data], [e.positions for e in data],
                              foils=[e.foils for e in data], counterfactual=[e.counterfactual for e in data])
    assert batch.answers.tolist() == [e.tokens[4] for e in data]

    ablated = toylens.ablate(model, batch, [toylens.Head(0, 1)], method="zero")
    assert ablated.heads == ("L0H1",)
    baseline = toylens.ablate(model, batch, [], method="zero")
    assert ablated.logit_diff != pytest.approx(baseline.logit_diff)   # the head does write to the answer

    patching = toylens.activation_patching(model, batch)
    assert isinstance(patching, toylens.ActivationPatching)
    assert patching.clean.metric != pytest.approx(patching.corrupt.metric)


def test_batch_from_tokens_refuses_an_answer_past_the_end():
    with pytest.raises(UsageError, match="scored positions"):
        Batch.from_tokens([[1, 2, 3]], [[2]])


@pytest.mark.parametrize("path", ["docs/plugins.md", "examples/toylens-firstmark/firstmark.py"])
def test_the_plugin_guide_and_example_import_only_the_public_api(path):
    text = (REPO / path).read_text()
    assert "from toylens import" in text
    assert not IMPORT.findall(text), IMPORT.findall(text)


def test_the_plugin_guide_code_defines_a_task():
    guide = (REPO / "docs/plugins.md").read_text()
    code = re.search(r"```python\n(.*?)```", guide, re.S)[1]
    namespace: dict = {}
    exec(compile(code, "docs/plugins.md", "exec"), namespace)  # noqa: S102 -- our own guide's code
    assert issubclass(namespace["MyTask"], Task)
    with pytest.raises(UsageError, match="at least 10"):
        namespace["MyTask"](namespace["MyParams"](examples=3))


def test_layers_only_look_down():
    """models <- tasks <- probes <- toylens: no module imports a layer above its own (the only
    exceptions are the `python -m` entry shims, which hand over to the command layer)."""
    above = {"common": ("models", "tasks", "probes", "toylens"), "models": ("tasks", "probes", "toylens"),
             "tasks": ("probes", "toylens"), "probes": ("toylens",)}
    shims = {"tasks/winograd.py", "tasks/induction.py", "probes/circuit.py", "probes/scaling.py", "probes/ladder.py",
             "probes/positions.py"}
    for layer, forbidden in above.items():
        for path in (REPO / layer).glob("*.py"):
            rel = str(path.relative_to(REPO))
            if path.name == "__main__.py":
                continue
            text = path.read_text()
            if rel in shims:
                text = text.split('if __name__ == "__main__":')[0]
            bad = re.findall(rf"^\s*(?:from|import)\s+({'|'.join(forbidden)})\b", text, re.M)
            assert not bad, f"{rel} imports {bad}"
