"""absl launchers: ``python -m launch.<paper> --config=...:<preset> --workdir=DIR``."""
