"""CP-Fuse configs (``default.py:get_config(preset)``)."""
