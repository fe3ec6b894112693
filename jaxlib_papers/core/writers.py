"""Metric writers: JSONL always, TensorBoard event files when tensorboardX is present."""

from __future__ import annotations

import json
import math
import os
import pathlib
from collections.abc import Mapping


class MetricWriter:
  """Appends ``{"step": s, **scalars}`` rows to ``metrics.jsonl`` and TensorBoard.

  The file is reconciled with the checkpoint the run starts from: rows after it (written by
  an interrupted run, about to be recomputed) are dropped, and so are the rows of an older
  run when there is no checkpoint to resume (a fresh start). With rows flushed before
  every checkpoint (``train_loop``), a killed and resumed run leaves exactly one row per
  step: no gap, no duplicate.

  Args:
    workdir: folder of ``metrics.jsonl`` and ``tensorboard/``.
    resume_step: the checkpoint step the run resumes from; None for a fresh start.
  """

  def __init__(self, workdir: str | pathlib.Path, resume_step: int | None = None):
    self.workdir = pathlib.Path(workdir)
    self.workdir.mkdir(parents=True, exist_ok=True)
    self.path = self.workdir / "metrics.jsonl"
    if self.path.exists():
      self._truncate_after(resume_step or 0)
    self._file = open(self.path, "a", encoding="utf-8")
    try:
      from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
      self._tb = SummaryWriter(
          str(self.workdir / "tensorboard"), purge_step=resume_step or 0, flush_secs=30)
    except ImportError:  # pragma: no cover - tensorboardX is an install requirement
      self._tb = None

  def _truncate_after(self, step: int) -> None:
    kept = []
    with open(self.path, encoding="utf-8") as f:
      for line in f:
        try:
          if json.loads(line).get("step", 0) <= step:
            kept.append(line)
        except json.JSONDecodeError:
          break  # a row cut by the kill: drop it and everything after
    tmp = self.path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
      f.writelines(kept)
    os.replace(tmp, self.path)

  def write(self, step: int, scalars: Mapping[str, float]) -> None:
    row = {"step": int(step)}
    row.update({k: float(v) for k, v in scalars.items()})
    self._file.write(json.dumps(row, allow_nan=True) + "\n")
    if self._tb is not None:
      for name, value in scalars.items():
        if math.isfinite(float(value)):
          self._tb.add_scalar(name, float(value), int(step))

  def flush(self) -> None:
    """Writes the buffered rows through to the disk (they survive a kill from here on)."""
    self._file.flush()
    os.fsync(self._file.fileno())
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    self.flush()
    self._file.close()
    if self._tb is not None:
      self._tb.close()


def write_json(path: str | pathlib.Path, obj, **dumps_kwargs) -> pathlib.Path:
  """Writes ``obj`` as JSON atomically (temp file + rename): a run killed mid-write never
  leaves a truncated results file in place of the previous one. Creates parent folders."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(json.dumps(obj, **dumps_kwargs), encoding="utf-8")
  os.replace(tmp, path)
  return path


def read_jsonl(path: str | pathlib.Path) -> list[dict[str, float]]:
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f if line.strip()]
