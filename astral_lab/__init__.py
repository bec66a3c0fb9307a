"""astral-lab: a Mininet lab for the Astral 3.0 MoE fabric (see README.md)."""

from testbed.version import __version__

__all__ = ["__version__"]
