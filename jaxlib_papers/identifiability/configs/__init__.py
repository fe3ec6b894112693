"""Configs of the identifiability package (``default.get_config``)."""
