"""Labels by role where a task's positions move (issue 56, item 6): a summary cell names a position
by its number only where the task's data show a fixed layout (every role at one position in every
example); where roles move, by the role every example holds there, else by the role at which the
head matters; and a role set's profile is shown where its head is described."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from probes.attention import position_labels, role_places
from probes.circuits.positional import fixed_layout
from probes.report.summary import place
from tests.test_roles import bracket_batch, winograd_batch


def test_fixed_is_read_from_the_data_not_the_task_name():
    assert role_places(winograd_batch()) is None  # every role at one position in every example
    moving = bracket_batch()
    assert role_places(moving) == {9: "query"}  # the brackets move; the query sits at 9 in each
    pinned = {name: torch.full_like(where, int(where[0])) for name, where in moving.roles.items()}
    assert role_places(SimpleNamespace(roles=pinned)) is None


def test_a_moving_layout_is_not_resolved_by_absolute_position():
    batch = bracket_batch()
    paired = dataclasses.replace(batch, counterfactual=batch.inputs.clone())
    assert not fixed_layout(paired)  # one length, one scored position, but the brackets move
    pinned = {name: torch.full_like(where, int(where[0])) for name, where in batch.roles.items()}
    assert fixed_layout(dataclasses.replace(paired, roles=pinned))


def test_summary_cells_name_moving_positions_by_role():
    recovered = {"inside_0": torch.tensor([[0.7], [0.1]]), "close": torch.tensor([[0.2], [0.8]])}
    moving = SimpleNamespace(places={9: "query"}, roles=SimpleNamespace(recovered=recovered))
    assert place(moving, "L1H0", 9) == "query"
    assert place(moving, "L0H0", 3) == "inside_0"  # where patching L0H0 restores most, in each pair
    assert place(moving, "L1H0", 3) == "close"
    assert place(SimpleNamespace(places={9: "query"}, roles=None), "L0H0", 3) == ""  # no number
    assert place(SimpleNamespace(places=None, roles=None), "L0H0", 14) == "p14"  # a fixed layout


def test_position_labels_name_a_fixed_role_where_roles_move():
    batch = bracket_batch()
    labels = position_labels(batch.inputs, None, role_places(batch))
    assert labels[9] == "query 7" and labels[3].startswith("p3 (")
    assert position_labels(batch.inputs, None)[9] == "p9 7"


def test_a_role_sets_profile_is_shown_where_its_head_is_described():
    from probes.report.finding import role_numbers

    masses = {
        "attends the inside role": 0.9,
        "attends the inside_0 role": 0.46,
        "attends the inside_1 role": 0.26,
        "attends the inside_2 role": 0.14,
        "attends the inside_3 role": 0.04,
        "attends the query role": 0.05,
    }
    words = role_numbers("L1 head that attends the inside role", masses)
    assert words == (
        "attends the inside role 0.90, decaying from inside_0: inside_0 0.46, inside_1 0.26, inside_2 0.14, inside_3 0.04"
    )
    assert "decaying" not in role_numbers("L1 head that attends the query role", {"attends the query role": 0.9})
