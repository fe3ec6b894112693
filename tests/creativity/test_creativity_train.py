"""The experiment at smoke size through the reproduction check, and its config errors."""

import pytest

from jaxlib_papers.core import reproduce
from jaxlib_papers.creativity import reproduce as creativity_reproduce
from jaxlib_papers.creativity import train
from jaxlib_papers.creativity.configs import default


@pytest.fixture(scope="module")
def smoke_claims(tmp_path_factory):
  ctx = reproduce.Context("smoke", tmp_path_factory.mktemp("report"), name="creativity")
  return creativity_reproduce.check(ctx), ctx.report_dir


def test_smoke_check_holds_and_writes_its_report(smoke_claims):
  claims, report = smoke_claims
  assert claims and all(c.holds for c in claims), claims
  assert "0 m / 0 cov / 0 span mismatches" in claims[0].ours
  assert (report / "creativity_coverage.png").is_file()
  assert (report / "creativity.json").is_file()


@pytest.mark.parametrize("key,value,message", [
    ("index.max_ngram", 14, "config.index.width = 12: below Lmax = 14"),
    ("index.min_ngram", 11, "config.index: Lmin = 11 > Lmax = 10"),
    ("data.text_length", 2, "config.data.text_length = 2: shorter than Lmin = 3"),
])
def test_config_errors_name_the_key(key, value, message):
  config = default.get_config("smoke")
  group, leaf = key.split(".")
  config[group][leaf] = value
  with pytest.raises(ValueError, match=message.replace(".", r"\.")):
    train.run(config, None)
