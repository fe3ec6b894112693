"""CPU shares for processes that run side by side (no jax import: used before jax loads).

XLA:CPU's and OpenBLAS's thread pools are as large as the set of CPUs a process may run on,
so two unpinned jax processes on 2 cores run 4 busy threads that spin against each other.
Measured on 2 cores (``launch.reproduce`` checks, 2026-12-02): ``minimax`` beside ``aerca``
took 235 s unpinned against 98 s with one core each (75 s alone with both cores), and
``aerca`` 252 s against 197 s. ``launch.reproduce --jobs`` and the xdist workers of the test
suite therefore each run on their own share.
"""

from __future__ import annotations

import os


def available() -> list[int]:
  """The CPU numbers this process may run on, sorted."""
  if hasattr(os, "sched_getaffinity"):
    return sorted(os.sched_getaffinity(0))
  return list(range(os.cpu_count() or 1))


def shares(cpus: list[int], jobs: int) -> list[list[int]]:
  """``cpus`` split into ``jobs`` disjoint, near-equal, contiguous shares; with fewer CPUs
  than jobs (or one job) every job gets all of them.

  >>> shares([0, 1, 2, 3, 4], 2)
  [[0, 1, 2], [3, 4]]
  """
  if jobs < 1:
    raise ValueError(f"jobs must be >= 1, got {jobs}")
  if jobs == 1 or len(cpus) < jobs:
    return [list(cpus) for _ in range(jobs)]
  per, extra = divmod(len(cpus), jobs)
  out, start = [], 0
  for i in range(jobs):
    size = per + (1 if i < extra else 0)
    out.append(list(cpus[start:start + size]))
    start += size
  return out


def pin(cpus) -> None:
  """Restricts this process (and what it starts later) to ``cpus``; a no-op when empty or
  where the OS has no affinity call. Call it before numpy or jax loads: their thread pools
  are sized then."""
  if cpus and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {int(c) for c in cpus})
