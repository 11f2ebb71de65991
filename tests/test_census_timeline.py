"""When a sweep's final mechanism can be told (probes.circuits.mechanism_timeline): the step it is
predictable from, on synthetic seeds where the answer is known; timeline.json refused when it was
edited, forged, copied or its snapshots changed; a tiny sweep trained with snapshots writes it, and
a rerun traces the snapshots of a run that lacks it without retraining."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from common.cli import UsageError
from common.jsonfiles import canonical_sha256, sha256_file
from probes.circuits.labels import CircuitSummary, PathFacts, circuit_label
from probes.circuits.mechanism_timeline import (
    TIMELINE,
    SnapshotCircuit,
    mechanism_timeline,
    read_timeline,
    timeline_record,
)

Q = PathFacts("L0H0", "L1H0", "q", 14, "p14", 0.9, 1.0, 0.9)
K = PathFacts("L0H0", "L1H0", "k", 11, "p11", 0.8, 1.0, 0.8)


def summary(seed: int, path: PathFacts | None) -> CircuitSummary:
    """Facts naming Q- or K-composition (path given), or no circuit traced (None)."""
    if path is None:
        return CircuitSummary("attn-only-2x1", seed, 2, 0.5, note="gap too small")
    return CircuitSummary(
        "attn-only-2x1", seed, 2, 1.0, nodes=("L0H0@p14", "L1H0@p14"), edge=path, paths=(path,), faithfulness=0.95
    )


def entries(seed: int, paths: list) -> tuple[SnapshotCircuit, ...]:
    """One entry per 25 steps, the facts `paths` gives at each (the last is the final weights)."""
    return tuple(
        SnapshotCircuit(25 * i, f"snapshots/step{25 * i}.safetensors", "0" * 64, 1.0, summary(seed, p))
        for i, p in enumerate(paths)
    )


def test_predictable_from_the_step_where_nine_in_ten_seeds_name_their_final_mechanism():
    # 10 seeds, 8 steps each (0..175): seeds 0-8 name Q from step 75 on; seed 9 names K until
    # step 150, then Q. So agreement is 0 until 50, 9/10 from 75, 10/10 from 150.
    timelines = {seed: entries(seed, [None, None, None, Q, Q, Q, Q, Q]) for seed in range(9)}
    timelines[9] = entries(9, [None, K, K, K, K, K, Q, Q])
    t = mechanism_timeline(timelines, 25)
    assert [(r.step, r.agreeing) for r in t.steps] == [
        (0, 0),
        (25, 0),
        (50, 0),
        (75, 9),
        (100, 9),
        (125, 9),
        (150, 10),
        (175, 10),
    ]
    assert t.predictable_from == 75 and t.predictable_while_training == 75
    assert t.at(75).agree.low == pytest.approx(0.5958, abs=1e-3)  # Wilson 95% for 9/10
    assert t.settled == {**{seed: 75 for seed in range(9)}, 9: 150}
    assert t.first_traced == {**{seed: 75 for seed in range(9)}, 9: 25}  # seed 9 first traced K, then Q
    assert (t.first_traced_final.value, t.first_traced_final.n) == (0.9, 10)
    # one more seed that disagrees at 100 pulls the lasting agreement below 90% there: told from 125
    timelines[8] = entries(8, [None, None, None, Q, K, Q, Q, Q])
    assert mechanism_timeline(timelines, 25).predictable_from == 125


def test_never_predictable_when_the_early_mechanism_is_another_until_the_end():
    # Half the seeds name K until their last step, then Q: agreement is 50% until the last step,
    # where every seed is at its final weights (100% by construction, which does not count).
    timelines = {seed: entries(seed, [None, Q, Q, Q]) for seed in range(5)}
    timelines.update({seed: entries(seed, [None, K, K, Q]) for seed in range(5, 10)})
    t = mechanism_timeline(timelines, 25)
    assert [r.agree.value for r in t.steps] == [0.0, 0.5, 0.5, 1.0]
    assert t.predictable_from is None and t.predictable_while_training is None


def test_seeds_that_stopped_count_with_their_final_weights_and_are_kept_apart():
    # Seed 0 ends at step 50 (Q throughout from 25); seed 1 trains to 100, naming K until then.
    t = mechanism_timeline({0: entries(0, [None, Q, Q]), 1: entries(1, [None, K, K, K, Q])}, 25)
    row = t.at(75)
    assert (row.agreeing, row.stopped, row.agree.n) == (1, 1, 2)
    assert (row.training.n, row.training.value) == (1, 0.0)
    assert t.final_steps == {0: 50, 1: 100}


# ---- timeline.json: signed, tied to its run, its snapshots and circuit.json ---------------------


@pytest.fixture
def stored(tmp_path):
    """A run folder (as the census sees it) with two snapshots, final weights and its timeline.json."""
    run_dir = tmp_path / "default" / "attn-only-2x1" / "seed3"
    (run_dir / "snapshots").mkdir(parents=True)
    files = {0: "snapshots/step0.safetensors", 25: "snapshots/step25.safetensors", 50: "model.safetensors"}
    for step, name in files.items():
        (run_dir / name).write_bytes(f"weights at {step}".encode())
    config = {
        "run_sha256": "r" * 64,
        "weights_sha256": sha256_file(run_dir / "model.safetensors"),
        "model_name": "attn-only-2x1",
        "seed": 3,
        "training": {"snapshot_every": 25},
    }
    run = SimpleNamespace(path=run_dir, config=config, metrics={"steps": 50}, model_name="attn-only-2x1", seed=3)
    facts = [summary(3, None), summary(3, K), summary(3, Q)]
    record = timeline_record(
        [
            SnapshotCircuit(step, name, sha256_file(run_dir / name), 2.0, s)
            for (step, name), s in zip(files.items(), facts)
        ],
        config,
    )
    (run_dir / TIMELINE).write_text(json.dumps(record))
    return run, circuit_label(facts[-1])


def rewrite(run, edit, resign: bool) -> None:
    path = run.path / TIMELINE
    data = json.loads(path.read_text())
    edit(data)
    if resign:
        data["sha256"] = canonical_sha256({k: v for k, v in data.items() if k != "sha256"})
    path.write_text(json.dumps(data))


def test_a_stored_timeline_reads_back_as_written(stored):
    run, final = stored
    read = read_timeline(run, final)
    assert [e.step for e in read] == [0, 25, 50]
    assert [e.label.text for e in read] == ["no circuit traced", "K-composition L0H0->L1H0", "Q-composition L0H0->L1H0"]


def relabel_early(data):
    data["snapshots"][1]["circuit"]["paths"][0]["component"] = "q"


def relabel_final(data):
    data["snapshots"][2]["circuit"]["paths"][0]["component"] = "k"
    data["snapshots"][2]["circuit"]["edge"]["component"] = "k"


@pytest.mark.parametrize(
    "edit, resign, why",
    [
        (relabel_early, False, "sha256 differs"),  # an early step's mechanism edited
        (relabel_final, True, "names 'K-composition"),  # forged: final label against circuit.json's
        (lambda d: d.update(seed=4), True, "describes another run"),  # copied from another seed
        (lambda d: d["snapshots"].pop(1), True, None),  # a step removed: still checked, still agrees
        (lambda d: d["snapshots"].reverse(), True, "must rise from 0"),
        (lambda d: d["snapshots"][0].update(file="../../x"), True, "not a path inside the run folder"),
        (lambda d: d["snapshots"][1].update(gap=float("nan")), True, "gap must be a finite number"),
        (lambda d: d["snapshots"][1]["circuit"].pop("nodes"), True, None),
    ],
)
def test_an_edited_or_forged_timeline_is_refused_in_one_line(stored, edit, resign, why):
    run, final = stored
    rewrite(run, edit, resign)
    if why is None:  # a consistent record without that step or field: read, or one line
        try:
            read_timeline(run, final)
        except UsageError as error:
            assert "\n" not in str(error)
        return
    with pytest.raises(UsageError, match=why) as error:
        read_timeline(run, final)
    assert "\n" not in str(error.value)


def test_a_changed_snapshot_makes_its_timeline_unreadable(stored):
    run, final = stored
    (run.path / "snapshots" / "step25.safetensors").write_bytes(b"retrained")
    with pytest.raises(UsageError, match="missing or changed"):
        read_timeline(run, final)


def test_a_timeline_disagreeing_with_circuit_json_is_refused(stored):
    run, _ = stored
    with pytest.raises(UsageError, match="one was altered"):
        read_timeline(run, circuit_label(summary(3, K)))


def test_the_census_pages_state_the_step_and_its_interval(tmp_path):
    from probes.census import Census, group_census
    from probes.report.outputs.census import TIMELINE_FIGURE, markdown, summary_lines, write_census

    seeds = range(5, 15)  # past 9: as JSON keys, "10" sorts before "5"
    timelines = {seed: entries(seed, [None, None, Q, Q]) for seed in seeds}
    members = [
        (
            SimpleNamespace(seed=seed, metrics={"stop_reason": "validation solved", "accuracy": {"heldout": 1.0}}),
            "path",
            "Q-composition L0H0->L1H0",
            0.9,
        )
        for seed in seeds
    ]
    group = group_census("attn-only-2x1", "default", {}, members, 0, timeline=mechanism_timeline(timelines, 25))
    census = Census((group,), ())
    text = markdown(census, None, "census-timeline.png") + "\n".join(summary_lines(census))
    assert "told from step 50: 10/10 = 100% name their final mechanism there (95% CI [72%, 100%]" in text
    assert "| 25 | 0/10 | 0% [0%, 28%] | 0 |" in text
    assert (
        "10/10 = 100% of the seeds named their final mechanism (95% CI [72%, 100%]); that step came a median 25 "
        "steps before" in text
    )
    # census.json records the timeline (seeds as keys) and is signed as read back: a second census
    # replaces the first rather than calling it changed by hand
    write_census(census, tmp_path / "census")
    write_census(census, tmp_path / "census")
    assert (tmp_path / "census" / TIMELINE_FIGURE).stat().st_size > 0
    never = {seed: entries(seed, [None, K, Q]) for seed in range(4)}
    group = replace(group, timeline=mechanism_timeline(never, 25))
    assert "not predictable before the end" in "\n".join(summary_lines(Census((group,), ())))


# ---- a tiny sweep with snapshots --------------------------------------------------------------


class InProcess:
    """The sweep's executor interface, run in this process (a monkeypatch reaches the job)."""

    name = "in-process"

    def run(self, function, items, on_outcome, cost=None):
        from toylens.sweeps.executors import Outcome

        for item in items:
            on_outcome(item, Outcome(function(item)))


def test_a_sweep_with_snapshots_writes_the_timeline_and_a_rerun_traces_only_the_snapshots(tmp_path, monkeypatch):
    # 20 steps teach the tiny model nothing, so its final circuit is not traced and no run would
    # want a timeline: the rule is widened here to every run trained with snapshots, to reach the
    # plumbing (each step is then measured and named "no circuit traced", as circuit.json is).
    import probes.census
    import probes.circuits.mechanism_timeline as timeline
    from probes.census import take_census
    from tasks.winograd import WinogradTask
    from toylens.arguments import parse_seeds
    from toylens.sweeps.driver import run_sweep
    from toylens.sweeps.plan import parse_grid, plan_sweep

    widened = lambda config, final: bool(config["training"]["snapshot_every"])  # noqa: E731
    monkeypatch.setattr(timeline, "wants_timeline", widened)
    monkeypatch.setattr(probes.census, "wants_timeline", widened)
    out = tmp_path / "sweep"
    settings = {"max_steps": 20, "eval_every": 10, "batch_size": 32, "snapshot_every": 10}
    params = {"nouns": 8, "heldout_fraction": 0.5, "validation_fraction": 0.1, "leaky": False}
    runs = plan_sweep(
        WinogradTask,
        params,
        settings,
        ["attn-only-2x1"],
        parse_seeds("0-0"),
        parse_grid(["d_model=16"], WinogradTask),
        out,
    )
    first = run_sweep(runs, out, InProcess(), "test", progress=False, write=lambda line: None)
    run_dir = out / "d_model=16" / "attn-only-2x1" / "seed0"
    assert first.done == 1 and (run_dir / TIMELINE).is_file()
    (group,) = take_census(out).groups
    assert [r.step for r in group.timeline.steps] == [0, 10, 20] and group.timeline.runs == 1
    weights = (run_dir / "model.safetensors").stat().st_mtime_ns
    (run_dir / TIMELINE).unlink()
    assert take_census(out).groups[0].timeline.missing == (0,)
    said = []
    again = run_sweep(runs, out, InProcess(), "test", progress=False, write=said.append)
    assert (again.done, again.kept, again.snapshots_traced) == (0, 1, 1)
    assert any("tracing them (no retraining)" in line for line in said)
    assert (run_dir / "model.safetensors").stat().st_mtime_ns == weights and (run_dir / TIMELINE).is_file()
    assert take_census(out).groups[0].timeline.runs == 1


def json_values():
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True), st.text(max_size=8)
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
        max_leaves=6,
    )


def test_any_field_of_timeline_json_replaced_is_one_line_or_read(tmp_path_factory):
    """Every field, top-level, per step and in a step's circuit, replaced by any JSON value, with
    and without a recomputed checksum: read_timeline refuses in one line or reads it (never another
    exception: a field's wrong type must not reach the code as a KeyError or TypeError)."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    fields = [
        ("run_sha256",),
        ("seed",),
        ("snapshots",),
        ("snapshots", 1),
        ("snapshots", 1, "step"),
        ("snapshots", 1, "file"),
        ("snapshots", 1, "gap"),
        ("snapshots", 2, "circuit"),
        ("snapshots", 2, "circuit", "paths"),
        ("snapshots", 2, "circuit", "nodes"),
        ("snapshots", 2, "circuit", "edge"),
        ("snapshots", 2, "circuit", "paths", 0, "component"),
    ]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(where=st.sampled_from(fields), value=json_values(), resign=st.booleans())
    @example(where=("snapshots",), value=False, resign=False)  # a list field given a boolean
    @example(where=("snapshots",), value=1, resign=True)
    @example(where=("snapshots", 2, "circuit", "paths"), value=True, resign=True)
    def check(where, value, resign):
        run, final = stored.__wrapped__(tmp_path_factory.mktemp("fuzz"))

        def edit(data):
            for key in where[:-1]:
                data = data[key]
            data[where[-1]] = value

        rewrite(run, edit, resign)
        try:
            read_timeline(run, final)
        except UsageError as error:
            assert "\n" not in str(error)

    check()


def test_a_seed_whose_heads_are_relabelled_between_snapshots_does_not_switch():
    from tests.test_signature import two_block

    def step(i: int, heads: tuple[int, int]) -> SnapshotCircuit:
        facts = replace(summary(0, Q), signature=two_block(*heads))
        return SnapshotCircuit(25 * i, f"snapshots/step{25 * i}.safetensors", "0" * 64, 1.0, facts)

    relabelled = (step(0, (0, 1)), step(1, (1, 2)), step(2, (0, 3)))
    t = mechanism_timeline({0: relabelled}, 25)
    assert t.settled == {0: 0} and [r.agreeing for r in t.steps] == [1, 1, 1]
    # A real change (the layer-1 head reads MLP0 through its query) is still a switch.
    switched = (replace(relabelled[0], summary=replace(summary(0, Q), signature=two_block(0, 1, "q"))),) + relabelled[
        1:
    ]
    assert mechanism_timeline({0: switched}, 25).settled == {0: 25}
