"""core.prng draws are jax.random's draws, bit for bit, wherever they run."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from jaxlib_papers.core import prng

SHAPES = [(), (7,), (2, 3, 5), (4, 1, 3, 2)]

DRAWS = {
    "normal": (lambda k, s: prng.normal(k, s, jnp.float32),
               lambda k, s: jax.random.normal(k, s, jnp.float32)),
    "uniform": (lambda k, s: prng.uniform(k, s, jnp.float32, -2.0, 3.0),
                lambda k, s: jax.random.uniform(k, s, jnp.float32, -2.0, 3.0)),
    "randint": (lambda k, s: prng.randint(k, s, -3, 11),
                lambda k, s: jax.random.randint(k, s, -3, 11)),
    "laplace": (lambda k, s: prng.laplace(k, s),
                lambda k, s: jax.random.laplace(k, s)),
    "bernoulli": (lambda k, s: prng.bernoulli(k, 0.3, s),
                  lambda k, s: jax.random.bernoulli(k, 0.3, s)),
    "truncated_normal": (lambda k, s: prng.truncated_normal(k, -1.5, 2.0, s),
                         lambda k, s: jax.random.truncated_normal(k, -1.5, 2.0, s)),
    "gumbel": (lambda k, s: prng.gumbel(k, s),
               lambda k, s: jax.random.gumbel(k, s)),
    "rademacher": (lambda k, s: prng.rademacher(k, s, jnp.float32),
                   lambda k, s: jax.random.rademacher(k, s, jnp.float32)),
    # logits of shape [*s, 5]: one draw per row
    "categorical": (lambda k, s: prng.categorical(k, jnp.arange(5.0) * jnp.ones(s + (5,))),
                    lambda k, s: jax.random.categorical(k, jnp.arange(5.0) * jnp.ones(s + (5,)))),
}


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_equal_to_jax_random_eager_jit_and_vmap(name):
  ours, theirs = DRAWS[name]
  key = jax.random.key(3)
  for shape in SHAPES:
    np.testing.assert_array_equal(np.asarray(jax.jit(ours, static_argnums=1)(key, shape)),
                                  np.asarray(jax.jit(theirs, static_argnums=1)(key, shape)))
  # Eagerly (op by op: one small compile per op and shape, hence two shapes): a scalar and
  # a multi-axis shape with a singleton axis.
  for shape in (SHAPES[0], SHAPES[-1]):
    np.testing.assert_array_equal(np.asarray(ours(key, shape)), np.asarray(theirs(key, shape)))
  keys = jax.random.split(key, 3)
  np.testing.assert_array_equal(
      np.asarray(jax.vmap(lambda k: ours(k, (4, 2)))(keys)),
      np.asarray(jax.vmap(lambda k: theirs(k, (4, 2)))(keys)))


def test_float64_and_array_probability():
  key = jax.random.key(0)
  with jax.enable_x64(True):
    np.testing.assert_array_equal(np.asarray(prng.normal(key, (5, 3), jnp.float64)),
                                  np.asarray(jax.random.normal(key, (5, 3), jnp.float64)))
  p = jnp.linspace(0.0, 1.0, 6)
  np.testing.assert_array_equal(np.asarray(prng.bernoulli(key, p, (4, 6))),
                                np.asarray(jax.random.bernoulli(key, p, (4, 6))))
  np.testing.assert_array_equal(np.asarray(prng.bernoulli(key, p)),
                                np.asarray(jax.random.bernoulli(key, p)))
  logits = jnp.log(jnp.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]))
  for kwargs in ({"axis": 0}, {"shape": (7, 2)}):
    np.testing.assert_array_equal(np.asarray(prng.categorical(key, logits, **kwargs)),
                                  np.asarray(jax.random.categorical(key, logits, **kwargs)))
  np.testing.assert_array_equal(
      np.asarray(prng.categorical(key, logits[0], shape=(9,))),
      np.asarray(jax.random.categorical(key, logits[0], shape=(9,))))


def test_sharded_draw_equals_single_device():
  mesh = jax.make_mesh((jax.device_count(),), ("data",))
  sharding = NamedSharding(mesh, PartitionSpec("data"))
  shape = (2 * jax.device_count(), 4, 3, 2)
  draw = jax.jit(lambda k: prng.normal(k, shape), out_shardings=sharding)
  out = draw(jax.random.key(5))
  assert out.sharding.is_equivalent_to(sharding, len(shape))
  np.testing.assert_array_equal(np.asarray(out),
                                np.asarray(jax.random.normal(jax.random.key(5), shape)))
  # Each device computes only its own slice: no array of the per-device program holds more
  # than its share of the numbers (the flat draw is partitioned like the shaped one, not
  # computed whole), and the largest holds all of it.
  hlo = draw.lower(jax.random.key(5)).compile().as_text()
  sizes = [int(np.prod([int(d) for d in dims.split(",") if d]))
           for dims in re.findall(r"(?:f32|u32)\[([0-9,]*)\]", hlo)]
  assert max(sizes) == int(np.prod(shape)) // jax.device_count()


def test_array_bounds_are_refused_with_the_argument_named():
  with pytest.raises(ValueError, match="minval must be a scalar"):
    prng.uniform(jax.random.key(0), (3, 2), minval=jnp.zeros(2))


def test_lecun_normal_is_flax_default_kernel_init():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  key = jax.random.key(1)
  for shape in [(3, 4), (10, 128), (3, 3, 8, 16), (5, 2, 6)]:
    np.testing.assert_array_equal(np.asarray(prng.lecun_normal()(key, shape)),
                                  np.asarray(nn.initializers.lecun_normal()(key, shape)))
  x = jnp.ones((2, 5))
  ours = nn.Dense(7, kernel_init=prng.lecun_normal()).init(key, x)
  theirs = nn.Dense(7).init(key, x)
  jax.tree.map(np.testing.assert_array_equal, ours, theirs)


def test_package_code_draws_through_core_prng():
  # A multi-axis jax.random draw costs 1-2 s of XLA:CPU compile per site (module
  # docstring); the package draws through core.prng so new code does not bring it back.
  import pathlib  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(__file__).resolve().parents[2] / "jaxlib_papers"
  pattern = re.compile(r"jax\.random\.(normal|uniform|randint|bernoulli|laplace|gumbel|"
                       r"rademacher|categorical|truncated_normal)\(")
  offenders = [f"{path.relative_to(root)}:{i}" for path in sorted(root.rglob("*.py"))
               if path.name != "prng.py"
               for i, line in enumerate(path.read_text().splitlines(), 1)
               if pattern.search(line)]
  assert not offenders, offenders
