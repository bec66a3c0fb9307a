"""astral-lab: a Mininet lab for the Astral 3.0 MoE fabric (see README.md).

Its version is ``testbed.version.__version__`` (``astral-lab --version``).
"""
