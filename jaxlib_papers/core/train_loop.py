"""One training loop for every method: mesh, jit, checkpoints, metrics, progress, resume.

A kernel is a :class:`~jaxlib_papers.core.contract.TrainKernel` (any object with its two
pure functions ``init`` and ``train_step`` is accepted); the loop never
looks inside the state. It

* builds one mesh over all devices, replicates the state and shards each batch's leading
  axis on ``data``, and jits ``train_step`` with those shardings and the state donated,
  traced under the mesh (``distributed.traced_on``: the kernel's own
  ``distributed.split`` requests reach XLA);
* prints progress (step, loss, steps/s, ETA) on process 0 and writes every step's metrics
  to ``workdir/metrics.jsonl`` and TensorBoard;
* checkpoints with orbax every ``loop.checkpoint_every`` steps and at the end, and
  resumes from the latest checkpoint of ``workdir``; a checkpoint written under another
  config is refused with the keys that differ;
* stops on a NaN/Inf loss with the step that produced it. The loss is checked before any
  checkpoint is written, so the last checkpoint on disk is always a good one.

Resumption is exact (same final state as an uninterrupted run) because the state holds
the PRNG key and ``data(step)`` depends on the step only.

Runs of one kernel share its compiled programs: the jitted ``init`` and ``train_step`` are
kept per (function, mesh, compiler options), so a second run of the same kernel (another
tau of FSBM, a resumed stage in the same process) neither traces nor compiles again. As
with ``jax.jit`` itself, values a kernel's functions close over are read when they are
traced: to change one, build a new kernel. A fresh ``jax.jit`` per run would be a new
function to jax's cache, and every run would compile its programs anew (FSBM's smoke check
compiled its alternation eight times, ~10 s each, for three kernels; ``seeds/fsbm.md``).
"""

from __future__ import annotations

import functools
import math
import os
import pathlib
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import ml_collections
import numpy as np

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import distributed
from jaxlib_papers.core.contract import TrainKernel

PyTree = Any

# Fault injection for the kill-and-resume tests of the launchers: with this variable set to
# N, the process kills itself (SIGKILL, as a pre-empted job dies) right after its N-th
# checkpoint is on disk, counted over every stage it runs. Never set outside tests.
KILL_AFTER_CHECKPOINT_ENV = "JAXLIB_PAPERS_KILL_AFTER_CHECKPOINT"
_checkpoints_saved = 0


def _maybe_kill_after_checkpoint() -> None:
  global _checkpoints_saved
  _checkpoints_saved += 1
  if os.environ.get(KILL_AFTER_CHECKPOINT_ENV) == str(_checkpoints_saved):
    os.kill(os.getpid(), signal.SIGKILL)


class TrainResult(NamedTuple):
  state: PyTree                      # final train state (replicated on the mesh)
  history: list[dict[str, float]]    # one row per call from the start of training: {"step",
  #                                    metrics...}; a resumed run's earlier rows come from
  #                                    workdir/metrics.jsonl (on process 0)
  resumed_from: int | None           # checkpoint step this call started from, if any


# Programs of the kernels run last: a kernel's jitted step holds its compiled executables
# and whatever the kernel's closures hold (data, on an accelerator device memory), so only
# the last few are kept (a method's runs of one kernel come one after another).
_PROGRAMS_KEPT = 4


@functools.lru_cache(maxsize=_PROGRAMS_KEPT)
def _init_program(init: Callable[..., PyTree], mesh: jax.sharding.Mesh):
  return jax.jit(distributed.traced_on(mesh, init), out_shardings=distributed.replicated(mesh))


@functools.lru_cache(maxsize=_PROGRAMS_KEPT)
def _step_program(train_step: Callable[..., Any], mesh: jax.sharding.Mesh,
                  compiler_options: tuple[tuple[str, Any], ...] | None):
  replicated = distributed.replicated(mesh)
  return jax.jit(
      distributed.traced_on(mesh, train_step),
      in_shardings=(replicated, distributed.data_sharding(mesh)),
      out_shardings=(replicated, replicated),
      donate_argnums=(0,),
      compiler_options=None if compiler_options is None else dict(compiler_options))


def _programs(kernel: TrainKernel, mesh: jax.sharding.Mesh,
              compiler_options: Mapping[str, Any] | None):
  """(jitted init, jitted train_step) of ``kernel`` on ``mesh``: the ones an earlier run
  of the same function made, where it can be looked up (a hashable function and options),
  else new ones."""
  options = None if compiler_options is None else tuple(sorted(compiler_options.items()))

  def kept(program, *key):
    try:
      return program(*key)
    except TypeError:  # an unhashable callable or option value: jitted afresh
      return program.__wrapped__(*key)

  return (kept(_init_program, kernel.init, mesh),
          kept(_step_program, kernel.train_step, mesh, options))


def _format_seconds(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(round(seconds))
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _loop_settings(config: ml_collections.ConfigDict) -> tuple[int, int, int]:
  if "loop" not in config:
    raise ValueError("config.loop is missing: expected loop.num_steps (and optionally "
                     "loop.log_every, loop.checkpoint_every)")
  loop = config.loop
  num_steps = int(loop.num_steps)
  if num_steps < 0:
    raise ValueError(f"config.loop.num_steps must be >= 0; got {num_steps}")
  log_every = int(loop.get("log_every", 100) or num_steps or 1)
  checkpoint_every = int(loop.get("checkpoint_every", num_steps) or num_steps or 1)
  if log_every <= 0 or checkpoint_every <= 0:
    raise ValueError("config.loop.log_every and loop.checkpoint_every must be positive; "
                     f"got {log_every} and {checkpoint_every}")
  return num_steps, log_every, checkpoint_every


def run(
    kernel: TrainKernel,
    data: Callable[[int], PyTree] | None,
    config: ml_collections.ConfigDict,
    workdir: str | pathlib.Path | None,
    *,
    mesh: jax.sharding.Mesh | None = None,
    name: str = "train",
    steps_per_call: int = 1,
    compiler_options: Mapping[str, Any] | None = None,
) -> TrainResult:
  """Trains ``kernel`` for ``config.loop.num_steps`` optimiser steps (resuming when possible).

  Args:
    kernel: ``init`` and ``train_step`` pure functions (see :class:`TrainKernel`).
    data: ``data(call) -> batch`` (host arrays, leading global-batch axis divisible by the
      device count, deterministic in the call index ``call``), or None when the kernel
      needs no batch.
    config: a ConfigDict with ``seed`` and ``loop.{num_steps, log_every,
      checkpoint_every}``, all three counted in optimiser steps; everything outside
      ``loop`` must match to resume.
    workdir: folder for checkpoints and metrics, or None to run in memory.
    mesh: defaults to one ``data`` mesh over all devices.
    name: prefix of the progress lines.
    steps_per_call: optimiser steps one ``train_step`` call takes (a kernel built with
      ``blocks.scan_steps``); ``loop.num_steps`` must be a multiple of it. Progress,
      metrics rows and checkpoints are numbered in optimiser steps; a log or checkpoint
      falls on the first call that reaches a multiple of its interval.
    compiler_options: XLA options for the compiled ``train_step`` alone (``jax.jit``'s
      ``compiler_options``; e.g. :func:`jaxlib_papers.core.compiler.cpu_threaded_dots`),
      or None for the backend's defaults.

  Returns:
    A :class:`TrainResult`.

  Raises:
    ValueError: bad loop settings, a batch not divisible by the device count, or a
      workdir holding a checkpoint of a different config.
    FloatingPointError: the loss became NaN or Inf (the message names the step).
  """
  num_steps, log_every, checkpoint_every = _loop_settings(config)
  per_call = int(steps_per_call)
  if per_call < 1 or num_steps % per_call:
    raise ValueError(f"config.loop.num_steps ({num_steps}) must be a multiple of the "
                     f"kernel's optimiser steps per call ({steps_per_call})")
  if "seed" not in config:
    raise ValueError("config.seed is missing")
  mesh = distributed.make_mesh() if mesh is None else mesh
  main = distributed.is_main_process()
  verbose = main and not bool(config.loop.get("quiet", False))

  init_fn, step_fn = _programs(kernel, mesh, compiler_options)
  state = init_fn(jax.random.key(int(config.seed)))
  start = 0
  resumed_from = None
  checkpointer = writer = None
  fingerprint = config_lib.fingerprint(config)

  if workdir is not None:
    from jaxlib_papers.core import checkpoint as checkpoint_lib  # pylint: disable=g-import-not-at-top
    from jaxlib_papers.core import writers  # pylint: disable=g-import-not-at-top
    workdir = pathlib.Path(workdir)
    checkpointer = checkpoint_lib.Checkpointer(workdir / "checkpoints")
    latest = checkpointer.latest_step()
    if latest is not None:
      record = checkpointer.read_record(latest)
      if record.get("config") != fingerprint:
        changes = config_lib.diff(record.get("config", {}), fingerprint)
        checkpointer.close()
        raise ValueError(
            f"workdir {str(workdir)!r} holds a checkpoint (step {latest}) of a different "
            f"config; differing keys: {'; '.join(changes[:10]) or '?'}. Use a new "
            "--workdir, or rerun with the original config to resume.")
      if latest % per_call:
        checkpointer.close()
        raise ValueError(
            f"workdir {str(workdir)!r} holds a checkpoint at step {latest}, not a multiple "
            f"of this kernel's {per_call} optimiser steps per call")
      state, _ = checkpointer.restore(latest, state)
      start = resumed_from = latest
      if verbose:
        print(f"[{name}] resumed from {workdir / 'checkpoints'} at step {latest}", flush=True)
    if main:
      writer = writers.MetricWriter(workdir, resume_step=resumed_from)

  # A resumed run's history starts with the rows the interrupted runs wrote (the file is
  # cut back to the checkpoint by the writer), so results built from it do not depend on
  # whether the run was interrupted.
  history: list[dict[str, float]] = (
      writers.read_jsonl(writer.path) if writer is not None and resumed_from else [])
  pending: list[tuple[int, dict[str, jax.Array]]] = []
  last_saved = start
  interval_start, interval_steps = time.perf_counter(), 0

  def flush_pending() -> None:
    rows = jax.device_get(pending)
    pending.clear()
    for done, metrics in rows:
      loss = float(np.asarray(metrics["loss"]))
      if not math.isfinite(loss):
        where = (f"last good checkpoint: step {last_saved} in {checkpointer.directory}"
                 if checkpointer is not None and last_saved else "no checkpoint written")
        raise FloatingPointError(
            f"[{name}] loss became {loss} at step {done}; stopping ({where}).")
      row = {"step": done, **{k: float(np.asarray(v)) for k, v in metrics.items()}}
      history.append(row)
      if writer is not None:
        writer.write(done, {k: v for k, v in row.items() if k != "step"})

  try:
    crosses = lambda done, every: done // every > (done - per_call) // every
    for step in range(start, num_steps, per_call):
      batch = None
      if data is not None:
        batch = distributed.shard_batch(data(step // per_call), mesh)
      state, metrics = step_fn(state, batch)
      done = step + per_call
      interval_steps += per_call
      pending.append((done, metrics))
      is_log = crosses(done, log_every) or done == num_steps
      is_ckpt = crosses(done, checkpoint_every) or done == num_steps
      if not (is_log or is_ckpt):
        continue
      flush_pending()  # raises on NaN before anything is saved
      if is_log and verbose:
        now = time.perf_counter()
        rate = interval_steps / max(now - interval_start, 1e-9)
        interval_start, interval_steps = now, 0
        eta = (num_steps - done) / rate if rate > 0 else float("inf")
        extra = " | ".join(f"{k} {v:.4g}" for k, v in history[-1].items()
                           if k not in ("step", "loss"))
        print(f"[{name}] step {done}/{num_steps} | loss {history[-1]['loss']:.5g} | "
              f"{rate:.3g} steps/s | ETA {_format_seconds(eta)}"
              + (f" | {extra}" if extra else ""), flush=True)
      if is_ckpt and checkpointer is not None:
        if writer is not None:  # rows up to the checkpoint on disk first: never a gap
          writer.flush()
        checkpointer.save(done, state, {
            "step": done, "config": fingerprint,
            "metrics": {k: v for k, v in history[-1].items() if k != "step"}})
        last_saved = done
        _maybe_kill_after_checkpoint()
    if pending:
      flush_pending()
  finally:
    if writer is not None:
      writer.close()
    if checkpointer is not None:
      checkpointer.close()
  return TrainResult(state=state, history=history, resumed_from=resumed_from)
