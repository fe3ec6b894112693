"""A training run to kill: ``python fault_worker.py WORKDIR OUT.npz [KILL]``.

Trains a small MLP regression through ``core.train_loop`` with a checkpoint every 2 steps
and writes the final parameters to OUT.npz. KILL makes the process SIGKILL itself:

* ``step:K``: while fetching the batch of step K (between checkpoints: work is lost);
* ``save:K``: inside orbax's save of step K, after the state item is written and
  finalized but before the checkpoint is committed (a half-written checkpoint on disk).
"""

import os
import signal
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import jaxlib_papers  # noqa: E402,F401  (XLA:CPU work-around first)
from jaxlib_papers.core import checkpoint, contract, train_loop  # noqa: E402

NUM_STEPS = 10


def make_kernel():
  opt = optax.adam(3e-2)

  def init(key):
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"w1": jax.random.normal(k1, (4, 16)) / 2, "w2": jax.random.normal(k2, (16, 1)) / 4}
    return (jnp.zeros((), jnp.int32), params, opt.init(params), k3)

  def train_step(state, batch):
    step, params, opt_state, key = state
    key, noise_key = jax.random.split(key)

    def loss_fn(p):
      x = batch["x"] + 0.05 * jax.random.normal(noise_key, batch["x"].shape)
      pred = jnp.tanh(x @ p["w1"]) @ p["w2"]
      return jnp.mean((pred[:, 0] - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return (step + 1, optax.apply_updates(params, updates), opt_state, key), {"loss": loss}

  return contract.train_kernel(init, train_step)


def main(workdir, out, kill=None):
  mode, kill_step = (kill.split(":")[0], int(kill.split(":")[1])) if kill else (None, -1)
  suicide = lambda: os.kill(os.getpid(), signal.SIGKILL)  # noqa: E731

  def data(step):
    if mode == "step" and step == kill_step:
      suicide()
    rng = np.random.default_rng(step)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    return {"x": x, "y": np.sin(x.sum(1)).astype(np.float32)}

  if mode == "save":
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
    original_save, original_finalize = checkpoint.Checkpointer.save, (
        ocp.StandardCheckpointHandler.finalize)
    current = {}

    def save(self, step, state, record):
      current["step"] = int(step)
      return original_save(self, step, state, record)

    def finalize(self, directory):
      original_finalize(self, directory)
      if current.get("step") == kill_step:
        suicide()

    checkpoint.Checkpointer.save = save
    ocp.StandardCheckpointHandler.finalize = finalize

  config = ml_collections.ConfigDict(
      {"seed": 3, "loop": {"num_steps": NUM_STEPS, "log_every": 100, "checkpoint_every": 2,
                           "quiet": True}})
  result = train_loop.run(make_kernel(), data, config, workdir)
  params = jax.device_get(result.state[1])
  initial = jax.device_get(make_kernel().init(jax.random.key(int(config.seed)))[1])
  np.savez(out, **params, **{f"init_{k}": v for k, v in initial.items()})


if __name__ == "__main__":
  main(*sys.argv[1:])
