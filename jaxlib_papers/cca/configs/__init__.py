"""CCA configs."""
