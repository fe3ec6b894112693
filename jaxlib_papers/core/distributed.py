"""Devices, meshes and multi-host start-up.

The suite runs one SPMD program over one :class:`jax.sharding.Mesh` spanning every device
of every process: the batch is split on the ``data`` axis, parameters are replicated. Past
one machine, :func:`maybe_initialize` starts JAX's own distributed runtime; nothing here
schedules work by hand.

Inside a program, a kernel whose batch is not an input (AERCA's lag windows of one series,
a vmapped member axis) says which axis of an intermediate array to split with
:func:`split`; the train loop traces its kernel under the mesh (:func:`traced_on`), so that
request reaches XLA's partitioner, and it is a no-op wherever no mesh (or a mesh of one
device) is in scope: the same kernel runs unchanged on one device, eagerly, or under
``jax.jit`` alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Callable, Iterator
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
# mesh axes an enclosing split already uses while a program is traced (:func:`axis_taken`)
_TAKEN: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "jaxlib_papers_axes_taken", default=frozenset())


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


def traced_on(mesh: Mesh, fn: Callable[..., Any]) -> Callable[..., Any]:
  """``fn`` traced with ``mesh`` as the program's mesh (jax's abstract mesh), so that the
  :func:`split` calls inside it, made while ``jax.jit`` traces it, see the mesh's axes.
  Wrap the function before jitting it (``jax.jit(traced_on(mesh, step))``)."""
  abstract = mesh.abstract_mesh

  @functools.wraps(fn)
  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(abstract):
      return fn(*args, **kwargs)

  return traced


def split_count(axis_name: str = DATA_AXIS) -> int:
  """Devices on ``axis_name`` of the mesh being traced under (:func:`traced_on`); 1 when
  there is no such mesh or axis, or an enclosing split already uses the axis
  (:func:`axis_taken`)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or axis_name not in mesh.axis_names or axis_name in _TAKEN.get():
    return 1
  return int(mesh.shape[axis_name])


@contextlib.contextmanager
def axis_taken(axis_name: str = DATA_AXIS) -> Iterator[None]:
  """While tracing inside it, :func:`split` over ``axis_name`` is a no-op (an outer axis,
  such as ``blocks.vmap_members``' member axis, is already split over those devices)."""
  token = _TAKEN.set(_TAKEN.get() | {axis_name})
  try:
    yield
  finally:
    _TAKEN.reset(token)


def split(x: Any, axis: int = 0, axis_name: str = DATA_AXIS) -> Any:
  """``x`` with its axis ``axis`` split over the devices of ``axis_name`` (XLA's partitioner
  computes each device's part there and moves data only where an operation needs it).

  A no-op (``x`` itself) unless ``x`` is being traced under a mesh whose ``axis_name``
  has more than one device and no enclosing split uses it (:func:`split_count`). The
  axis need not divide evenly (XLA pads the last part). It changes where values are
  computed, not what they are: results equal the unsplit program's up to float rounding.
  """
  if split_count(axis_name) == 1 or not isinstance(x, jax.core.Tracer):
    return x
  if not -x.ndim <= axis < x.ndim:
    raise ValueError(f"axis must be in [-{x.ndim}, {x.ndim}) for an array of shape "
                     f"{x.shape}; got {axis}")
  spec = [None] * x.ndim
  spec[axis] = axis_name
  return jax.lax.with_sharding_constraint(x, PartitionSpec(*spec))


def per_device(fn: Callable[[Any, Any], Any], batch_axis: int | None = None,
               axis_name: str = DATA_AXIS) -> Callable[[Any, Any], Any]:
  """``fn(state, batch)`` run by every device of ``axis_name`` on its own part (``shard_map``).

  The leading axis of ``state`` (and axis ``batch_axis`` of ``batch``; None: every device
  sees the whole batch) is split over the devices; each device calls ``fn`` on its
  ``[R / devices, ...]`` part, and the outputs' leading axes are joined again. Nothing
  crosses devices unless ``fn`` asks for it. Call it while tracing under a mesh of several
  devices (:func:`split_count` > 1) whose device count divides the leading axis.

  ``fn``'s values are taken as every device's own (no replication typing, ``check_vma``
  off): a member's loop may start from a value all devices share (a stage's data) and carry
  a per-device one (its params) on, which the typed ``shard_map`` rejects as a carry whose
  type changes, and a gradient ``fn`` takes stays the device's own, never summed over them.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or axis_name not in mesh.axis_names:
    raise ValueError(f"per_device needs a mesh with axis {axis_name!r} in scope "
                     "(trace under distributed.traced_on)")
  batch_spec = (PartitionSpec() if batch_axis is None
                else PartitionSpec(*([None] * batch_axis + [axis_name])))
  return jax.shard_map(fn, mesh=mesh, in_specs=(PartitionSpec(axis_name), batch_spec),
                       out_specs=PartitionSpec(axis_name), check_vma=False)
