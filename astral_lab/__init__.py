"""astral-lab: a Mininet lab for the Astral 3.0 MoE fabric (see README.md)."""

__version__ = "0.1.0"
