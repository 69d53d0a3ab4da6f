"""The version of fakedebugfs (one place; the package and the control protocol read it)."""

__version__ = "0.2.0"
