"""Checkpoints through orbax (the only module of the suite that imports orbax).

A checkpoint holds the train state (any pytree; typed PRNG keys are stored as their raw
key data and re-wrapped on restore) and a small JSON record (the config fingerprint, the
step, the last metrics). Saves are atomic in orbax: a run killed mid-save leaves the
previous checkpoint readable.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp


def _is_key(x: Any) -> bool:
  return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_savable(tree: Any) -> Any:
  return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _from_savable(tree: Any, template: Any) -> Any:
  def back(x, t):
    if _is_key(t):
      return jax.random.wrap_key_data(x, impl=jax.random.key_impl(t))
    return x
  return jax.tree.map(back, tree, template)


def _abstract(tree: Any) -> Any:
  def spec(x):
    if isinstance(x, jax.Array):
      return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
    x = np.asarray(x)
    return jax.ShapeDtypeStruct(x.shape, x.dtype)
  return jax.tree.map(spec, tree)


class Checkpointer:
  """Saves and restores ``(state, record)`` pairs under ``directory``.

  Args:
    directory: folder of the checkpoints (created on first save).
    max_to_keep: how many recent checkpoints to keep.
  """

  def __init__(self, directory: str | pathlib.Path, max_to_keep: int = 2):
    self.directory = pathlib.Path(directory).absolute()
    options = ocp.CheckpointManagerOptions(
        max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False)
    self._manager = ocp.CheckpointManager(
        self.directory, options=options, item_names=("state", "record"))

  def latest_step(self) -> int | None:
    """The latest step whose checkpoint holds both items (state and record).

    A step folder without them (emptied or half-copied by hand; orbax's own interrupted
    saves are never listed) is skipped, left on disk as it is, and named on one line, so
    a resume falls back to the previous complete checkpoint instead of failing on it.
    """
    for step in sorted(self._manager.all_steps(), reverse=True):
      folder = self.directory / str(step)
      missing = [item for item in ("state", "record") if not (folder / item).exists()]
      if not missing:
        return step
      print(f"[checkpoint] skipping {folder}: incomplete (no {' or '.join(missing)}); it "
            "is left on disk", flush=True)
    return None

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: Any, record: dict[str, Any]) -> None:
    record = json.loads(json.dumps(record, default=float))
    self._manager.save(
        int(step),
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(_to_savable(state)),
            record=ocp.args.JsonSave(record)),
        force=True)
    self._manager.wait_until_finished()

  def read_record(self, step: int | None = None) -> dict[str, Any] | None:
    """The JSON record of ``step`` (default latest) without touching the state."""
    step = self.latest_step() if step is None else step
    if step is None:
      return None
    restored = self._manager.restore(
        step, args=ocp.args.Composite(record=ocp.args.JsonRestore()))
    return dict(restored["record"])

  def restore(self, step: int | None, template: Any) -> tuple[Any, dict[str, Any]]:
    """Restores the state of ``step`` (default latest) shaped and sharded like ``template``."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    savable = _to_savable(template)
    restored = self._manager.restore(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardRestore(_abstract(savable)),
            record=ocp.args.JsonRestore()))
    return _from_savable(restored["state"], template), dict(restored["record"])

  def close(self) -> None:
    self._manager.close()

  def __enter__(self) -> "Checkpointer":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
