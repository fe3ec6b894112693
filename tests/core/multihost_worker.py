"""One process of the multi-process test (run by test_core_multihost.py, not by pytest).

usage: multihost_worker.py PROCESS_ID NUM_PROCESSES PORT LOCAL_DEVICES WORKDIR STEPS OUT
Trains the OCM epsilon-network (DSM) kernel of the suite through core.train_loop to each of
the comma-separated step counts STEPS in turn (each run after the first resumes from the
previous one's checkpoint in WORKDIR) and writes the parameters reached at step n
(process 0) to OUT.<n>.npz.
"""

import os
import sys

pid, nproc, port, ndev = (int(a) for a in sys.argv[1:5])
workdir, stops, out = sys.argv[5], [int(n) for n in sys.argv[6].split(",")], sys.argv[7]
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ndev}").strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxlib_papers.core import distributed  # noqa: E402

if nproc > 1:
  distributed.maybe_initialize(f"127.0.0.1:{port}", nproc, pid, cpu_collectives="gloo")
assert jax.device_count() == nproc * ndev, (jax.device_count(), nproc, ndev)

import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import optax  # noqa: E402

from jaxlib_papers.core import train_loop  # noqa: E402
from jaxlib_papers.ocm import kernel as ocm_kernel  # noqa: E402
from jaxlib_papers.ocm import train as ocm_train  # noqa: E402
from jaxlib_papers.ocm.configs import default  # noqa: E402

# The OCM epsilon network on the smoke mixture, one optimizer step per train_loop step.
config = default.get_config("smoke")
parts = ocm_train.build(config)
dsm = config.dsm
kernel = ocm_kernel.make_dsm_kernel(
    parts["model"], parts["schedule"], optax.adam(dsm.lr),
    jnp.zeros((2, *parts["shape"]), jnp.float32), ema_decay=dsm.ema_decay)
data = parts["make_source"](64, config.seed)  # global batch 64, identical in every process
for num_steps in stops:
  loop_config = ml_collections.ConfigDict({
      "seed": config.seed, "model": config.model.to_dict(), "dsm": dsm.to_dict(),
      "loop": {"num_steps": num_steps, "log_every": 3, "checkpoint_every": 3, "quiet": True}})
  result = train_loop.run(kernel, data, loop_config, workdir)
  leaves = [np.asarray(x) for x in jax.tree.leaves(result.state.params)]
  if pid == 0:
    np.savez(f"{out}.{num_steps}.npz", *leaves)
  print(f"process {pid}: step {num_steps} done, {len(leaves)} leaves", flush=True)
