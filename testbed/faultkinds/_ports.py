"""What the kinds that change a switch port share (not a kind: ``_`` keeps it out of
discovery): the alias a changed port carries, naming its run and what to put back, so
``astral-lab clean`` can undo a crashed run's change (mtu-mismatch, shuffle-miswiring). Pure.
"""

from __future__ import annotations


def alias_command(intf: str, alias: str) -> list[str]:
    """Set (``""``: clear) an interface's alias."""
    return ["ip", "link", "set", "dev", intf, "alias", alias]
