"""Paper-agnostic building blocks shared by every method of the suite.

Modules are imported lazily by their users (``from jaxlib_papers.core import sde``) so
that importing one piece does not pull in orbax, POT or ott-jax.
"""
