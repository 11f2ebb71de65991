"""`python -m probes.census RUNS_DIR`: how often each circuit occurs, per model and grid point.

Reads what a sweep's workers stored (each run's metrics.json and circuit.json, each grid point's
point.json, failed.json for runs that failed twice); needs no torch. Every share is over the runs
of its (model, point) that finished, with a 95% Wilson interval. A run whose circuit was not named
as a path keeps its own label (what was found instead) and is counted, never dropped; a run with
no circuit.json (trained outside a sweep) is counted as "not traced".
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from common.cli import UsageError
from common.io import check_fields, read_json
from probes.circuits.labels import CIRCUIT, CircuitSummary, circuit_label
from common.stats import Interval, mean_interval, wilson

SOLVED = "validation solved"   # a run stopped otherwise (stalled, out of budget) counts as unsolved
NOT_TRACED = "not traced (no circuit.json)"
FAILED = "failed.json"     # written by a sweep for a run that failed twice


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
    named: Share               # runs whose circuit the report names as a path
    circuits: tuple[Share, ...]  # every circuit label, most frequent first
    seeds: dict                # label -> seeds, so any share can be checked run by run
    path_recovered: dict       # label -> [min, median, max] share of the gap its runs' best path recovers


FIX = "rerun the sweep for that run or delete the file"
POINT_FIELDS = {"point": str, "values": dict}
FAILED_FIELDS = {"model_name": str, "seed": int, "error": str}


def read_object(path: Path, fields: dict) -> dict:
    """A stored JSON object of these `fields` and types; anything else is refused with one line
    (stored files are untrusted)."""
    return check_fields(read_json(path, FIX), fields, str(path), FIX)


def point_of(run_path: Path) -> tuple[str, dict]:
    """A run's grid point: the folder above its model folder, when it holds point.json."""
    point_file = run_path.parent.parent / "point.json"
    if point_file.is_file():
        data = read_object(point_file, POINT_FIELDS)
        return data.get("point", point_file.parent.name), data.get("values", {})
    return "default", {}


def read_label(run_path: Path) -> tuple[str, str, float | None]:
    """(kind, label, share of the gap its best single path recovers, or None)."""
    path = run_path / CIRCUIT
    if not path.is_file():
        return "untraced", NOT_TRACED, None
    try:
        summary = CircuitSummary.from_dict(read_json(path, FIX), str(path), FIX)
    except TypeError:
        raise UsageError(f"{path} does not hold a circuit summary this toylens knows; rerun the sweep "
                         "for that run") from None
    label = circuit_label(summary)
    return label.kind, label.text, summary.edge.recovered if summary.edge else None


def heldout_distribution(values: list[float]) -> dict:
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {"mean": mean_interval(values).as_dict(), "min": min(values), "q1": quartiles[0],
            "median": quartiles[1], "q3": quartiles[2], "max": max(values), "n": len(values)}


def take_census(runs_dir: Path) -> list[GroupCensus]:
    from tasks.runs import find_runs

    runs_dir = Path(runs_dir)
    groups, values = defaultdict(list), {}
    for run in find_runs(runs_dir):
        point, point_values = point_of(run.path)
        values[point] = point_values
        groups[(point, run.model_name)].append((run, *read_label(run.path)))
    failed = Counter()
    for path in runs_dir.rglob(FAILED):
        record = read_object(path, FAILED_FIELDS)
        failed[(point_of(path.parent)[0], record.get("model_name", path.parent.parent.name))] += 1
    return [group_census(model, point, values[point], members, failed[(point, model)])
            for (point, model), members in sorted(groups.items())]


def group_census(model: str, point: str, values: dict, members: list, failed: int) -> GroupCensus:
    n = len(members)
    counts = Counter(label for _, _, label, _ in members)
    seeds, recovered = defaultdict(list), defaultdict(list)
    for run, _, label, path_share in members:
        seeds[label].append(run.seed)
        if path_share is not None:
            recovered[label].append(path_share)
    unsolved = sum(run.metrics.get("stop_reason") != SOLVED for run, _, _, _ in members)
    named = sum(kind == "path" for _, kind, _, _ in members)
    return GroupCensus(
        model_name=model, point=point, values=values, finished=n, failed=failed,
        heldout=heldout_distribution([float(run.metrics["accuracy"]["heldout"]) for run, _, _, _ in members]),
        unsolved=Share("unsolved (validation never solved)", unsolved, wilson(unsolved, n)),
        named=Share("circuit named as a path", named, wilson(named, n)),
        circuits=tuple(Share(label, count, wilson(count, n)) for label, count in counts.most_common()),
        seeds={label: sorted(s) for label, s in seeds.items()},
        path_recovered={label: [min(v), statistics.median(v), max(v)] for label, v in recovered.items()})


# ---- rendering -----------------------------------------------------------------------------

def share_text(share: Share) -> str:
    i = share.share
    return f"{share.count}/{i.n} = {i.value:.0%} [{i.low:.0%}, {i.high:.0%}]"


def summary_lines(groups: list[GroupCensus]) -> list[str]:
    lines = []
    for g in groups:
        h = g.heldout
        lines.append(f"{g.model_name} @ {g.point}: {g.finished} runs ({g.failed} failed); held-out median "
                     f"{h['median']:.1%} (min {h['min']:.1%}); {share_text(g.unsolved)} unsolved; "
                     f"{share_text(g.named)} named as a path")
        lines += [f"  {share_text(s)}  {s.label}" for s in g.circuits]
    return lines


def intro() -> str:
    from probes.settings import DEFAULT

    return ("Per model and grid point, over the runs that finished: each share is count / finished runs with a "
            "95% Wilson interval. A circuit is named as a path only as the report names it: its best "
            f"single-position path patch recovers at least {DEFAULT.path_claim:.0%} of the clean - counterfactual gap "
            "(0 = the path alone restores nothing, 1 = all of it); other runs are labelled by what was found. "
            "Unsolved: validation never solved (stopped stalled or out of budget). Held-out accuracy: the "
            "task's held-out split.")


def markdown(groups: list[GroupCensus], figure: str | None) -> str:
    out = ["# Circuit census", "", intro(), ""]
    if figure:
        out += [f"![mechanism share per grid point]({figure})", ""]
    for g in groups:
        h = g.heldout
        out += [f"## {g.model_name} @ {g.point}", "",
                f"grid values: {json.dumps(g.values) if g.values else '(none)'}; {g.finished} finished runs, "
                f"{g.failed} failed twice (not counted)", "",
                f"held-out accuracy over seeds: mean {h['mean']['value']:.1%} [{h['mean']['low']:.1%}, "
                f"{h['mean']['high']:.1%}] (t 95%), min {h['min']:.1%}, quartiles {h['q1']:.1%} / "
                f"{h['median']:.1%} / {h['q3']:.1%}, max {h['max']:.1%}", "",
                "| circuit | runs | share [95% CI] | best path recovers (min / median / max) | seeds |",
                "|---|---|---|---|---|"]
        for s in (*g.circuits, g.named, g.unsolved):
            seeds = ", ".join(map(str, g.seeds.get(s.label, []))) or "-"
            path = " / ".join(f"{v:.0%}" for v in g.path_recovered.get(s.label, [])) or "-"
            i = s.share
            out.append(f"| {s.label} | {s.count}/{i.n} | {i.value:.1%} [{i.low:.1%}, {i.high:.1%}] | {path} | {seeds} |")
        out.append("")
    return "\n".join(out)


def draw(groups: list[GroupCensus], path: Path) -> None:
    """Stacked bars: per (point, model), each circuit label's share of the finished runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    table = pd.DataFrame([{"group": f"{g.model_name}\n{g.point}", "label": s.label, "share": s.share.value}
                          for g in groups for s in g.circuits])
    wide = table.pivot_table(index="group", columns="label", values="share", fill_value=0, sort=False)
    fig, ax = plt.subplots(figsize=(1.2 * len(wide) + 3, 4.5))
    wide.plot(kind="bar", stacked=True, ax=ax, width=0.7, colormap="tab20")
    ax.set_ylabel("share of finished runs (0 = none, 1 = all)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=0)
    ax.legend(title="circuit", fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title("circuit share per model and grid point", fontsize=10)
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")
    plt.close(fig)


def census_html(groups: list[GroupCensus], figure: Path | None) -> str:
    """census.md's tables as one self-contained page (sortable tables, the figure inline)."""
    from common.html import escape, image_uri, page, table

    body = [f'<p class="note">{escape(intro())}</p>']
    if figure is not None:
        body.append(f'<img alt="circuit share per model and grid point" src="{image_uri(figure)}">')
    for g in groups:
        h = g.heldout
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


def write_census(groups: list[GroupCensus], out: Path) -> Path:
    from common.io import atomic_write, write_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figure = "census.png"
    atomic_write(out / figure, lambda temp: draw(groups, Path(temp)))
    write_json(out / "census.json", {"groups": [asdict(g) for g in groups]})
    atomic_write(out / "census.md", lambda temp: Path(temp).write_text(markdown(groups, figure) + "\n"))
    text = census_html(groups, out / figure)
    atomic_write(out / "census.html", lambda temp: Path(temp).write_text(text))
    return out / "census.md"


def census_command(runs_dir: Path, out: Path | None = None) -> None:
    groups = take_census(runs_dir)
    written = write_census(groups, out or Path(runs_dir) / "census")
    print("\n".join(summary_lines(groups)))
    failed = sum(1 for _ in Path(runs_dir).rglob(FAILED))
    if failed > sum(g.failed for g in groups):
        print(f"{failed} runs failed twice in all, some in groups with no finished run (see their {FAILED})")
    print(f"\nwrote {written} and {written.with_suffix('.html').name}")


def main(argv=None) -> None:
    from common.io import nonempty_path  # an empty path would mean the current folder

    from common.cli import Parser, run_cli

    parser = Parser(prog="python -m probes.census",
                    description="Count the circuits of a sweep's runs per model and grid point, with 95% intervals.")
    parser.add_argument("runs_dir", type=nonempty_path, help="a sweep folder (e.g. runs/sweeps/winograd)")
    parser.add_argument("--out", type=nonempty_path, default=None, help="where census.md/json/png go (default RUNS_DIR/census)")
    args = parser.parse_args(argv)
    run_cli(census_command, args.runs_dir, args.out)


if __name__ == "__main__":
    main()
