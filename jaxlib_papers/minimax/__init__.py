"""LEN: second-order min-max optimization with lazy Hessians (Chen, Liu, Zhang, ICLR 2025).

Solvers (pure, jittable ``solve(z0)`` functions, one ``lax.while_loop`` each, float64):
``make_len`` (LEN), ``make_eg2`` (m = 1), ``make_eg``, ``make_len_restart``; LEN and EG as
``core.contract.Solver`` objects (``len_solver``, ``eg_solver``) over one typed
``LoopState``. ``train.solve`` jits one in float64; ``train.run(config, workdir)`` runs a
config (checked first by ``train.settings_from_config``) and returns a typed
``train.RunResult``; its figures are in ``plotting``. Problems: ``cubic_bilinear`` (exact
saddle), ``fairness_logistic``, ``from_objective`` (any f(x, y)).
"""

from jaxlib_papers.minimax import configs, data, kernel, problems, train
from jaxlib_papers.minimax.configs import default as _default  # noqa: F401  (configs.default)
from jaxlib_papers.minimax.data import (
    FairnessData,
    generated_fairness_data,
    load_heart,
    read_libsvm,
)
from jaxlib_papers.minimax.kernel import (
    FACTORIZATIONS,
    LoopState,
    RestartResult,
    SolveResult,
    eg_solver,
    find_regularization,
    len_solver,
    make_eg,
    make_eg2,
    make_len,
    make_len_restart,
    make_len_sweep,
    make_solver,
    num_restarts,
    official_reg_weight,
    restart_iterations,
    solve_subproblem,
)
from jaxlib_papers.minimax.problems import (
    MinimaxProblem,
    cubic_bilinear,
    fairness_logistic,
    from_objective,
    safe_norm,
)
from jaxlib_papers.minimax.train import solve

__all__ = [
    "FACTORIZATIONS", "FairnessData", "LoopState", "MinimaxProblem", "RestartResult",
    "SolveResult", "configs", "data", "eg_solver", "kernel", "len_solver", "problems",
    "solve", "train",
    "cubic_bilinear", "fairness_logistic", "find_regularization", "from_objective",
    "generated_fairness_data", "load_heart", "make_eg", "make_eg2", "make_len",
    "make_len_restart", "make_len_sweep", "make_solver", "num_restarts",
    "official_reg_weight", "read_libsvm", "restart_iterations", "safe_norm",
    "solve_subproblem",
]
