"""Stages declared as data and one runner (DeepRUOT 1-4, OCM backbone then heads, ...).

A multi-stage method is a tuple of :class:`Stage` rows. :func:`run_stages` runs them in
order through :func:`jaxlib_papers.core.train_loop.run`, each in its own folder of the
workdir (``workdir/<stage name>``) with its own config fingerprint
(:func:`jaxlib_papers.core.config.stage_config`), so a killed run resumes inside the stage
it was in and a finished stage is not trained again. What a stage hands on is declared too
(``carry``): the next stage's kernel factory receives it.

  stages = (
      Stage("pretrain", lambda _: pretrain_kernel, num_steps=1000, groups=("model",)),
      Stage("finetune", lambda params: finetune_kernel(params), num_steps=200,
            carry=lambda state: state.params),
  )
  out = run_stages(stages, config, workdir)
  out.carried, out.states["finetune"], out.histories["pretrain"], out.seconds
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import ml_collections

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import train_loop
from jaxlib_papers.core.contract import TrainKernel

PyTree = Any


def _identity(state: PyTree) -> PyTree:
  return state


class Stage(NamedTuple):
  """One stage of a training program.

  Attributes:
    name: the stage's name (its folder, its progress prefix, its fingerprint's ``stage``).
    make_kernel: ``make_kernel(carried) -> TrainKernel`` from what the previous stage
      handed on (the runner's ``initial`` for the first stage).
    num_steps: optimiser steps (a multiple of ``steps_per_call``); 0 skips the stage and
      hands ``carried`` on unchanged.
    steps_per_call: optimiser steps per compiled call of the kernel's ``train_step``.
    data: ``data(call) -> batch`` or None for batch-free kernels.
    groups: the top-level config groups the stage depends on (its resume fingerprint);
      None: all of them.
    carry: ``carry(final state) -> value`` handed to the next stage.
    loop: extra ``loop`` settings of this stage (``log_every``, ``checkpoint_every``,
      ``quiet``), in optimiser steps; the config's own ``loop`` otherwise.
    compiler_options: XLA options for this stage's compiled ``train_step``
      (``train_loop.run``'s), or None for the backend's defaults.
  """
  name: str
  make_kernel: Callable[[Any], TrainKernel]
  num_steps: int
  steps_per_call: int = 1
  data: Callable[[int], PyTree] | None = None
  groups: tuple[str, ...] | None = None
  carry: Callable[[PyTree], Any] = _identity
  loop: Mapping[str, Any] | None = None
  compiler_options: Mapping[str, Any] | None = None


class StagesResult(NamedTuple):
  carried: Any                                # what the last stage handed on
  states: dict[str, PyTree]                   # final state of every stage that ran
  histories: dict[str, list[dict[str, float]]]  # the loop's rows of every stage that ran
  seconds: dict[str, float]                   # wall seconds of every stage that ran
  resumed_from: dict[str, int | None]         # checkpoint step each stage resumed from


def check_stages(stages: Sequence[Stage]) -> None:
  """Raises a ValueError naming the stage and field of a malformed declaration."""
  names = [s.name for s in stages]
  if len(set(names)) != len(names):
    raise ValueError(f"stage names must be unique; got {names}")
  for s in stages:
    if int(s.num_steps) < 0:
      raise ValueError(f"stage {s.name!r}: num_steps must be >= 0; got {s.num_steps}")
    if int(s.steps_per_call) < 1:
      raise ValueError(f"stage {s.name!r}: steps_per_call must be >= 1; got "
                       f"{s.steps_per_call}")
    if int(s.num_steps) % int(s.steps_per_call):
      raise ValueError(f"stage {s.name!r}: num_steps ({s.num_steps}) must be a multiple "
                       f"of steps_per_call ({s.steps_per_call})")


def stage_loop(config: ml_collections.ConfigDict, stage: Stage) -> dict[str, Any]:
  """The ``loop`` group stage ``stage`` runs with (its steps, the config's cadence)."""
  loop = dict(config.loop.to_dict()) if "loop" in config else {}
  loop.update(dict(stage.loop or {}))
  loop["num_steps"] = int(stage.num_steps)
  return loop


def run_stages(stages: Sequence[Stage], config: ml_collections.ConfigDict,
               workdir: str | pathlib.Path | None, *, initial: Any = None,
               mesh: jax.sharding.Mesh | None = None, name: str = "train"
               ) -> StagesResult:
  """Runs ``stages`` in order, each resumable from its own checkpoints.

  Args:
    stages: the declarations (:class:`Stage`).
    config: the method's config (``seed``, ``loop`` and its groups).
    workdir: the run's folder (stage ``s`` under ``workdir/s``), or None for memory.
    initial: what the first stage's ``make_kernel`` receives.
    mesh: the mesh of every stage (default: the loop's, over all devices).
    name: prefix of the progress lines (``<name>/<stage>``).

  Returns:
    A :class:`StagesResult`.
  """
  check_stages(stages)
  workdir = None if workdir is None else pathlib.Path(workdir)
  carried = initial
  states, histories, seconds, resumed = {}, {}, {}, {}
  for stage in stages:
    if int(stage.num_steps) == 0:
      continue
    kernel = stage.make_kernel(carried)
    cfg = config_lib.stage_config(config, stage.name, groups=stage.groups,
                                  loop=stage_loop(config, stage))
    start = time.perf_counter()
    result = train_loop.run(kernel, stage.data, cfg,
                            None if workdir is None else workdir / stage.name,
                            mesh=mesh, name=f"{name}/{stage.name}",
                            steps_per_call=int(stage.steps_per_call),
                            compiler_options=stage.compiler_options)
    state = jax.block_until_ready(result.state)
    seconds[stage.name] = time.perf_counter() - start
    states[stage.name], histories[stage.name] = state, result.history
    resumed[stage.name] = result.resumed_from
    carried = stage.carry(state)
  return StagesResult(carried, states, histories, seconds, resumed)
