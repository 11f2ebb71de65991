"""Several sweep runs per Ray task, where that is cheaper than one task each.

A Ray task costs a round trip through the scheduler and one object-store result, whatever its
work (benchmarks/sweep_ray.py measures it per task with no work in it). A cluster with many runs
queued per CPU gains nothing from one task per run: the work waits either way, so its runs go in
batches; one with few runs per CPU keeps one task each, so no CPU idles while another works
through a long batch. Each batch leaves at least TASKS_PER_CPU tasks per CPU for that balance.

How RayExecutor runs them (toylens.sweeps.executors.run_batch): a job is tried twice, as with one
task each (ATTEMPTS); a batch runs its jobs one after another, an error in one is that job's first
attempt (the others go on), and its second attempt is a task of its own; a batch whose worker
process dies is not retried whole (its jobs that had not failed would run a third time): each of
its jobs is sent again alone.
"""

from __future__ import annotations

# At least this many tasks per CPU, so the last batches leave no CPU idle for long.
TASKS_PER_CPU = 4
# At most this many jobs per task: past a few, the round trips saved are nothing beside the work.
MOST_PER_BATCH = 8


def batch_size(jobs: int, cpus: float) -> int:
    """Jobs per Ray task for `jobs` jobs on a cluster of `cpus` CPUs: 1 unless there are more than
    TASKS_PER_CPU jobs per CPU, else as many as keep TASKS_PER_CPU tasks per CPU (at most MOST_PER_BATCH)."""
    return max(1, min(MOST_PER_BATCH, int(jobs // (max(1.0, cpus) * TASKS_PER_CPU))))


def batches(order: list[int], size: int) -> list[list[int]]:
    """`order` (job indices, costliest first) in consecutive batches of `size`: the costliest go first."""
    return [order[start : start + size] for start in range(0, len(order), size)]
