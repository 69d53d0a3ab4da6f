"""Helpers shared by the test files (tests never import each other; what
two of them need lives here)."""
