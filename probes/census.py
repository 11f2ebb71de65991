"""`python -m probes.census SWEEP_DIR`: how often each circuit occurs, per model and grid point.

Counts the runs the sweep planned (its sweep.json), each checked before it is believed: its run
files (config.json, metrics.json, the weights' header), its settings against what the sweep planned
for it and its point.json, and its circuit.json against the run it describes (same run checksum,
weights, model, seed, depth and held-out accuracy). A run that fails a check is counted as
"unreadable" with its reason, never given another run's label. Every share is over the runs of its
(model, point) that finished, with a 95% Wilson interval. A run whose circuit was not named as a
path keeps its own label (what was found instead) and is counted, never dropped; a run with no
circuit.json (trained outside a sweep) is counted as "not traced". Runs under the folder that the
sweep did not plan are not counted: the census says how many it found and where. Needs no torch.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from common.cli import UsageError
from common.jsonfiles import read_json
from common.stats import Interval, mean_interval, wilson
from probes.circuits.labels import CIRCUIT, PATHS, SUMMARY_FIELDS, CircuitSummary, LabelKind, circuit_label
from tasks.settings import StopReason
from tasks.training.sweeps import (FAILED, FIX, POINT, PlannedGroup, SweepManifest, check_signed, differences,
                          identity_of, read_failed, read_manifest, read_point, signed)

NOT_TRACED = "not traced (no circuit.json)"
CENSUS_FILES = ("census.md", "census.png", "census.html")   # census.json records their checksums
CIRCUIT_FIX = "rerun the sweep: it trains and traces that run again"


@dataclass(frozen=True)
class Share:
    label: str
    count: int
    share: Interval       # count / finished runs of the group, Wilson 95%


@dataclass(frozen=True)
class GroupCensus:
    model_name: str
    point: str
    values: dict               # the grid point's values
    finished: int              # runs counted below
    failed: int                # runs that failed twice (failed.json): not in any share
    heldout: dict              # held-out accuracy over seeds: mean [t 95%], min, quartiles, max
    unsolved: Share            # runs whose validation was never solved (not "collapsed": the report keeps
                               # that word for its run-health flag, a constant output or train far below peers)
    never_learned: Share       # unsolved runs near two-candidate chance (probes.health), where the task names foils
    partly_learned: Share      # the other unsolved runs
    named: Share               # runs whose circuit the report names as a path
    circuits: tuple[Share, ...]  # every circuit label, most frequent first
    seeds: dict                # label -> seeds, so any share can be checked run by run
    path_recovered: dict       # label -> [min, median, max] share of the gap its runs' best path recovers
    unreadable: tuple = ()     # (seed, why) of planned runs whose files fail a check: not in any share
    not_finished: tuple = ()   # seeds planned but not finished (never run, or interrupted: rerun the sweep)


@dataclass(frozen=True)
class Census:
    groups: tuple[GroupCensus, ...]
    others: tuple[str, ...]    # what was found under the folder but not counted, one line each


# ---- circuit.json: a run's circuit, tied to the run it describes ------------------------------

CIRCUIT_FIELDS = {**SUMMARY_FIELDS, PATHS: list, "run_sha256": str, "weights_sha256": str}


def circuit_record(summary: CircuitSummary, config: dict) -> dict:
    """circuit.json for `summary` of the run whose config.json is `config`."""
    return signed({**summary.to_dict(), "run_sha256": config["run_sha256"], "weights_sha256": config["weights_sha256"]})


def read_circuit(run) -> CircuitSummary:
    """A run's circuit.json after its checks: types, checksum, and the run it describes is `run`."""
    path = run.path / CIRCUIT
    if not path.is_file():
        raise UsageError(f"{path} is not a file; {CIRCUIT_FIX}")
    data = check_signed(read_json(path, CIRCUIT_FIX), CIRCUIT_FIELDS, str(path), CIRCUIT_FIX,
                        nullable=("edge", "faithfulness"))
    recorded = {"run_sha256": data["run_sha256"], "weights_sha256": data["weights_sha256"], "model_name":
                data["model_name"], "seed": data["seed"], "n_layers": data["n_layers"], "heldout": data["heldout"]}
    actual = {"run_sha256": run.config["run_sha256"], "weights_sha256": run.config.get("weights_sha256"),
              "model_name": run.model_name, "seed": run.seed, "n_layers": run.spec.n_layers,
              "heldout": run.metrics["accuracy"]["heldout"]}
    differing = [key for key in recorded if recorded[key] != actual[key]]
    if differing:
        raise UsageError(f"{path} describes another run (different {', '.join(differing)}: copied from elsewhere, "
                         f"or left from before the run was retrained); {CIRCUIT_FIX}")
    try:
        return CircuitSummary.from_dict({key: data[key] for key in (*SUMMARY_FIELDS, PATHS)}, str(path), CIRCUIT_FIX)
    except TypeError:   # an edge lacking a field
        raise UsageError(f"{path}: edge lacks a field; {CIRCUIT_FIX}") from None


def read_label(run) -> tuple[LabelKind, str, float | None]:
    """(kind, label, share of the gap its best single path recovers, or None)."""
    if not (run.path / CIRCUIT).exists():
        return LabelKind.UNTRACED, NOT_TRACED, None
    summary = read_circuit(run)
    label = circuit_label(summary)
    return label.kind, label.text, summary.edge.strength if summary.edge else None


def heldout_distribution(values: list[float]) -> dict:
    if not values:
        return {}
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"mean": mean_interval(values).as_dict(), "min": min(values), "q1": quartiles[0],
            "median": quartiles[1], "q3": quartiles[2], "max": max(values), "n": len(values)}


# ---- which planned runs count ---------------------------------------------------------------

def checked_run(run_dir: Path, group: PlannedGroup, seed: int):
    """The finished run at `run_dir` with its label, after every check; UsageError naming the first
    that fails."""
    from tasks.training.runs import Run

    run = Run(run_dir)
    run.check()
    differing = differences(identity_of(run.config), group.identity) + (["seed"] if run.seed != seed else [])
    if differing:
        raise UsageError(f"{run_dir} was trained with other settings than the sweep planned (different "
                         f"{', '.join(differing)}: retrained or replaced after the sweep); rerun the sweep with "
                         "--overwrite for it")
    return (run, *read_label(run))


def group_members(root: Path, group: PlannedGroup, point_error: str | None, others: list):
    """(finished members, failed count, unreadable (seed, why), not finished seeds) of a planned group."""
    from tasks.training.runs import METRICS

    members, failed, unreadable, not_finished = [], 0, [], []
    for seed in group.seeds:
        run_dir = root / group.point / group.model_name / f"seed{seed}"
        try:
            if point_error:
                raise UsageError(point_error)
            if (run_dir / METRICS).exists():
                members.append(checked_run(run_dir, group, seed))
                if (run_dir / FAILED).exists():
                    others.append(f"{run_dir / FAILED} lies beside a finished run: left from an earlier attempt, "
                                  "not counted as a failure")
            elif (run_dir / FAILED).exists():
                read_failed(run_dir)
                failed += 1
            else:
                not_finished.append(seed)
        except UsageError as error:
            unreadable.append((seed, str(error)))
    return members, failed, tuple(unreadable), tuple(not_finished)


def point_check(root: Path, point: str, values: dict) -> str | None:
    """Why the point's point.json cannot be believed (None: it can), read once per point."""
    try:
        recorded = read_point(root / point)
    except UsageError as error:
        return str(error)
    except FileNotFoundError:
        return f"{root / point / POINT} is missing; {FIX}"
    if recorded != values:
        return (f"{root / point / POINT} records grid values {json.dumps(recorded)}, but the sweep planned "
                f"{json.dumps(values)} there; {FIX}")
    return None


def unplanned_runs(root: Path, manifest: SweepManifest) -> list[str]:
    from models.checkpoint import CONFIG

    planned = manifest.run_dirs(root)
    found = sorted(p.parent for p in root.rglob(CONFIG) if p.parent not in planned)
    if not found:
        return []
    return [f"{len(found)} run folder(s) under {root} that this sweep did not plan, not counted (e.g. {found[0]}: "
            "trained into this folder by another command)"]


def take_census(runs_dir: Path) -> Census:
    root = Path(runs_dir)
    manifest = read_manifest(root)
    others = unplanned_runs(root, manifest)
    points = {g.point: point_check(root, g.point, g.values) for g in manifest.groups}
    groups = []
    for group in manifest.groups:
        members, failed, unreadable, not_finished = group_members(root, group, points[group.point], others)
        groups.append(group_census(group.model_name, group.point, group.values, members, failed, unreadable,
                                   not_finished))
    if not any(g.finished or g.unreadable for g in groups):
        raise UsageError(f"{root} holds no finished runs of its sweep yet; run the sweep (see each run's "
                         f"{FAILED} for runs that failed)")
    return Census(tuple(groups), tuple(others))


def group_census(model: str, point: str, values: dict, members: list, failed: int, unreadable: tuple = (),
                 not_finished: tuple = ()) -> GroupCensus:
    n = len(members)
    counts = Counter(label for _, _, label, _ in members)
    seeds, recovered = defaultdict(list), defaultdict(list)
    for run, _, label, path_share in members:
        seeds[label].append(run.seed)
        if path_share is not None:
            recovered[label].append(path_share)
    unsolved = [run for run, _, _, _ in members if run.metrics["stop_reason"] != StopReason.SOLVED]
    never = [run for run in unsolved if near_chance(run)]
    partly = [run for run in unsolved if run not in never]
    named = sum(kind == LabelKind.PATH for _, kind, _, _ in members)
    return GroupCensus(
        model_name=model, point=point, values=values, finished=n, failed=failed,
        heldout=heldout_distribution([float(run.metrics["accuracy"]["heldout"]) for run, _, _, _ in members]),
        unsolved=Share("unsolved (validation never solved)", len(unsolved), wilson(len(unsolved), n)),
        never_learned=Share(f"never learned (unsolved, near chance{accuracy_range(never)})", len(never),
                            wilson(len(never), n)),
        partly_learned=Share(f"partly learned (unsolved, above chance{accuracy_range(partly)})", len(partly),
                             wilson(len(partly), n)),
        named=Share("circuit named as a path", named, wilson(named, n)),
        circuits=tuple(Share(label, count, wilson(count, n)) for label, count in counts.most_common()),
        seeds={label: sorted(s) for label, s in seeds.items()},
        path_recovered={label: [min(v), statistics.median(v), max(v)] for label, v in recovered.items()},
        unreadable=unreadable, not_finished=not_finished)


def near_chance(run) -> bool:
    """Held-out accuracy within ReportSettings.chance_margin of two-candidate chance, for a task whose
    held-out scored positions all name a foil (else chance is not known and nothing is near it)."""
    from probes.health import TWO_CANDIDATES
    from probes.settings import DEFAULT

    heldout = (run.metrics.get("evaluation", {}).get("splits", {}).get("heldout", {})
               if isinstance(run.metrics.get("evaluation"), dict) else {})
    foil_rate = heldout.get("foil_rate") if isinstance(heldout, dict) else None
    if not isinstance(foil_rate, (int, float)):   # stored as null: the task names no foils
        return False
    return float(run.metrics["accuracy"]["heldout"]) <= TWO_CANDIDATES + DEFAULT.chance_margin


def accuracy_range(runs: list) -> str:
    """': held-out 73%-81%' over `runs`, or '' when there are none."""
    if not runs:
        return ""
    values = sorted(float(run.metrics["accuracy"]["heldout"]) for run in runs)
    return f": held-out {values[0]:.0%}" + (f"-{values[-1]:.0%}" if values[-1] != values[0] else "")


# ---- rendering -----------------------------------------------------------------------------

def share_text(share: Share) -> str:
    i = share.share
    return f"{share.count}/{i.n} = {i.value:.0%} [{i.low:.0%}, {i.high:.0%}]"


def not_counted(g: GroupCensus) -> str:
    parts = [f"{g.failed} failed twice"] + ([f"{len(g.unreadable)} unreadable"] if g.unreadable else []) + \
            ([f"{len(g.not_finished)} not finished"] if g.not_finished else [])
    return ", ".join(parts)


def summary_lines(census: Census) -> list[str]:
    lines = []
    for g in census.groups:
        h = g.heldout
        if not g.finished:
            lines.append(f"{g.model_name} @ {g.point}: no finished runs ({not_counted(g)})")
        else:
            lines.append(f"{g.model_name} @ {g.point}: {g.finished} runs ({not_counted(g)}); held-out median "
                         f"{h['median']:.1%} (min {h['min']:.1%}); {share_text(g.unsolved)} unsolved "
                         f"({g.never_learned.count} never learned, {g.partly_learned.count} partly); "
                         f"{share_text(g.named)} named as a path")
        lines += [f"  {share_text(s)}  {s.label}" for s in g.circuits]
        lines += [f"  unreadable, not counted: seed {seed}: {why}" for seed, why in g.unreadable]
    return lines + [f"also found: {line}" for line in census.others]


def intro() -> str:
    from probes.settings import DEFAULT

    return ("Per model and grid point, over the runs of the sweep that finished: each share is count / finished runs "
            "with a 95% Wilson interval. A circuit is named as a path only as the report names it: a path patch, the "
            f"sender's write at every position or at one position, recovers at least {DEFAULT.path_claim:.0%} of the clean - counterfactual gap "
            "(0 = the path alone restores nothing, 1 = all of it); other runs are labelled by what was found. "
            "Unsolved: validation never solved (stopped stalled or out of budget); of those, never learned: held-out "
            f"accuracy within {DEFAULT.chance_margin:.0%} of the 50% of picking the answer or the foil at random (tasks "
            "that name foils), partly learned: the rest. A label names a mechanism (its paths' components and heads), "
            "never positions or tokens, so one mechanism over seeds is one row. Held-out accuracy: the "
            "task's held-out split. Unreadable: a run whose files fail a check (listed with the reason, not "
            "counted).")


def markdown(census: Census, figure: str | None) -> str:
    out = ["# Circuit census", "", intro(), ""]
    if figure:
        out += [f"![mechanism share per grid point]({figure})", ""]
    for g in census.groups:
        h = g.heldout
        out += [f"## {g.model_name} @ {g.point}", "",
                f"grid values: {json.dumps(g.values) if g.values else '(none)'}; {g.finished} finished runs, "
                f"{not_counted(g)} (not counted)", ""]
        out += [f"- unreadable, seed {seed}: {why}" for seed, why in g.unreadable] + ([""] if g.unreadable else [])
        if not g.finished:
            continue
        out += [f"held-out accuracy over seeds: mean {h['mean']['value']:.1%} [{h['mean']['low']:.1%}, "
                f"{h['mean']['high']:.1%}] (t 95%), min {h['min']:.1%}, quartiles {h['q1']:.1%} / "
                f"{h['median']:.1%} / {h['q3']:.1%}, max {h['max']:.1%}", "",
                "| circuit | runs | share [95% CI] | best path recovers (min / median / max) | seeds |",
                "|---|---|---|---|---|"]
        for s in (*g.circuits, g.named, g.unsolved, g.never_learned, g.partly_learned):
            seeds = ", ".join(map(str, g.seeds.get(s.label, []))) or "-"
            path = " / ".join(f"{v:.0%}" for v in g.path_recovered.get(s.label, [])) or "-"
            i = s.share
            out.append(f"| {s.label} | {s.count}/{i.n} | {i.value:.1%} [{i.low:.1%}, {i.high:.1%}] | {path} | {seeds} |")
        out.append("")
    if census.others:
        out += ["## Found but not counted", ""] + [f"- {line}" for line in census.others] + [""]
    return "\n".join(out)


def draw(census: Census, path: Path) -> None:
    """Stacked bars: per (point, model), each circuit label's share of the finished runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    rows = [{"group": f"{g.model_name}\n{g.point}", "label": s.label, "share": s.share.value}
            for g in census.groups for s in g.circuits]
    fig, ax = plt.subplots(figsize=(1.2 * len({row["group"] for row in rows}) + 3, 4.5))
    if rows:
        wide = pd.DataFrame(rows).pivot_table(index="group", columns="label", values="share", fill_value=0, sort=False)
        wide.plot(kind="bar", stacked=True, ax=ax, width=0.7, colormap="tab20")
        ax.legend(title="circuit", fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.text(0.5, 0.5, "no finished run could be counted (see census.md)", ha="center", transform=ax.transAxes)
    ax.set_ylabel("share of finished runs (0 = none, 1 = all)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=0)
    ax.set_title("circuit share per model and grid point", fontsize=10)
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)


def census_html(census: Census, figure: Path | None) -> str:
    """census.md's tables as one self-contained page (sortable tables, the figure inline)."""
    from common.html import escape, image_uri, page, table

    body = [f'<p class="note">{escape(intro())}</p>']
    if figure is not None:
        body.append(f'<img alt="circuit share per model and grid point" src="{image_uri(figure)}">')
    for g in census.groups:
        h = g.heldout
        if not g.finished:
            body.append(f"<h2>{escape(g.model_name)} @ {escape(g.point)}</h2>"
                        f'<p class="note">no finished runs ({escape(not_counted(g))})</p>')
            continue
        body.append(f"<h2>{escape(g.model_name)} @ {escape(g.point)}</h2>"
                    f'<p class="note">grid values: {escape(json.dumps(g.values) if g.values else "(none)")}; '
                    f"{g.finished} finished runs, {g.failed} failed twice (not counted); held-out accuracy over seeds: "
                    f"mean {h['mean']['value']:.1%} [{h['mean']['low']:.1%}, {h['mean']['high']:.1%}] (t 95%), "
                    f"min {h['min']:.1%}, median {h['median']:.1%}, max {h['max']:.1%}</p>")
        rows = [[s.label, s.count, s.share.n, f"{s.share.value:.1%}", f"[{s.share.low:.1%}, {s.share.high:.1%}]",
                 " / ".join(f"{v:.0%}" for v in g.path_recovered.get(s.label, [])) or "-",
                 ", ".join(map(str, g.seeds.get(s.label, []))) or "-"] for s in (*g.circuits, g.named, g.unsolved)]
        body.append(table(["circuit", "runs", "of", "share", "95% CI", "best path recovers (min / median / max)",
                           "seeds"], rows))
    return page("Circuit census", "".join(body))


# ---- the census folder: written whole, replaced only while unchanged ---------------------------

CENSUS_JSON = "census.json"
CENSUS_FIX = "move the census folder away (toylens never replaces a file it cannot prove it wrote unchanged)"


def check_census_folder(out: Path) -> None:
    """Refuse, before any work, to replace a census folder unless each of its files is the one the
    last census wrote (census.json records their SHA-256 and its own): a file recreated or edited
    since is the user's now."""
    from common.jsonfiles import sha256_file

    out = Path(out)
    present = [name for name in (CENSUS_JSON, *CENSUS_FILES) if (out / name).exists()]
    if not present:
        return
    if CENSUS_JSON not in present:
        raise UsageError(f"{out} holds {present[0]} but no {CENSUS_JSON} recording what toylens wrote; {CENSUS_FIX}")
    data = check_signed(read_json(out / CENSUS_JSON, CENSUS_FIX), {"groups": object, "others": list, "files": dict},
                        str(out / CENSUS_JSON), CENSUS_FIX)
    for name in present[1:]:
        if not (out / name).is_file() or sha256_file(out / name) != data["files"].get(name):
            raise UsageError(f"{out / name} was changed or replaced after the census wrote it; {CENSUS_FIX}")


def write_census(census: Census, out: Path) -> Path:
    from common.atomic import atomic_write, publish_folder, staging, write_json
    from common.jsonfiles import sha256_file
    from common.ownership import check_publishable

    out = Path(out)
    check_census_folder(out)
    check_publishable(out, "census folder")
    with staging(out) as staged:
        atomic_write(staged / "census.png", lambda temp: draw(census, Path(temp)))
        text = markdown(census, "census.png") + "\n"
        atomic_write(staged / "census.md", lambda temp: Path(temp).write_text(text))
        page = census_html(census, staged / "census.png")
        atomic_write(staged / "census.html", lambda temp: Path(temp).write_text(page))
        files = {name: sha256_file(staged / name) for name in CENSUS_FILES}
        write_json(staged / CENSUS_JSON, signed({"groups": [asdict(g) for g in census.groups],
                                                 "others": list(census.others), "files": files}))
        publish_folder(staged, out)
    return out / "census.md"


def check_census_files(runs_dir: Path, out: Path | None = None) -> None:
    """Refuse, before any work (a sweep checks before training), a record the census would count
    that is malformed or that toylens did not write (a user's failed.json), or a census file it
    would replace that is the user's (a census.md toylens wrote, deleted, and saved again by hand)."""
    from common.ownership import not_ours, owned

    check_census_folder(Path(out or Path(runs_dir) / "census"))
    for path in sorted(Path(runs_dir).rglob(FAILED)) if Path(runs_dir).is_dir() else []:
        if not owned(path):
            raise not_ours(path)


def census_command(runs_dir: Path, out: Path | None = None) -> None:
    from common.lock import folder_lock

    if not Path(runs_dir).is_dir():
        raise UsageError(f"sweep folder {runs_dir} does not exist; run a sweep first, e.g. "
                         "python -m tasks.winograd sweep --out runs/sweeps/winograd")
    out = Path(out or Path(runs_dir) / "census")
    with folder_lock(runs_dir, "sweep folder"), folder_lock(out.parent, "census's parent folder"):
        census = take_census(runs_dir)
        written = write_census(census, out)
    print("\n".join(summary_lines(census)))
    print(f"\nwrote {written} and {written.with_suffix('.html').name}")


def main(argv=None) -> None:
    from common.cli import folder_path

    from common.cli import Parser, run_cli

    parser = Parser(prog="python -m probes.census",
                    description="Count the circuits of a sweep's runs per model and grid point, with 95% intervals.")
    parser.add_argument("runs_dir", type=folder_path, help="a sweep folder (e.g. runs/sweeps/winograd)")
    parser.add_argument("--out", type=folder_path, default=None, help="where census.md/json/png go (default RUNS_DIR/census)")
    args = parser.parse_args(argv)
    run_cli(census_command, args.runs_dir, args.out)


if __name__ == "__main__":
    main()
