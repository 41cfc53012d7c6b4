"""dispatch reconciler."""

__version__ = "0.1.0"
