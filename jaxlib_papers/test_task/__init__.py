"""Training on the test task confounds evaluation and emergence (Dominguez-Olmedo, Dorner,
Hardt; ICLR 2025).

The paper's own evaluations of 53 language models (``data.fetch_table``: 337 files fetched
from the official repository at a pinned commit, sha256-checked), and its four analyses as
float64 JAX fits (``kernel``): the confound fit A - r = alpha max(0, log10 C - c_e) + theta N
with c_e found by an exact vmapped grid search and classical OLS inference (both R^2 forms),
its bootstrap over models (c_e refitted, vmapped), the appendix regressions (psi, phi), the
Pareto-front areas and the emergence points per fine-tuning budget. ``evaluate.analyse``
runs them on a table; ``toy`` trains a generated world that shows the mechanism (also the
offline fallback); ``train.run(config, workdir)`` does both; ``test_task.plotting`` draws Figure 1,
the emergence rows and the Pareto fronts.
"""

from jaxlib_papers.test_task import configs, data, evaluate, kernel, toy, train
from jaxlib_papers.test_task.configs import default as _default  # noqa: F401  (configs.default)
from jaxlib_papers.test_task.data import ModelTable, fetch_table, load_table
from jaxlib_papers.test_task.evaluate import AnalysisSettings, BenchmarkResult, analyse
from jaxlib_papers.test_task.kernel import (
    BootstrapSettings,
    EmergenceFit,
    HingeFit,
    OLSFit,
    bootstrap_hinge,
    fit_emergence,
    fit_hinge,
    ols,
    pareto_area,
    segmented_features,
)
from jaxlib_papers.test_task.toy import ToySettings, run_toy

__all__ = [
    "AnalysisSettings", "BenchmarkResult", "BootstrapSettings", "EmergenceFit", "HingeFit",
    "ModelTable", "OLSFit", "ToySettings", "analyse", "bootstrap_hinge", "configs", "data",
    "evaluate", "fetch_table", "fit_emergence", "fit_hinge", "kernel", "load_table", "ols",
    "pareto_area", "run_toy", "segmented_features", "toy", "train",
]
