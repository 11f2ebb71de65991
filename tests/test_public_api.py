"""The public API (`toylens`) is enough to write a plugin and to probe a model from a notebook, and
the plugin guide and example use nothing else."""

from __future__ import annotations

import ast
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


def test_type_checkers_see_every_public_name_where_it_is_imported_from():
    """The names are imported lazily, so type checkers and IDEs read them from the TYPE_CHECKING
    block instead: it must import exactly the names and homes the lazy imports use."""
    tree = ast.parse((REPO / "toylens" / "__init__.py").read_text())
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name}: `as` the same name marks it re-exported"
            seen[alias.name] = node.module
    assert seen == toylens._SOURCES


def test_a_plugin_built_on_the_public_api_is_probed_through_it():
    task = CopyFirst()
    data = task.generate(0)["heldout"]
    spec = ModelSpec(
        **{**task.default_models()["attn-only-1x2"].__dict__, "n_ctx": 8, "d_vocab": len(task.vocabulary())}
    )
    model = toylens.build_model(spec, seed=0)
    batch = Batch.from_tokens(
        [e.tokens for e in data],
        [e.positions for e in data],
        foils=[e.foils for e in data],
        counterfactual=[e.counterfactual for e in data],
    )
    assert batch.answers.tolist() == [e.tokens[4] for e in data]

    ablated = toylens.ablate(model, batch, [toylens.Head(0, 1)], method=toylens.Ablation.ZERO)
    assert ablated.heads == (toylens.Head(0, 1),) and ablated.label == "L0H1"
    baseline = toylens.ablate(model, batch, [], method=toylens.Ablation.ZERO)
    assert ablated.logit_diff != pytest.approx(baseline.logit_diff)  # the head does write to the answer

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


# The layers, lowest first; within probes: ReportSettings, then the primitive measurements, the
# circuit graph, the report (and the census, which counts the report's circuits), the chapter's
# experiments. A module may import its own layer or any below it.
LAYERS = ("common", "models", "tasks", "probes", "toylens")
# features sits beside circuits: it reuses their AUROC and Tracr ground truth, and the report may read it.
PROBES_LAYERS = {
    "settings": 0,
    "circuits": 2,
    "features": 2,
    "census": 3,
    "report": 3,
    "chapter": 4,
}  # other modules: 1


def layer_of(module: str) -> tuple[int, int]:
    top, _, rest = module.partition(".")
    if top != "probes" or not rest:
        return LAYERS.index(top), 0
    return LAYERS.index(top), PROBES_LAYERS.get(rest.split(".")[0], 1)


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in LAYERS:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def is_entry_guard(node) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(imported name, line) for every import in the file, at any depth (inside functions too),
    except those under `if __name__ == "__main__":` — a `python -m` entry shim hands over to the
    command layer there, which is the shim's whole purpose."""
    found = []

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if is_entry_guard(child):
                continue
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.extend((f"{child.module}.{alias.name}", child.lineno) for alias in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def import_graph() -> dict[str, dict[str, str]]:
    """module -> {imported project module: 'file:line'}; `__main__` files are entry shims."""
    modules, graph = project_modules(), {}
    for module, path in modules.items():
        if path.name == "__main__.py":
            continue
        arrows = graph.setdefault(module, {})
        for name, line in imports_of(path):
            parts = name.split(".")
            target = next(
                (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None
            )
            if target is not None and target != module:
                arrows.setdefault(target, f"{path.relative_to(REPO)}:{line}")
    return graph


def cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_layers_only_look_down():
    """common <- models <- tasks <- probes <- toylens, and within probes settings <- primitives <-
    circuits <- report/census <- chapter: no import, at any depth, reaches a layer above its own."""
    graph = import_graph()
    up = [
        f"{where}: {module} imports {target}"
        for module, arrows in graph.items()
        for target, where in arrows.items()
        if layer_of(target) > layer_of(module)
    ]
    assert not up, "\n".join(up)


def test_no_import_cycles():
    """No cycle among the project's modules, counting every import inside functions (which is where
    cycles hide: they import at call time, so nothing fails until a new caller changes the order)."""
    graph = import_graph()
    found = cycles(graph)
    detail = ["; ".join(f"{m} -> {t} ({graph[m][t]})" for m in c for t in graph[m] if t in c) for c in found]
    assert not found, "\n".join(detail)


def test_the_import_scanner_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import a\ndef f():\n    from b.c import d\nif __name__ == '__main__':\n    import e\n")
    assert imports_of(source) == [("a", 1), ("b.c.d", 3)]
    assert cycles({"x": {"y": ""}, "y": {"z": ""}, "z": {"x": ""}, "w": {"x": ""}}) == [["x", "y", "z"]]


def test_the_toylens_command_serves_every_command(capsys):
    import importlib
    from importlib.metadata import entry_points

    from toylens.console import COMMANDS, main

    assert [e.value for e in entry_points(group="console_scripts", name="toylens")] == ["toylens.console:main"]
    for command in COMMANDS.values():
        assert callable(importlib.import_module(command.module).main)
    main(["--help"])
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in COMMANDS)
    for name in ("report", "edges", "accuracy", "census"):
        with pytest.raises(SystemExit) as exited:
            main([name, "--help"])
        assert exited.value.code == 0 and "usage:" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["nope"])
    assert exited.value.code == 2 and "unknown command 'nope'" in capsys.readouterr().err
