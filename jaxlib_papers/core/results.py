"""Typed results: one frozen dataclass per method, written once as ``results.json``.

A package's ``train.run`` returns a frozen dataclass. Fields that only make sense in memory
(trained states, kernels, networks, raw particles) are declared with :func:`in_memory`;
:func:`write` saves every other field as JSON (arrays as nested lists, NamedTuples and
dataclasses as objects), atomically. :func:`summarize` is the one mean / std over seeds.

  @dataclasses.dataclass(frozen=True)
  class Result:
    rows: list[dict[str, float]]
    summary: list[dict[str, float]]
    state: Any = results.in_memory()

  results.write(result, workdir)          # workdir/results.json without ``state``
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxlib_papers.core import writers

_IN_MEMORY = "jaxlib_papers.in_memory"


def in_memory(default: Any = None) -> Any:
  """A dataclass field that :func:`write` leaves out (states, kernels, networks)."""
  return dataclasses.field(default=default, metadata={_IN_MEMORY: True}, compare=False)


def to_json_tree(value: Any) -> Any:
  """A JSON-ready copy of ``value``: arrays to lists, tuples of records to objects."""
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return {f.name: to_json_tree(getattr(value, f.name)) for f in dataclasses.fields(value)
            if not f.metadata.get(_IN_MEMORY)}
  if isinstance(value, tuple) and hasattr(value, "_fields"):
    return {k: to_json_tree(v) for k, v in zip(value._fields, value)}
  if isinstance(value, Mapping):
    return {str(k): to_json_tree(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json_tree(v) for v in value]
  if isinstance(value, (jax.Array, np.ndarray, np.generic)):
    return to_json_tree(np.asarray(value).tolist())
  if isinstance(value, pathlib.Path):
    return str(value)
  return value


def write(result: Any, workdir: str | pathlib.Path | None, *,
          name: str = "results.json", indent: int | None = 1) -> pathlib.Path | None:
  """Writes ``result`` (a dataclass; in-memory fields left out) as ``workdir/name``.

  Returns the path, or None when ``workdir`` is None (an in-memory run writes nothing).
  """
  if workdir is None:
    return None
  if not (dataclasses.is_dataclass(result) and not isinstance(result, type)):
    raise TypeError(f"result must be a dataclass instance; got {type(result).__name__}")
  return writers.write_json(pathlib.Path(workdir) / name, to_json_tree(result),
                            indent=indent)


def summarize(rows: Sequence[Mapping[str, Any]], metrics: Iterable[str], *,
              by: Sequence[str] = (), stats: Sequence[str] = ("mean", "std"),
              count: str | None = None) -> list[dict[str, Any]]:
  """Statistics over seeds of ``metrics``, per group of equal ``by`` values.

  Args:
    rows: one mapping per (seed, group) with the ``by`` keys and the metrics.
    metrics: the metric names to summarise (a name missing from a group's rows is
      skipped for that group).
    by: the keys that define a group (in first-seen order); () pools all rows.
    stats: ``"mean"`` keeps the metric's name, the others (``"std"``, ``"min"``,
      ``"max"``) add ``_<stat>``; computed in float64 (``np.std``: population std).
    count: a key under which each group's number of rows is written (None: not written).

  Returns:
    One dict per group: the ``by`` values, the count, then each metric's statistics.
  """
  reducers = {"mean": np.mean, "std": np.std, "min": np.min, "max": np.max}
  unknown = [s for s in stats if s not in reducers]
  if unknown:
    raise ValueError(f"stats must be among {sorted(reducers)}; got {unknown}")
  metrics = tuple(metrics)
  groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
  for row in rows:
    groups.setdefault(tuple(row[k] for k in by), []).append(row)
  out = []
  for values, members in groups.items():
    entry: dict[str, Any] = dict(zip(by, values))
    if count is not None:
      entry[count] = len(members)
    for name in metrics:
      if name not in members[0]:
        continue
      column = np.array([m[name] for m in members], np.float64)
      for stat in stats:
        entry[name if stat == "mean" else f"{name}_{stat}"] = float(reducers[stat](column))
    out.append(entry)
  return out
