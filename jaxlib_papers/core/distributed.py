"""Devices, meshes and multi-host start-up.

The suite runs one SPMD program over one :class:`jax.sharding.Mesh` spanning every device
of every process: the batch is split on the ``data`` axis, parameters are replicated. Past
one machine, :func:`maybe_initialize` starts JAX's own distributed runtime; nothing here
schedules work by hand.
"""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"

_CLUSTER_ENV_VARS = (
    "SLURM_JOB_ID",            # SLURM (GPU clusters)
    "OMPI_COMM_WORLD_SIZE",    # Open MPI
    "TPU_WORKER_HOSTNAMES",    # Cloud TPU pod slices
    "MEGASCALE_COORDINATOR_ADDRESS",
)
_initialized = False


def maybe_initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    cpu_collectives: str | None = None,
) -> bool:
  """Starts ``jax.distributed`` when asked to, or when a cluster environment is detected.

  Call it before anything touches devices. With no arguments and no cluster environment
  it does nothing, so single-process runs need no flags.

  Args:
    coordinator_address: ``host:port`` of process 0; with ``num_processes`` and
      ``process_id`` it starts an explicit multi-process run (e.g. two local processes).
    num_processes: total number of processes.
    process_id: this process's index in ``[0, num_processes)``.
    cpu_collectives: e.g. ``"gloo"`` to let CPU devices of several processes reduce.

  Returns:
    True when the distributed runtime is (now) initialised.
  """
  global _initialized
  if _initialized:
    return True
  explicit = coordinator_address is not None or num_processes is not None
  if explicit:
    if coordinator_address is None or num_processes is None or process_id is None:
      raise ValueError(
          "coordinator_address, num_processes and process_id must be given together; got "
          f"{coordinator_address!r}, {num_processes!r}, {process_id!r}")
    if num_processes < 1 or not 0 <= process_id < num_processes:
      raise ValueError(
          f"process_id must be in [0, num_processes); got {process_id} of {num_processes}")
  elif not any(v in os.environ for v in _CLUSTER_ENV_VARS):
    return False
  if cpu_collectives:
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
  if explicit:
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
  else:
    jax.distributed.initialize()
  _initialized = True
  return True


def is_main_process() -> bool:
  """Only process 0 prints progress and writes metrics."""
  return jax.process_index() == 0


def make_mesh(axis_name: str = DATA_AXIS, devices: list[Any] | None = None) -> Mesh:
  """A 1-D mesh over all devices of all processes (or ``devices``)."""
  devices = jax.devices() if devices is None else list(devices)
  return Mesh(np.asarray(devices), (axis_name,))


def data_sharding(mesh: Mesh, axis_name: str = DATA_AXIS) -> NamedSharding:
  """Leading axis split over ``axis_name``, other axes whole."""
  return NamedSharding(mesh, PartitionSpec(axis_name))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def check_divisible(global_batch: int, mesh: Mesh, what: str = "batch") -> None:
  n = mesh.size
  if global_batch % n:
    raise ValueError(
        f"{what}: leading size {global_batch} must be divisible by the device count {n} "
        f"(mesh {dict(mesh.shape)}); change the batch size or the devices")


def shard_batch(batch: Any, mesh: Mesh, axis_name: str = DATA_AXIS) -> Any:
  """Places a host batch (global leading axis) on the mesh, split along ``axis_name``.

  In a multi-process run each process passes the *global* batch, computed identically
  from the same seed, and keeps only the rows its devices hold; the resulting global array
  is the same whatever the process count.
  """
  sharding = data_sharding(mesh, axis_name)

  def put(x):
    x = np.asarray(x)
    if x.ndim == 0:
      raise ValueError("batch leaves need a leading batch axis; got a scalar")
    check_divisible(x.shape[0], mesh)
    if jax.process_count() == 1:
      return jax.device_put(x, sharding)
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

  return jax.tree.map(put, batch)


def replicate(tree: Any, mesh: Mesh) -> Any:
  """Places a pytree on every device of the mesh."""
  sharding = replicated(mesh)
  if jax.process_count() == 1:
    return jax.device_put(tree, sharding)
  return jax.tree.map(
      lambda x: jax.make_array_from_callback(
          np.shape(x), sharding, lambda idx: np.asarray(x)[idx]), tree)
