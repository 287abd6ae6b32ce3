"""The package version (its own module, so any layer can read it without importing the package root)."""

__version__ = "0.3.0.dev0"
