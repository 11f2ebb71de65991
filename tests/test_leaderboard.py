"""toylens leaderboard on a 5-model subset: every cell scored and stored, the pages written, a
rerun recomputes nothing, a user-registered method gets its row, and bad names exit 2."""

from __future__ import annotations

import json

import pytest

SUBSET = "or-across,and-across,chain-2,mlp-carries,tracr-hist"
PAIRS = "8"


def reversed_oracle(problem):
    """A deliberately bad method: the oracle's scores negated in rank (smallest effect first)."""
    from probes.circuits.leaderboard import oracle_method
    from probes.circuits.methods.attribution import EdgeScores

    scores = oracle_method(problem)
    return EdgeScores("reversed", scores.edges, 1.0 / (1e-3 + scores.score.abs()), scores.seconds)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    from probes.circuits.leaderboard import METHODS, register_method
    from toylens.console import main

    register_method("reversed", reversed_oracle, "the oracle's ranking upside down", replace=True)
    try:
        root = tmp_path_factory.mktemp("board")
        argv = [
            "leaderboard",
            "--models",
            SUBSET,
            "--methods",
            "oracle,eap,joint,reversed",
            "--ablations",
            "counterfactual",
            "--pairs",
            PAIRS,
            "--cells",
            str(root / "cells"),
            "--out",
            str(root / "out"),
        ]
        main(argv)
        stamps = {p.name: p.stat().st_mtime_ns for p in (root / "cells").glob("*__*.json")}
        main(argv)  # resumed: every cell is stored
        yield root, stamps
    finally:
        METHODS.pop("reversed", None)


def cells(root):
    return [json.loads(p.read_text()) for p in sorted((root / "cells").glob("*__*.json"))]


def test_every_cell_is_stored_and_a_rerun_recomputes_none(board):
    root, stamps = board
    assert len(stamps) == 5 * 4
    assert {p.name: p.stat().st_mtime_ns for p in (root / "cells").glob("*__*.json")} == stamps


def test_the_scores_match_what_the_constructions_make_them(board):
    root, _ = board
    by = {(c["model"], c["method"]): c for c in cells(root)}
    # An OR: the single-edge oracle cannot rank a branch; the joint search keeps exactly the truth.
    assert by["or-across", "oracle"]["auroc"] < 0.95
    joint = by["or-across", "joint"]
    assert joint["auroc"] == 1.0 and joint["precision"] == joint["recall"] == 1.0 and joint["circuit_from"] == "kept"
    assert by["chain-2", "oracle"]["auroc"] == 1.0 and by["chain-2", "oracle"]["smallest"] == 3
    assert by["chain-2", "reversed"]["auroc"] < 0.5  # the user's bad method is graded as bad
    for cell in by.values():
        assert cell["truth_faithfulness"] == pytest.approx(1.0, abs=1e-3), cell["model"]
        assert cell["wall_s"] >= 0 and cell["cpu_s"] >= 0 and cell["pairs"] == int(PAIRS)


def test_the_pages_hold_every_model_and_the_user_method_row(board):
    root, _ = board
    text = (root / "out" / "leaderboard.md").read_text()
    html = (root / "out" / "leaderboard.html").read_text()
    assert "| reversed | counterfactual | 5 |" in text
    for model in SUBSET.split(","):
        assert f"| {model} |" in text and f"<td>{model}</td>" in html
    assert 'class="sortable"' in html and "0 of 20 cells computed" in text
    # The calibration: the oracle on the models without redundancy (or-across left out, named as such).
    assert "counterfactual: 4 of 4 at 1.000" in text and "Left out: the 1 models with redundancy (or-across)" in text
    # tracr-hist: 2 of its 6 true edges unidentifiable under same-length pairs; its circuit certified on its 243 inputs.
    by = {(c["model"], c["method"]): c for c in cells(root)}
    assert by["tracr-hist", "oracle"]["unidentifiable"] == 2 and by["tracr-hist", "oracle"]["certified_inputs"] == 243
    assert by["chain-2", "oracle"]["certified"] is None and " of 243 |" in text


def test_the_relation_labels_are_graded_on_the_gate_models_and_stored(board):
    root, _ = board
    text = (root / "out" / "leaderboard.md").read_text()
    assert "name 4 of the 4 planted relations (OR 1/1, AND 1/1, SERIES 1/1, CARRIES 1/1)" in text
    assert "| or-across | OR | L0H0, L1H0 | yes | or: L0H0 \\| L1H0 | yes |" in text  # the | escaped in a cell
    assert "| chain-2 | SERIES | L0H0, L1H0 | yes | series: L0H0 -> L1H0 | - |" in text
    assert sorted(p.name for p in (root / "cells").glob("*.relations.json")) == [
        f"{m}.relations.json" for m in sorted(("or-across", "and-across", "chain-2", "mlp-carries"))
    ]


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.isolated)])
def test_workers_compute_the_cells_this_process_does(board, tmp_path, executor):
    """--jobs 2 on the local pool and on a local Ray instance: one job per model, the same cells as
    the board's in-process ones (every number but the times) and the same relation grades."""
    if executor == "ray":
        pytest.importorskip("ray")
    from toylens.console import main

    root, _ = board
    models = ["or-across", "tracr-hist"]
    out = tmp_path / "cells"
    main(
        ["leaderboard", "--models", ",".join(models), "--methods", "oracle,joint", "--ablations", "counterfactual"]
        + ["--pairs", PAIRS, "--cells", str(out), "--out", str(tmp_path / "out"), "--no-progress"]
        + ["--executor", executor, "--jobs", "2"]
    )

    def numbers(folder):
        return {
            p.name: {k: v for k, v in json.loads(p.read_text()).items() if k not in ("wall_s", "cpu_s")}
            for p in folder.glob("*.json")
            if p.name.split("__")[0].removesuffix(".relations.json") in models
            and "__reversed__" not in p.name
            and "__eap__" not in p.name
        }

    assert numbers(out) == numbers(root / "cells") and len(numbers(out)) == 2 * 2 + 1


def logic_saying(*relations):
    from types import SimpleNamespace

    return SimpleNamespace(relations=relations)


def found(kind, members, alone, together=1.0):
    from probes.circuits.interactions import Interval
    from probes.circuits.relation_classes import Relation

    at = lambda v: Interval(v, v, v)  # noqa: E731
    return Relation(kind, members, at(together), tuple(map(at, alone)), (), None, 16, 16, 16)


def test_a_relation_is_named_only_by_its_own_kind_over_exactly_its_components():
    """The grading refuses an OR read as an AND, a partial OR read as an exact OR or an AND, an AND
    over other heads, an additive pair read as an AND, a borderline word, and a chain in the wrong
    order."""
    from models.graph import Head
    from probes.circuits.relation_classes import Kind as R
    from probes.circuits.truth.gates import Kind, Relation
    from probes.circuits.truth.relations import grade_logic

    a, b = Head(0, 0), Head(1, 0)

    def named(kind, alone, *relations):
        return grade_logic("m", Relation(kind, (a, b), alone, alone), logic_saying(*relations)).named

    assert named(Kind.OR, (1.0, 1.0), found(R.OR, (a, b), (1.0, 1.0)))
    assert not named(Kind.OR, (1.0, 1.0), found(R.AND, (a, b), (1.0, 1.0)))
    assert named(Kind.PARTIAL_OR, (1.0, 0.5), found(R.OVERLAP, (a, b), (1.0, 0.5)))
    assert not named(Kind.PARTIAL_OR, (1.0, 0.5), found(R.OR, (a, b), (1.0, 1.0)))
    assert not named(Kind.PARTIAL_OR, (0.7, 0.7), found(R.AND, (a, b), (0.7, 0.7)))
    assert named(Kind.AND, (0.0, 0.0), found(R.AND, (a, b), (0.0, 0.0)))
    assert not named(Kind.AND, (0.0, 0.0), found(R.AND, (a, Head(1, 1)), (0.0, 0.0)))
    assert named(Kind.ADDITIVE, (0.6, 0.4), found(R.ADDITIVE, (a, b), (0.6, 0.4)))
    assert not named(Kind.ADDITIVE, (0.6, 0.4), found(R.AND, (a, b), (0.6, 0.4)))
    assert not named(Kind.ADDITIVE, (0.6, 0.4), found(R.BORDERLINE, (a, b), (0.6, 0.4)))
    assert named(Kind.SERIES, (0.0, 0.0), found(R.SERIES, (a, b), (0.0, 0.0)))
    assert not named(Kind.SERIES, (0.0, 0.0), found(R.SERIES, (b, a), (0.0, 0.0)))
    wrong_shares = grade_logic(
        "m", Relation(Kind.OR, (a, b), (1.0, 1.0), (1.0, 1.0)), logic_saying(found(R.OR, (a, b), (1.0, 0.7)))
    )
    assert wrong_shares.named and wrong_shares.shares is False


def test_a_plugin_module_registers_a_method(tmp_path, monkeypatch, capsys):
    from probes.circuits.leaderboard import METHODS
    from toylens.leaderboard import main

    (tmp_path / "my_method.py").write_text(
        "from probes.circuits.leaderboard import register_method, eap_method\n"
        "register_method('mine', eap_method, 'a user method', replace=True)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        main(["--plugin", "my_method", "--list"])
        assert "mine (a user method)" in capsys.readouterr().out
    finally:
        METHODS.pop("mine", None)


@pytest.mark.parametrize(
    "argv, named",
    [
        (["--models", "nope"], "unknown model nope"),
        (["--methods", "eap,nope"], "unknown method nope"),
        (["--ablations", "resample"], "unknown ablation resample"),
        (["--plugin", "no_such_module_x"], "--plugin no_such_module_x"),
    ],
)
def test_bad_names_exit_2_with_one_line(argv, named, capsys, tmp_path):
    from toylens.leaderboard import main

    with pytest.raises(SystemExit) as stop:
        main([*argv, "--cells", str(tmp_path / "c"), "--out", str(tmp_path / "o")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1


def test_registry_names_are_the_built_models_names_and_a_duplicate_method_is_refused():
    from common.cli import UsageError
    from probes.circuits.leaderboard import register_method, truth_models

    for name, entry in truth_models().items():
        if entry.family != "tracr":
            assert entry.build(4, 0).name == name
    with pytest.raises(UsageError, match="already registered"):
        register_method("eap", lambda p: None)


def test_mean_ablation_averages_both_runs_so_a_gate_model_has_a_gap_and_the_masks_learn():
    """Over the clean inputs alone every gate word is positive: the mean write is the clean write,
    the gap 0, every score NaN. Catches also the masks backpropagating into the mean writes twice."""
    import math

    from probes.ablation import Ablation
    from probes.circuits.leaderboard import METHODS, score_cell, truth_models

    truth = truth_models()["and-across"].build(8, 0)
    cell = score_cell(truth, METHODS["masks"], Ablation.MEAN, 0)
    assert not math.isnan(cell.auroc) and cell.truth_faithfulness == pytest.approx(1.0, abs=1e-3)
