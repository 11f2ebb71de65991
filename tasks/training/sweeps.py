"""A sweep folder's own records, and the rules that make them trustworthy.

A sweep writes `OUT/sweep.json` (every run it planned: grid point, model, seeds, and what defines
those runs), `OUT/<point>/point.json` (the point's grid values) and, for a run that failed twice,
`OUT/<point>/<model>/seed<k>/failed.json`. Each record carries the SHA-256 of its content (an
edit is refused) and is checked against where it lies and what it describes (a record copied into
another folder, or one describing other settings than its runs were trained with, is refused):
the same rule a run's own files follow (`tasks.training.runs`). Checksums catch edits, not forgery; a forged
record must still agree with the runs it describes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from common.cli import UsageError
from common.jsonfiles import canonical_sha256, check_fields, differences, short
from common.store import read_json

SWEEP = "sweep.json"
POINT = "point.json"
FAILED = "failed.json"
FORMAT = "toylens-sweep/1"
FIX = "rerun the sweep into a new folder (or restore the file)"
SCALARS = (str, int, float, bool, type(None))


def signed(payload: dict) -> dict:
    """`payload` with the SHA-256 of its canonical JSON added as `sha256`."""
    return {**payload, "sha256": canonical_sha256(payload)}


def check_signed(data, fields: dict, where: str, fix: str = FIX, nullable=()) -> dict:
    """A stored record: a JSON object of exactly these fields and types (a `nullable` one may be
    null, none may be absent), then its `sha256`."""
    check_fields(data, {**fields, "sha256": str}, where, fix, nullable)
    missing = sorted(set(fields) - set(data)) or (["sha256"] if "sha256" not in data else [])
    if missing:
        raise UsageError(f"{where} lacks field(s) {missing}; {fix}")
    if data["sha256"] != canonical_sha256({key: value for key, value in data.items() if key != "sha256"}):
        raise UsageError(f"{where} was changed after toylens wrote it (its sha256 differs); {fix}")
    return data


def read_signed(path: Path, fields: dict, fix: str = FIX, nullable=()) -> dict:
    return check_signed(read_json(path, fix), fields, str(path), fix, nullable)


def check_values(values, where: str) -> dict:
    """Grid values: an object of JSON scalars (finite numbers)."""
    if not isinstance(values, dict) or not all(
        isinstance(v, SCALARS) and not (isinstance(v, float) and not math.isfinite(v)) for v in values.values()
    ):
        raise UsageError(f"{where}: values must be an object of grid values, got {short(values)}; {FIX}")
    return values


# ---- point.json, failed.json -------------------------------------------------------------------

POINT_FIELDS = {"point": str, "values": dict}
FAILED_FIELDS = {"point": str, "model_name": str, "seed": int, "error": str}


def point_record(point: str, values: dict) -> dict:
    return signed({"point": point, "values": values})


def read_point(folder: Path) -> dict:
    """The grid values `folder/point.json` records, after checking it names this folder."""
    path = Path(folder) / POINT
    data = read_signed(path, POINT_FIELDS)
    if data["point"] != Path(folder).name:
        raise UsageError(
            f"{path} describes grid point {data['point']!r}, not the folder it is in "
            f"({Path(folder).name!r}: copied from elsewhere); {FIX}"
        )
    return check_values(data["values"], str(path))


def failed_record(point: str, model_name: str, seed: int, error: str) -> dict:
    return signed({"point": point, "model_name": model_name, "seed": seed, "error": error})


def read_failed(run_dir: Path) -> str:
    """The error `run_dir/failed.json` records, after checking it describes this run folder."""
    path = Path(run_dir) / FAILED
    data = read_signed(path, FAILED_FIELDS)
    here = (Path(run_dir).parent.parent.name, Path(run_dir).parent.name, Path(run_dir).name)
    if (data["point"], data["model_name"], f"seed{data['seed']}") != here:
        raise UsageError(
            f"{path} describes {data['model_name']} seed {data['seed']} at {data['point']!r}, "
            f"not the run folder it is in (copied from elsewhere); {FIX}"
        )
    return data["error"]


# ---- sweep.json: the runs a sweep planned ------------------------------------------------------


@dataclass(frozen=True)
class PlannedGroup:
    point: str
    values: dict  # the grid point's values
    model_name: str
    identity: dict  # what defines these runs except the seed (`identity_of`)
    seeds: tuple[int, ...]

    def to_dict(self) -> dict:
        return {
            "point": self.point,
            "values": self.values,
            "model_name": self.model_name,
            "identity": self.identity,
            "seeds": list(self.seeds),
        }


@dataclass(frozen=True)
class SweepManifest:
    task: str
    groups: tuple[PlannedGroup, ...]

    def group(self, point: str, model_name: str) -> PlannedGroup | None:
        return next((g for g in self.groups if (g.point, g.model_name) == (point, model_name)), None)

    def run_dirs(self, root: Path) -> set[Path]:
        return {Path(root) / g.point / g.model_name / f"seed{s}" for g in self.groups for s in g.seeds}

    def record(self) -> dict:
        return signed({"format": FORMAT, "task": self.task, "groups": [g.to_dict() for g in self.groups]})


GROUP_FIELDS = {"point": str, "values": dict, "model_name": str, "identity": dict, "seeds": object}


def identity_of(identity: dict) -> dict:
    """What defines a run except its seed, as a plan or a run's config.json records it; the
    vocabulary size and context length (which the data decides) left out."""
    from models import ModelSpec

    spec = identity.get("spec")
    spec = {**ModelSpec().to_dict(), **spec, "n_ctx": 0, "d_vocab": 0} if isinstance(spec, dict) else spec
    return {
        "task": identity.get("task"),
        "model_name": identity.get("model_name"),
        "spec": spec,
        "training": identity.get("training"),
    }


ABSENT = object()  # a grid key no part of an identity has


def grid_value(identity: dict, key: str):
    """Where a grid key lands in a run's identity: a training setting, a task parameter or a spec field."""
    task = identity.get("task")
    for part in (
        identity.get("training"),
        task.get("params") if isinstance(task, dict) else None,
        identity.get("spec"),
    ):
        if isinstance(part, dict) and key in part:
            return part[key]
    return ABSENT


def values_disagree(values: dict, identity: dict) -> list[str]:
    """Grid keys whose value the run's identity does not have."""
    return [key for key, value in values.items() if grid_value(identity, key) != value]


def read_manifest(root: Path) -> SweepManifest:
    """`root/sweep.json` after its checks (types, checksum, each group's grid values as its identity
    has them, no (point, model) twice); a folder without one is not a sweep folder."""
    from tasks.training.runs import MAX_SEED

    path = Path(root) / SWEEP
    if not path.is_file():
        raise UsageError(
            f"{root} has no {SWEEP}, so it is not a sweep folder (or one written before toylens "
            "recorded what a sweep planned): rerun the sweep into a new folder, or for a train's runs "
            "folder use toylens accuracy"
        )
    data = read_signed(path, {"format": str, "task": str, "groups": object})
    if data["format"] != FORMAT:
        raise UsageError(f"{path} is of format {data['format']!r}, not {FORMAT!r}; rerun the sweep into a new folder")
    if not isinstance(data["groups"], list):
        raise UsageError(f"{path}: groups must be a list; {FIX}")
    groups, seen = [], set()
    for index, item in enumerate(data["groups"]):
        where = f"{path}: groups[{index}]"
        check_fields(item, GROUP_FIELDS, where, FIX)
        if set(item) != set(GROUP_FIELDS):
            raise UsageError(f"{where} lacks field(s) {sorted(set(GROUP_FIELDS) - set(item))}; {FIX}")
        seeds = item["seeds"]
        if not (isinstance(seeds, list) and all(type(s) is int and 0 <= s <= MAX_SEED for s in seeds)):
            raise UsageError(f"{where}: seeds must be a list of integers from 0 to {MAX_SEED}; {FIX}")
        group = PlannedGroup(
            item["point"], check_values(item["values"], where), item["model_name"], item["identity"], tuple(seeds)
        )
        if (group.point, group.model_name) in seen or values_disagree(group.values, group.identity):
            raise UsageError(
                f"{where} contradicts itself (a grid point twice, or values its runs' settings do not have); {FIX}"
            )
        seen.add((group.point, group.model_name))
        groups.append(group)
    return SweepManifest(data["task"], tuple(groups))


def merged(old: SweepManifest | None, new: SweepManifest, overwrite: bool) -> SweepManifest:
    """The runs of an earlier sweep into this folder and this one's: seeds of one (point, model)
    join; its settings may change only with --overwrite (runs trained before then no longer match
    and are counted as such)."""
    if old is None:
        return new
    if old.task != new.task:
        raise UsageError(f"this folder holds a sweep of task {old.task!r}; choose another --out")
    groups = {(g.point, g.model_name): g for g in old.groups}
    for g in new.groups:
        before = groups.get((g.point, g.model_name))
        if before is not None and before.identity != g.identity and not overwrite:
            raise UsageError(
                f"the sweep in this folder planned {g.model_name} at {g.point} with other settings "
                f"(different {', '.join(differences(before.identity, g.identity))}); pass "
                "--overwrite to replace those runs or choose another --out"
            )
        seeds = sorted({*(before.seeds if before else ()), *g.seeds})
        groups[(g.point, g.model_name)] = PlannedGroup(g.point, g.values, g.model_name, g.identity, tuple(seeds))
    return SweepManifest(new.task, tuple(groups[key] for key in sorted(groups)))


def is_sweep(folder: Path) -> bool:
    return (Path(folder) / SWEEP).is_file()


def runs_folder(folder: Path) -> Path:
    """The runs folder a command reads for `folder`: itself, or a sweep's only grid point (the one
    folder of its runs that holds one run per model and seed); a sweep of several points is refused
    (its runs repeat models and seeds), naming each point's folder and the census."""
    folder = Path(folder)
    if not is_sweep(folder):
        return folder
    points = sorted({g.point for g in read_manifest(folder).groups})
    if len(points) == 1:
        return folder / points[0]
    folders = ", ".join(str(folder / p) for p in points[:3]) + (" ..." if len(points) > 3 else "")
    raise UsageError(
        f"{folder} is a sweep of {len(points)} grid points, whose runs repeat models and seeds; point "
        f"at one point's folder ({folders}) or count them all with toylens census {folder}"
    )
