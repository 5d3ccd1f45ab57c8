"""The package's version (pyproject.toml's; a unit test keeps them equal)."""

__version__ = "0.3.0"
