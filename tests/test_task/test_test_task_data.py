"""The manifest-driven registry (``core.datasets.MANIFESTS``) and the model table.

The files are read from the shared folder (``$JAXLIB_PAPERS_DATA_DIR``, tests/conftest.py);
a test that needs them skips where it is absent. Downloads go through a local mirror
(``$JAXLIB_PAPERS_DATA_URL=file://...``), never the network.
"""

import os
import pathlib
import shutil

import numpy as np
import pytest

from jaxlib_papers.core import datasets
from jaxlib_papers.test_task import data as data_lib

SHARED = pathlib.Path(os.environ.get(datasets.ENV_DATA_DIR, "/nonexistent"))
needs_data = pytest.mark.skipif(not (SHARED / data_lib.PREFIX / data_lib.TABLES).is_file(),
                                reason="the shared test_task files are not here")
PACKAGE_LISTING = pathlib.Path(data_lib.__file__).parent / "MANIFEST.tsv"


def test_manifest_is_one_registry_entry_expanded_into_its_files():
  manifest = next(m for m in datasets.MANIFESTS if m.prefix == data_lib.PREFIX)
  assert manifest.listing == PACKAGE_LISTING
  names = data_lib.manifest_names()
  assert len(names) == 337 and len(set(names)) == 337
  files = [datasets.entry(n) for n in names]
  assert sum(f.size for f in files) == 14_849_513
  assert {f.commit for f in files} == {"c357810e554ab33207a1578729659e01695923f2"}
  assert files[0].upstream_url == ("https://raw.githubusercontent.com/socialfoundations/"
                                   "training-on-the-test-task/c357810e554ab33207a1578729659e0"
                                   "1695923f2/notebooks/utils.py")
  shared_listing = SHARED / data_lib.PREFIX / "MANIFEST.tsv"
  if shared_listing.is_file():  # the package's copy is the shared one
    assert shared_listing.read_text() == PACKAGE_LISTING.read_text()


def test_a_malformed_listing_is_named_with_its_line(tmp_path):
  listing = tmp_path / "MANIFEST.tsv"
  listing.write_text("path\tbytes\tsha256\nnotebooks/utils.py\t12\tnot-a-hash\n")
  bad = datasets.Manifest("x", "o/r", "0" * 40, listing, "test")
  with pytest.raises(ValueError, match=r"MANIFEST.tsv:2: expected"):
    bad.files()
  with pytest.raises(ValueError, match="unknown manifest 'nope'"):
    datasets.manifest_names("nope")


@needs_data
def test_a_file_with_the_wrong_hash_is_an_error_naming_it(tmp_path):
  name = f"{data_lib.PREFIX}/{data_lib.TABLES}"
  copy = tmp_path / name
  copy.parent.mkdir(parents=True)
  copy.write_bytes((SHARED / name).read_bytes()[:-1] + b"#")
  with pytest.raises(datasets.DataIntegrityError, match=rf"{name}: .* does not match"):
    datasets.fetch(name, data_dir=tmp_path)


@needs_data
def test_download_through_a_mirror_is_checked_and_never_half_written(tmp_path, monkeypatch):
  good = f"{data_lib.PREFIX}/notebooks/evaluations/base/llama-2-7b-gsm8k.json"
  bad = f"{data_lib.PREFIX}/notebooks/evaluations/base/llama-2-7b-mmlu.json"
  mirror, cache = tmp_path / "mirror", tmp_path / "cache"
  for name in (good, bad):
    (mirror / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SHARED / name, mirror / name)
  with open(mirror / bad, "ab") as f:
    f.write(b" ")  # one byte too many
  monkeypatch.delenv(datasets.ENV_DATA_DIR, raising=False)
  monkeypatch.delenv(datasets.ENV_OFFLINE, raising=False)
  monkeypatch.setenv(datasets.ENV_CACHE, str(cache))
  monkeypatch.setenv(datasets.ENV_URL, mirror.as_uri())
  assert datasets.locate(good) == (cache / good, "fetched")
  with pytest.raises(datasets.DataIntegrityError, match=rf"{bad}: the download .*not kept"):
    datasets.fetch(bad)
  assert sorted(p.name for p in (cache / bad).parent.iterdir()) == [pathlib.Path(good).name]
  # Offline, a file not in the cache is named with where to put it.
  monkeypatch.setenv(datasets.ENV_OFFLINE, "1")
  with pytest.raises(datasets.DataUnavailable, match=rf"{bad}: not found locally"):
    datasets.fetch(bad)


@pytest.fixture(scope="module")
def paths():
  if not (SHARED / data_lib.PREFIX / data_lib.TABLES).is_file():
    pytest.skip("the shared test_task files are not here")
  return data_lib.fetch_files()


def test_the_table_has_53_models_19_newer_and_the_step_columns(paths):
  table = data_lib.load_table(paths)
  assert len(table.models) == 53 and table.new.sum() == 19
  assert "gpt-neo-1.3b" not in table.models  # in e3/mmluaux only, not in the tables
  for model in ("yi-6b", "ziya2-13b-base"):  # released 2311: counted as newer, as the code
    assert table.new[table.models.index(model)] == 1
  finite = {c: int(np.isfinite(v).sum()) for c, v in table.scores.items()}
  assert finite == {"mmlu_pre": 53, "gsm8k_pre": 53, "mmlu_ft": 53, "gsm8k_ft": 53,
                    "mmlu_s1000": 34, "gsm8k_s250": 30, "gsm8k_s1000": 30, "gsm8k_s25000": 30}
  assert np.all(table.new[np.isfinite(table.scores["mmlu_s1000"])] == 0)
  llama = table.models.index("llama-2-7b")
  np.testing.assert_allclose(table.compute[llama], 6e18 * 7 * 2000)
  aggregate = data_lib.load_table(paths, models=["llama-2-7b"], mmlu_metric="aggregate")
  assert aggregate.scores["mmlu_pre"][0] != table.scores["mmlu_pre"][llama]


def test_a_missing_evaluation_file_is_named(paths):
  missing = "notebooks/evaluations/e3/gsm8kaux/llama-2-7b-gsm8k.json"
  partial = {k: v for k, v in paths.items() if k != missing}
  with pytest.raises(FileNotFoundError, match=rf"'llama-2-7b': evaluation file {missing}"):
    data_lib.load_table(partial)
  with pytest.raises(FileNotFoundError, match="notebooks/utils.py not found"):
    data_lib.load_table({k: v for k, v in partial.items() if k != data_lib.TABLES})


def test_a_model_absent_from_the_metadata_is_named(paths, tmp_path):
  with pytest.raises(KeyError, match="'no-such-model' is absent from the metadata table"):
    data_lib.load_table(paths, models=["no-such-model"])
  # A model with parameters and tokens but no release date (and the file is parsed with
  # ast, never run: the statement at its top would stop any import).
  tables = tmp_path / "utils.py"
  tables.write_text("raise SystemExit('never executed')\n"
                    + paths[data_lib.TABLES].read_text().replace(
                        "model2compute = {", "model2compute = {'mystery-7b': {'N': 7, 'D': 1},",
                        1))
  with pytest.raises(KeyError, match="'mystery-7b' is absent from the metadata table "
                                     "model2date"):
    data_lib.load_table({**paths, data_lib.TABLES: tables})


def test_malformed_files_are_named(paths, tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text('{"results": {"gsm8k": {}}}')
  with pytest.raises(ValueError, match=r"bad.json: no numeric results.gsm8k"):
    data_lib.gsm8k_accuracy(bad)
  bad.write_text("not json")
  with pytest.raises(ValueError, match="bad.json: not an lm-eval results file"):
    data_lib.mmlu_accuracy(bad)
  tables = tmp_path / "utils.py"
  tables.write_text("model2compute = {'m': {'N': -1, 'D': 2}}\nmodel2date = {'m': '2301'}\n")
  with pytest.raises(ValueError, match=r"model2compute\['m'\]"):
    data_lib.read_tables(tables)
  with pytest.raises(FileNotFoundError, match="is not a folder"):
    data_lib.load_table(tmp_path / "nowhere")
