"""The Vagrantfile's cluster step authorises the cluster key, run here on scratch homes.

The step runs as root in each VM; the part that edits ``~/.ssh`` is taken from the Vagrantfile
as written and run with bash on two temporary homes in place of ``/root`` and
``/home/vagrant`` (the only change), against the ``authorized_keys`` files a VM really has:
none, Vagrant's own key, a last line without its newline.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOMES = "for home in /root /home/vagrant; do"
PUB = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDclusterkey astral-lab-cluster\n"  # as Ruby makes it
VAGRANTS_KEY = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQCvagrantskey vagrant"


def key_block() -> str:
    """The cluster step's lines from the key (``pub=``) to the end of the loop over homes."""
    text = (ROOT / "Vagrantfile").read_text()
    step = re.search(r"CLUSTER_STEP = <<~'SHELL'\n(.*?)\nSHELL\n", text, flags=re.S)
    assert step, "CLUSTER_STEP heredoc not found in the Vagrantfile"
    lines = textwrap.dedent(step.group(1)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("pub="))
    end = next(i for i in range(start, len(lines)) if lines[i] == "done")
    block = "\n".join(lines[start:end + 1])
    assert HOMES in block, "the loop over homes changed: update this test"
    return block


def run_step(homes: list[Path]) -> None:
    script = "set -eu\n" + key_block().replace(HOMES, 'for home in "$@"; do')
    env = dict(os.environ, CLUSTER_KEY="-----BEGIN RSA PRIVATE KEY-----\nx\n", CLUSTER_PUB=PUB)
    subprocess.run(["bash", "-c", script, "step", *map(str, homes)], env=env, check=True)


@pytest.mark.parametrize("before", [None, "", VAGRANTS_KEY + "\n", VAGRANTS_KEY],
                         ids=["no file", "empty", "vagrant's key", "no final newline"])
def test_the_cluster_key_is_authorised_once_beside_what_was_there(
        tmp_path: Path, before: str | None) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    keys = home / ".ssh" / "authorized_keys"
    if before is not None:
        keys.write_text(before)
    run_step([home])
    run_step([home])  # provisioning again adds nothing
    lines = keys.read_text().splitlines()
    assert lines.count(PUB.strip()) == 1
    assert lines == ([VAGRANTS_KEY] if before and before.strip() else []) + [PUB.strip()]
    assert keys.read_text().endswith("\n")
    assert (home / ".ssh" / "astral_cluster.pub").read_text() == PUB
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
