"""The VQ tokenizer (a k-means codebook of image patches) and the VQ config end to end."""

import numpy as np
import pytest

from jaxlib_papers.cca import data, plotting, train
from jaxlib_papers.cca.configs import vq


def _images(n=40, seed=0):
  return np.random.default_rng(seed).integers(0, 17, size=(n, 64)).astype(np.float32)


def test_encode_picks_the_nearest_centroid_and_decode_places_patches_in_raster_order():
  x = _images()
  book = data.fit_codebook(x, 16, patch=2, seed=0)
  assert book.centroids.shape == (16, 4) and book.patch == 2
  tokens = data.encode(book, x)
  assert tokens.shape == (40, 16) and tokens.dtype == np.int32
  # Brute force: patch (i, j) of image n is x[n].reshape(8, 8)[2i:2i+2, 2j:2j+2].
  img = x[3].reshape(8, 8)
  for t, (i, j) in enumerate((i, j) for i in range(4) for j in range(4)):
    patch = img[2 * i:2 * i + 2, 2 * j:2 * j + 2].reshape(-1)
    dist = ((book.centroids - patch) ** 2).sum(-1)
    assert dist[tokens[3, t]] == pytest.approx(dist.min(), abs=1e-4)
  # Decoding then encoding is the identity on tokens (every centroid is its own nearest).
  codes = np.random.default_rng(1).integers(0, 16, size=(5, 16)).astype(np.int32)
  np.testing.assert_array_equal(data.encode(book, data.decode(book, codes)), codes)
  # A constant-patch image decodes patch by patch to the right 2 x 2 blocks.
  one = data.decode(book, np.arange(16, dtype=np.int32)[None] % 16).reshape(8, 8)
  np.testing.assert_allclose(one[2:4, 4:6].reshape(-1), book.centroids[6])


def test_load_vq_keeps_the_raster_split_and_is_deterministic():
  raster = data.load(5)
  a = data.load(tokenizer="vq", codebook_size=64, patch=2)
  b = data.load(tokenizer="vq", codebook_size=64, patch=2)
  np.testing.assert_array_equal(a.train_labels, raster.train_labels)
  np.testing.assert_array_equal(a.test_labels, raster.test_labels)
  np.testing.assert_array_equal(a.train_tokens, b.train_tokens)
  assert a.train_tokens.shape == (1437, 16) and a.levels == 64
  assert 0 <= a.train_tokens.min() and a.train_tokens.max() < 64
  # Reconstructions are close to the lossless digits (intensities 0..16).
  lossless = data.load(17)
  err = data.images(a, a.test_tokens) - data.images(lossless, lossless.test_tokens)
  assert np.sqrt(np.mean(err ** 2)) < 2.0
  assert data.images(raster, raster.test_tokens).max() == 16.0


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokenizer="vq", patch=3), "patch must divide 8"),
    (dict(tokenizer="pixels"), "tokenizer must be one of"),
    (dict(tokenizer="vq", patch=8, codebook_size=5000), "codebook_size must be in"),
])
def test_bad_tokenizer_settings_raise_naming_the_argument(kwargs, match):
  with pytest.raises(ValueError, match=match):
    data.load(**kwargs)


def test_vq_config_smoke_run_samples_16_tokens_and_draws(tmp_path):
  config = vq.get_config("smoke")
  assert config.data.tokenizer == "vq" and config.preset == "smoke"
  result = train.run(config, None)
  assert result.samples["base"].shape == (2, 80, 16)
  assert result.digits.codebook.centroids.shape == (32, 4)
  for row in result.metrics.values():
    assert all(np.all(np.isfinite(v)) for v in row.values())
  plotting.figure(result, tmp_path / "vq.png")
  assert (tmp_path / "vq.png").stat().st_size > 1000
  assert vq.get_config("cpu").data.codebook_size == 512
  assert vq.get_config("full").num_seeds == 5
