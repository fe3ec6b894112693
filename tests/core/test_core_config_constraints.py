"""core.config constraints: every bad value named with its key, its value and what is allowed."""

import ml_collections
import pytest

from jaxlib_papers.core import config as config_lib

C = config_lib


def base():
  return {"seed": 0, "optim": {"lr": 1e-3, "steps": 100, "schedule": "cosine"},
          "data": {"kappas": [1.0, 2.0], "path": "", "dropout": 0.1},
          "loop": {"num_steps": 10}}


CONSTRAINTS = {"optim.lr": C.positive(), "optim.steps": C.at_least(1),
               "optim.schedule": C.one_of("cosine", "constant"),
               "data.kappas": C.each(C.positive()), "data.path": C.existing_file(),
               "data.dropout": C.in_range(0.0, 1.0, high_open=True)}


def test_a_good_config_passes_and_every_bad_value_is_named_at_once():
  config = C.make_config("smoke", base(), constraints=CONSTRAINTS)
  assert config.optim.lr == 1e-3
  bad = ml_collections.ConfigDict(base())
  bad.optim.lr = -0.1
  bad.optim.steps = 0
  bad.optim.schedule = "linear"
  bad.data.kappas = [1.0, float("nan")]
  bad.data.path = "/no/such/file.csv"
  bad.data.dropout = 1.0
  with pytest.raises(ValueError) as info:
    C.validate(bad, CONSTRAINTS)
  text = str(info.value)
  for line in ("config.optim.lr = -0.1: expected a number > 0",
               "config.optim.steps = 0: expected an integer >= 1",
               "config.optim.schedule = 'linear': expected one of 'cosine', 'constant'",
               "config.data.kappas = [1.0, nan]: expected a non-empty list of a number > 0",
               "config.data.path = '/no/such/file.csv': expected an existing file",
               "config.data.dropout = 1.0: expected a number in [0.0, 1.0)"):
    assert line in text, text


def test_types_are_part_of_the_constraint():
  assert not C.at_least(1)(2.5) and not C.at_least(1)(True) and C.at_least(1)(3)
  assert not C.positive()("1e-3") and not C.positive()(float("inf"))
  assert C.each(C.positive(), non_empty=False)([]) and not C.each(C.positive())([])


def test_a_constraint_on_a_missing_key_is_a_declaration_error():
  with pytest.raises(KeyError, match=r"config.optim.lrr: no such key; closest: \['optim.lr'"):
    C.validate(ml_collections.ConfigDict(base()), {"optim.lrr": C.positive()})


def test_closest_keys_by_whole_key_and_by_last_part():
  config = ml_collections.ConfigDict(base())
  assert C.closest_keys(config, "optim.lrate")[0] == "optim.lr"
  assert "data.kappas" in C.closest_keys(config, "kappa")
