"""Version of the sandbox build (the local label `+sandbox` marks it as the stand-in)."""

__version__ = "0.5.23+sandbox"
