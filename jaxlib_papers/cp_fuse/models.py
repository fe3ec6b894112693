"""A small pre-LN causal transformer language model (flax linen).

``decode=True`` gives the same model one token at a time: attention keys and values of the
earlier positions are kept in the ``cache`` collection (flax's autoregressive cache), so a
decoding step costs one position's forward instead of the whole buffer's.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import nn as core_nn
from jaxlib_papers.core import prng


class Block(nn.Module):
  """Pre-LN block: x + attn(LN x), then x + mlp(LN x). ``x: [B, T, d]``.

  ``decode``: ``x`` is one position ``[B, 1, d]`` and attends to the cached earlier ones
  (``mask`` None).
  """

  num_heads: int
  mlp_dim: int
  decode: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
    h = nn.LayerNorm()(x)
    h = nn.MultiHeadDotProductAttention(num_heads=self.num_heads,
                                         kernel_init=prng.lecun_normal(),
                                         decode=self.decode)(h, h, mask=mask)
    x = x + h
    h = nn.LayerNorm()(x)
    h = core_nn.Dense(self.mlp_dim)(h)
    h = core_nn.Dense(x.shape[-1])(nn.gelu(h))
    return x + h


class CausalLM(nn.Module):
  """``tokens: [B, T] int32 -> logits [B, T, vocab]`` (position t predicts token t + 1).

  With ``decode=True``: ``tokens: [B, 1]``, the next position's token, and ``logits [B, 1,
  vocab]``, the same as the full model's at that position; call ``init`` once with a
  ``[B, max_len]`` input to get the empty ``cache`` (:func:`empty_cache`), then ``apply``
  with ``mutable=["cache"]`` position after position.

  Attributes:
    vocab_size: V.
    d_model: width d.
    num_layers, num_heads, mlp_dim: block sizes.
    max_len: the longest T (learned position embeddings).
    decode: one position per call, with the cache (parameters are the same).
  """

  vocab_size: int
  d_model: int = 64
  num_layers: int = 2
  num_heads: int = 4
  mlp_dim: int = 256
  max_len: int = 64
  decode: bool = False

  @nn.compact
  def __call__(self, tokens: jax.Array) -> jax.Array:
    length = tokens.shape[-1]
    if length > self.max_len:
      raise ValueError(f"tokens has length {length} > max_len={self.max_len}")
    x = nn.Embed(self.vocab_size, self.d_model)(tokens)
    pos = self.param("pos_embed", nn.initializers.normal(0.02), (self.max_len, self.d_model))
    if self.decode:
      # The position of this call's token (counted like the attention caches' index).
      initialized = self.has_variable("cache", "position")
      position = self.variable("cache", "position", lambda: jnp.zeros((), jnp.int32))
      x = x + jax.lax.dynamic_slice_in_dim(pos, position.value, length, axis=0)
      if initialized:
        position.value = position.value + length
      mask = None
    else:
      x = x + pos[:length]
      mask = nn.make_causal_mask(jnp.ones(tokens.shape, bool))
    for _ in range(self.num_layers):
      x = Block(self.num_heads, self.mlp_dim, self.decode)(x, mask)
    x = nn.LayerNorm()(x)
    return core_nn.Dense(self.vocab_size)(x)


def empty_cache(model: CausalLM, batch: int) -> dict:
  """The empty decoding cache of ``model`` (any ``decode``) for ``batch`` rows.

  Returns:
    The ``cache`` collection of ``model.clone(decode=True)``: per attention layer keys and
    values ``[batch, max_len, heads, d / heads]`` (zeros) and the position counters (0).
  """
  decoder = model.clone(decode=True)
  tokens = jnp.zeros((batch, model.max_len), jnp.int32)
  shapes = jax.eval_shape(lambda: decoder.init(jax.random.key(0), tokens))["cache"]
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
