"""core.compiler: per-program XLA options reach the compiler and keep the function."""

import json
import os
import subprocess
import sys

import pytest

from jaxlib_papers.core import compiler

# Run with XLA's default emitters (the test session's XLA_FLAGS switch YNNPACK's fusions
# off everywhere, so the default program there has none to remove).
_COMPARE = """
import json
import jax, jax.numpy as jnp
import numpy as np
from jaxlib_papers.core import compiler
x = jax.random.normal(jax.random.key(0), (256, 128))
w = jax.random.normal(jax.random.key(1), (128, 128)) / 11.3
loss = lambda w, x: jnp.mean(jax.nn.silu(jax.nn.silu(x @ w) @ w) ** 2)
grad = jax.grad(loss)
options = compiler.cpu_threaded_dots()
default = jax.jit(grad).lower(w, x).compile()
threaded = jax.jit(grad, compiler_options=options).lower(w, x).compile()
a, b = np.asarray(default(w, x)), np.asarray(threaded(w, x))
print(json.dumps({"options": options, "default_ynn": "__ynn_fusion" in default.as_text(),
                  "threaded_ynn": "__ynn_fusion" in threaded.as_text(),
                  "max_rel": float(np.max(np.abs(a - b)) / np.max(np.abs(a)))}))
"""


def test_the_option_takes_the_dots_out_of_ynnpack_and_keeps_the_function():
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
           if f.startswith("--xla_force_host_platform_device_count")]
  env = {**os.environ, "XLA_FLAGS": " ".join(flags), "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-c", _COMPARE], env=env, check=True, timeout=300,
                       capture_output=True, text=True).stdout
  got = json.loads(out.strip().splitlines()[-1])
  assert got["options"] == {"xla_cpu_experimental_ynn_fusion_type": ""}
  assert got["default_ynn"] and not got["threaded_ynn"]
  assert got["max_rel"] < 1e-5


def test_threaded_dots_only_on_cpu_and_not_over_the_users_own_flag(monkeypatch):
  monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
  assert compiler.cpu_threaded_dots("cpu") == {"xla_cpu_experimental_ynn_fusion_type": ""}
  assert compiler.named("cpu_threaded_dots") is not None
  assert compiler.cpu_threaded_dots("gpu") is None
  assert compiler.named("default") is None
  monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_experimental_ynn_fusion_type=-reduce")
  assert compiler.cpu_threaded_dots("cpu") is None
  with pytest.raises(ValueError, match="cpu_threaded_dots"):
    compiler.named("fast")
