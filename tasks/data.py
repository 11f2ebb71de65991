"""Generated examples as an HF `DatasetDict`, cached on disk by a fingerprint of task and seed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.atomic import write_json
from common.cli import UsageError, path_name
from common.stages import timed

if TYPE_CHECKING:  # torch is imported lazily so `toylens list` stays fast; annotations only
    import torch
from common.jsonfiles import sha256_file
from common.store import read_json
from common.ownership import MANIFEST, TEMP, adopt_all, clean_leftovers, foreign_files, remove_tree
from tasks.base import NO_FOIL, SPLITS, Example, Task

COLUMNS = ("tokens", "positions", "foils", "group", "counterfactual")
CHECKSUMS = "toylens-checksums.json"  # SHA-256 of every file of a cache entry, recorded at write


def cache_root() -> Path:
    value = os.environ.get("TOYLENS_CACHE")
    if value is not None and not value.strip():
        raise UsageError(
            "TOYLENS_CACHE is set but empty (that would mean the current folder); set it to a "
            "folder or unset it for ~/.cache/toylens"
        )
    return Path(value or Path.home() / ".cache" / "toylens") / "data"


def fingerprint(task: Task, seed: int) -> str:
    described = {
        "task": task.name,
        "params": task.params_dict(),
        "seed": seed,
        "vocabulary": task.vocabulary(),
        "generator": getattr(task, "version", 1),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def examples_to_columns(examples: list[Example]) -> dict[str, list]:
    columns: dict[str, list] = {
        "tokens": [list(e.tokens) for e in examples],
        "positions": [list(e.positions) for e in examples],
        "foils": [list(e.foils) or [NO_FOIL] * len(e.positions) for e in examples],
        "group": [e.group for e in examples],
        "counterfactual": [list(e.counterfactual) for e in examples],
    }
    if any(e.roles for e in examples):  # only tasks that name roles have these columns
        columns["role_names"] = [sorted(e.roles) for e in examples]
        columns["role_positions"] = [[e.roles[name] for name in sorted(e.roles)] for e in examples]
    return columns


@timed("data")
def task_dataset(task: Task, seed: int):
    """The task's splits for `seed`: loaded from the cache, or generated, checked and cached."""
    from datasets import Dataset, DatasetDict, disable_progress_bars, load_from_disk

    disable_progress_bars()  # the training bar is the one progress bar a user needs

    from tasks.validate import validate_task_examples

    path = cache_root() / f"{path_name(task.name, 'task name')}-{fingerprint(task, seed)}"
    if path.exists() or path.is_symlink():
        data, problem = load_verified(path, load_from_disk)
        if data is not None:
            return data
        check_rebuildable(path)  # before saying it is rebuilt, and before generating anything
        print(f"toylens: cached data {path} {problem}; rebuilding it", file=sys.stderr)
    splits = validate_task_examples(task, seed)
    data = DatasetDict({name: Dataset.from_dict(examples_to_columns(splits[name])) for name in SPLITS})
    clean_leftovers(path.parent)  # entries a kill interrupted mid-write
    temp = path.with_name(f"{TEMP}{os.getpid()}.{path.name}")
    data.save_to_disk(str(temp))
    write_json(temp / CHECKSUMS, checksums(temp))
    adopt_all(temp)
    replace_entry(temp, path)
    return data


def checksums(folder: Path) -> dict:
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in (CHECKSUMS, MANIFEST)
    }


def load_verified(path: Path, load_from_disk):
    """(DatasetDict, None) when every file of the cache entry matches the checksums recorded when
    it was written, else (None, what is wrong)."""
    if path.is_symlink() or not (path / CHECKSUMS).is_file():
        return None, "has no checksums (written by an older toylens, or damaged)"
    try:
        recorded = read_json(path / CHECKSUMS, "")
    except UsageError:
        return None, "has an unreadable checksum file"
    if recorded != checksums(path):
        return None, "does not match the checksums recorded when it was written (edited or damaged)"
    try:
        return load_from_disk(str(path)), None
    except Exception as error:  # noqa: BLE001  (pyarrow and datasets raise many types for damage)
        return None, f"does not load ({type(error).__name__})"


def written_by_datasets(entry: Path, file: Path) -> bool:
    """A file `DatasetDict.save_to_disk` writes: entries from before checksums have no manifest,
    but these names inside toylens's cache are its own."""
    parts = file.relative_to(entry).parts
    return parts == ("dataset_dict.json",) or (
        len(parts) == 2
        and parts[0] in SPLITS
        and (
            parts[1] in ("dataset_info.json", "state.json")
            or (parts[1].startswith("data-") and parts[1].endswith(".arrow"))
        )
    )


def check_rebuildable(path: Path) -> None:
    """Refuse to rebuild a damaged cache entry that holds a file toylens did not write."""
    foreign = [f for f in foreign_files(path) if not written_by_datasets(path, f)]
    if foreign:
        raise UsageError(
            f"cached data {path} is damaged and holds {foreign[0]}, which toylens did not "
            "write; delete that folder (it is only a cache) and run again"
        )


def replace_entry(temp: Path, path: Path) -> None:
    """Move a freshly written cache entry into place, over a damaged one of toylens's own (checked
    by check_rebuildable: only toylens's files are removed)."""
    if path.exists() or path.is_symlink():
        remove_tree(path, also=lambda file: written_by_datasets(path, file))
    try:
        os.replace(temp, path)
    except OSError:  # another process put the same entry in place first: theirs is identical
        remove_tree(temp)


@dataclass(frozen=True)
class Batch:
    """A split as right-padded tensors. Padding never leaks into real positions: attention is causal."""

    tokens: "torch.Tensor"  # [n, length], padded with 0
    lengths: "torch.Tensor"  # [n]
    example_index: "torch.Tensor"  # [k] one entry per scored position
    positions: "torch.Tensor"  # [k]
    answers: "torch.Tensor"  # [k]
    foils: "torch.Tensor"  # [k], NO_FOIL where none
    groups: list[str]  # [n]
    counterfactual: "torch.Tensor | None"  # [n, length] or None when the task has none
    roles: dict = dataclasses.field(default_factory=dict)  # role name -> [n] position, -1 where absent

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def to(self, device) -> "Batch":
        import torch

        if self.tokens.device == torch.device(device):
            return self
        moved = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        moved["roles"] = {name: position.to(device) for name, position in self.roles.items()}
        return Batch(**{name: value.to(device) if hasattr(value, "to") else value for name, value in moved.items()})

    @classmethod
    def from_tokens(cls, tokens, positions, foils=None, counterfactual=None, groups=None, roles=None) -> "Batch":
        """A batch from plain token ids, for probing a model outside any task: `tokens` one id
        sequence per example (the answer at a scored position p is tokens[p + 1]); `positions` the
        scored positions of each example; `foils` one wrong answer per scored position (or none);
        `counterfactual` a same-length partner per example (needed by patching); `roles` one
        {role name: position} per example (or none)."""
        for row, (sequence, scored) in enumerate(zip(tokens, positions, strict=True)):
            if not all(0 <= p < len(sequence) - 1 for p in scored):
                raise UsageError(
                    f"example {row}: scored positions {list(scored)} must lie in 0..{len(sequence) - 2} "
                    "(the answer at p is tokens[p + 1])"
                )
        foils = foils or [[NO_FOIL] * len(p) for p in positions]
        counterfactual = counterfactual or [() for _ in tokens]
        groups = groups or ["all"] * len(tokens)
        roles = roles or [{} for _ in tokens]
        examples = [
            Example(tuple(t), tuple(p), tuple(f), g, tuple(c), dict(r))
            for t, p, f, g, c, r in zip(tokens, positions, foils, groups, counterfactual, roles, strict=True)
        ]
        return columns_to_batch(examples_to_columns(examples))

    def real_positions(self, width: int | None = None) -> "torch.Tensor":
        """[n, width] True where a row has a real input token (right padding is False)."""
        return real_positions(self.lengths, self.inputs.shape[1] if width is None else width)

    @property
    def inputs(self):
        """What the model reads: every token but the last (the last one is only ever an answer)."""
        return self.tokens[:, :-1]


def real_positions(lengths: "torch.Tensor", width: int) -> "torch.Tensor":
    """[n, width] True at input positions 0..length-2 of each row (the last token is only an answer)."""
    import torch

    return torch.arange(width, device=lengths.device)[None, :] < (lengths[:, None] - 1)


def to_batch(split) -> Batch:
    """A cached split (an HF `Dataset`) as tensors."""
    return columns_to_batch(split.to_dict())


def columns_to_batch(rows: dict[str, list]) -> Batch:
    import torch

    lengths = [len(t) for t in rows["tokens"]]
    width = max(lengths)

    # Task data is built on the CPU whatever torch's default device is; probes move it to the model.
    def tensor(values, dtype=torch.long):
        return torch.tensor(values, dtype=dtype, device="cpu")

    def padded(sequences):
        return tensor([list(s) + [0] * (width - len(s)) for s in sequences])

    tokens = padded(rows["tokens"])
    example_index = [i for i, ps in enumerate(rows["positions"]) for _ in ps]
    positions = [p for ps in rows["positions"] for p in ps]
    has_counterfactual = all(len(c) for c in rows["counterfactual"]) and len(lengths) > 0
    return Batch(
        tokens=tokens,
        lengths=tensor(lengths),
        example_index=tensor(example_index),
        positions=tensor(positions),
        answers=tokens[tensor(example_index), tensor(positions) + 1],
        foils=tensor([f for fs in rows["foils"] for f in fs]),
        groups=list(rows["group"]),
        counterfactual=padded(rows["counterfactual"]) if has_counterfactual else None,
        roles=role_tensors(rows.get("role_names"), rows.get("role_positions"), tensor),
    )


def role_tensors(names: list[list[str]] | None, positions: list[list[int]] | None, tensor) -> dict:
    """Role name -> [n] position per example (-1 where an example does not name that role)."""
    if not names:
        return {}
    assert positions is not None  # examples_to_columns writes the two role columns together
    known = sorted({name for row in names for name in row})
    where = [dict(zip(row, at)) for row, at in zip(names, positions)]
    return {name: tensor([row.get(name, -1) for row in where]) for name in known}


def select_rows(batch: Batch, rows) -> Batch:
    """The examples `rows` of a batch, scored positions re-indexed."""
    import torch

    device = batch.tokens.device
    rows = torch.as_tensor(rows, dtype=torch.long, device=device)
    new_index = torch.full((len(batch),), -1, dtype=torch.long, device=device)
    new_index[rows] = torch.arange(len(rows), device=device)
    keep = new_index[batch.example_index] >= 0
    width = int(batch.lengths[rows].max())
    return dataclasses.replace(
        batch,
        tokens=batch.tokens[rows, :width],
        lengths=batch.lengths[rows],
        example_index=new_index[batch.example_index[keep]],
        positions=batch.positions[keep],
        answers=batch.answers[keep],
        foils=batch.foils[keep],
        groups=[batch.groups[i] for i in rows.tolist()],
        counterfactual=None if batch.counterfactual is None else batch.counterfactual[rows, :width],
        roles={name: position[rows] for name, position in batch.roles.items()},
    )


def spread_subset(batch: Batch, limit: int) -> Batch:
    """At most `limit` examples, evenly spaced, so every group keeps its share (deterministic)."""
    import torch

    if len(batch) <= limit:
        return batch
    return select_rows(batch, torch.linspace(0, len(batch) - 1, limit, device="cpu").round().long().unique())
