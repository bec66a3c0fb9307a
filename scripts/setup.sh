#!/usr/bin/env bash
# Install and start everything astral-lab needs on a Debian 12 / Ubuntu 22.04+ machine:
#   1. apt packages (Mininet, Open vSwitch, iperf3, tshark, tcpdump, and for the live view's
#      tests headless Chromium and promtool (package prometheus), ...)
#   2. the Open vSwitch daemons (kernel datapath if the module loads, else userspace)
#   3. a Python venv at .venv (Debian's python3, with system site packages so the apt Mininet
#      is importable) holding `pip install -e '.[dev]'`
# Idempotent: a second run checks, finds nothing to do, and returns in a few seconds.
#
# Usage: sudo bash scripts/setup.sh          # install / start / verify
#        bash scripts/setup.sh --check       # only report what is missing (exit 1 if anything)
set -euo pipefail

PROG=setup.sh
SYS_PY=/usr/bin/python3
VENV=.venv
STAMP="$VENV/.astral-lab-installed"
OVS_CTL=/usr/share/openvswitch/scripts/ovs-ctl
APT_PACKAGES=(
    mininet openvswitch-switch openvswitch-common iperf3 tcpdump tshark ethtool iputils-ping
    iproute2 fping nftables iptables kmod procps psmisc python3-venv python3-dev gcc make
    zlib1g-dev netsniff-ng sysstat chromium prometheus sudo openssh-server
)

die() { echo "$PROG: error: $*" >&2; exit 1; }
say() { echo "$PROG: $*"; }

usage() {
    cat <<EOF
usage: sudo bash scripts/setup.sh [--check]
  (no flag)  install apt packages, start Open vSwitch, create .venv and pip install -e '.[dev]'
  --check    change nothing; report what is missing and exit 1 if anything is
EOF
}

CHECK=0
for arg in "$@"; do
    case "$arg" in
        --check) CHECK=1 ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $arg" ;;
    esac
done

if [ "$CHECK" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
    die "must be run as root (try: sudo bash scripts/setup.sh, or: sudo make setup)"
fi

# Repo root = parent of the directory holding this script.
cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
REPO_ROOT=$(pwd)

START_S=$(date +%s)
SUMMARY=()
MISSING=()

# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

# Prints the APT_PACKAGES that are not installed, one per line.
missing_apt_packages() {
    local installed
    # One dpkg-query call for all packages; unknown packages only produce stderr noise.
    installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${APT_PACKAGES[@]}" 2>/dev/null \
        | awk '$2 == "install" && $3 == "ok" && $4 == "installed" { print $1 }' || true)
    local pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        if ! grep -qxF -- "$pkg" <<<"$installed"; then
            echo "$pkg"
        fi
    done
}

ovs_ok() {
    command -v ovs-vsctl >/dev/null 2>&1 && ovs-vsctl --timeout=5 show >/dev/null 2>&1
}

datapath_name() {
    if [ -d /sys/module/openvswitch ]; then echo kernel; else echo userspace; fi
}

# True if .venv exists, runs, was made from $SYS_PY and includes system site packages.
venv_ok() {
    [ -x "$VENV/bin/python" ] && [ -f "$VENV/pyvenv.cfg" ] || return 1
    grep -Eqi '^[[:space:]]*include-system-site-packages[[:space:]]*=[[:space:]]*true' \
        "$VENV/pyvenv.cfg" || return 1
    local want have probe='import sys; print(sys.base_prefix, *sys.version_info[:3])'
    want=$("$SYS_PY" -c "$probe" 2>/dev/null) || return 1
    have=$("$VENV/bin/python" -c "$probe" 2>/dev/null) || return 1
    [ "$want" = "$have" ]
}

# Why venv_ok fails, for messages.
venv_problem() {
    if [ ! -e "$VENV" ]; then echo "$VENV does not exist"
    elif [ ! -x "$VENV/bin/python" ]; then echo "$VENV has no working bin/python"
    elif ! grep -Eqi '^[[:space:]]*include-system-site-packages[[:space:]]*=[[:space:]]*true' \
            "$VENV/pyvenv.cfg" 2>/dev/null; then
        echo "$VENV was made without --system-site-packages"
    else echo "$VENV was made with a different interpreter than $SYS_PY"
    fi
}

stamp_ok() {
    [ -f "$STAMP" ] && [ -f pyproject.toml ] && [ "$STAMP" -nt pyproject.toml ]
}

VERIFY_IMPORTS='import mininet.net, os_ken, scapy, numba'
verify_python() {
    PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -c "$VERIFY_IMPORTS"
}

# ---------------------------------------------------------------------------------------------
# --check: report only
# ---------------------------------------------------------------------------------------------
if [ "$CHECK" -eq 1 ]; then
    mapfile -t missing_pkgs < <(missing_apt_packages)
    if [ "${#missing_pkgs[@]}" -gt 0 ]; then
        MISSING+=("apt packages not installed: ${missing_pkgs[*]}")
    fi
    if ! ovs_ok; then
        hint=""
        [ "$(id -u)" -ne 0 ] && hint=" (not root: the OVS socket may just be unreadable)"
        MISSING+=("Open vSwitch: 'ovs-vsctl --timeout=5 show' fails$hint")
    fi
    command -v mnexec >/dev/null 2>&1 || MISSING+=("mnexec not on PATH (apt package mininet)")
    [ -f pyproject.toml ] || MISSING+=("pyproject.toml not found in $REPO_ROOT")
    if ! venv_ok; then
        MISSING+=("venv: $(venv_problem)")
    else
        stamp_ok || MISSING+=("venv: '.[dev]' not installed or older than pyproject.toml")
        verify_python 2>/dev/null || MISSING+=("venv: '$VERIFY_IMPORTS' fails")
        PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" -c \
            'from traffic.shell.pktio import path; path()' >/dev/null 2>&1 \
            || MISSING+=("the compiled traffic plane (astral-pktio) is missing or older than traffic/csrc/pktio.c")
    fi
    if [ "${#MISSING[@]}" -eq 0 ]; then
        say "check: everything is in place (datapath: $(datapath_name))"
        exit 0
    fi
    for m in "${MISSING[@]}"; do echo "$PROG: missing: $m"; done
    say "check: ${#MISSING[@]} problem(s); run: sudo bash scripts/setup.sh"
    exit 1
fi

# ---------------------------------------------------------------------------------------------
# a. apt packages
# ---------------------------------------------------------------------------------------------
T=$(date +%s)  # each part's time goes in the summary: on a slow machine or VM it says where
mapfile -t missing_pkgs < <(missing_apt_packages)
if [ "${#missing_pkgs[@]}" -gt 0 ]; then
    say "installing apt packages: ${missing_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    echo 'wireshark-common wireshark-common/install-setuid boolean false' | debconf-set-selections
    # openssh-server is here for sshd inside the fake cluster test's servers (their own
    # config, started by the test); a login service on this machine is not the lab's to
    # open, so a fresh install is not started: Debian's init script and systemd unit both
    # skip sshd while /etc/ssh/sshd_not_to_be_run exists
    ssh_fresh=0
    if printf '%s\n' "${missing_pkgs[@]}" | grep -qx openssh-server \
            && [ ! -e /etc/ssh/sshd_not_to_be_run ]; then
        mkdir -p /etc/ssh && touch /etc/ssh/sshd_not_to_be_run
        ssh_fresh=1
    fi
    apt-get update
    apt-get install -y --no-install-recommends "${missing_pkgs[@]}"
    mapfile -t still_missing < <(missing_apt_packages)
    [ "${#still_missing[@]}" -eq 0 ] || die "apt packages still missing: ${still_missing[*]}"
    SUMMARY+=("apt: installed ${#missing_pkgs[@]} package(s) in $(( $(date +%s) - T )) s")
    # prometheus is here for promtool (the /metrics test); its server, which the package
    # enables on systemd machines, is not the lab's to run
    if printf '%s\n' "${missing_pkgs[@]}" | grep -qx prometheus \
            && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now prometheus >/dev/null 2>&1 || true
        SUMMARY+=("prometheus: installed for promtool; its server is disabled")
    fi
    if [ "$ssh_fresh" -eq 1 ]; then
        if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
            systemctl disable ssh.service ssh.socket >/dev/null 2>&1 || true
        fi
        SUMMARY+=("openssh-server: installed for the fake cluster test's sshd; the ssh service is not started (a cluster worker needs it: rm /etc/ssh/sshd_not_to_be_run, then start ssh)")
    fi
else
    SUMMARY+=("apt: all ${#APT_PACKAGES[@]} packages present")
fi

# ---------------------------------------------------------------------------------------------
# b. Open vSwitch daemons
# ---------------------------------------------------------------------------------------------
if ovs_ok; then
    SUMMARY+=("ovs: already running")
else
    modprobe openvswitch >/dev/null 2>&1 || true
    DATAPATH=$(datapath_name)
    if [ "$DATAPATH" = kernel ]; then
        say "openvswitch kernel module loaded: switches can use the kernel datapath"
    else
        say "no openvswitch kernel module: switches must use the userspace datapath"
    fi
    started=""
    if [ -d /run/systemd/system ]; then
        say "starting Open vSwitch with systemctl"
        if systemctl start openvswitch-switch; then
            started=systemctl
        else
            say "systemctl start openvswitch-switch failed; falling back to ovs-ctl"
        fi
    fi
    if [ -z "$started" ]; then
        [ -x "$OVS_CTL" ] || die "$OVS_CTL not found (is openvswitch-switch installed?)"
        say "starting Open vSwitch with ovs-ctl (a ulimit error from it is harmless)"
        # Exit status ignored: ovs-ctl can complain (e.g. about ulimit) and still start the
        # daemons; the ovs-vsctl check below is what decides.
        "$OVS_CTL" start --system-id=random || true
        started=ovs-ctl
    fi
    # The daemons may need a moment before ovsdb answers.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        ovs_ok && break
        sleep 1
    done
    ovs_ok || die "Open vSwitch did not start: 'ovs-vsctl --timeout=5 show' fails" \
        "(see /var/log/openvswitch/ovs-vswitchd.log and ovsdb-server.log)"
    SUMMARY+=("ovs: started with $started ($DATAPATH datapath)")
fi

# ---------------------------------------------------------------------------------------------
# c. Python venv
# ---------------------------------------------------------------------------------------------
[ -x "$SYS_PY" ] || die "$SYS_PY not found (apt package python3)"
[ -f pyproject.toml ] || die "pyproject.toml not found in $REPO_ROOT"
if venv_ok; then
    SUMMARY+=("venv: kept")
else
    if [ -e "$VENV" ]; then
        say "recreating $VENV: $(venv_problem)"
        rm -rf -- "$VENV"
        SUMMARY+=("venv: recreated")
    else
        SUMMARY+=("venv: created")
    fi
    say "creating $VENV with $SYS_PY -m venv --system-site-packages"
    "$SYS_PY" -m venv --system-site-packages "$VENV"
    venv_ok || die "$VENV was created but does not check out: $(venv_problem)"
fi

if stamp_ok; then
    SUMMARY+=("pip: up to date")
else
    T=$(date +%s)
    say "installing astral-lab into $VENV: pip install -e '.[dev]'"
    rm -f -- "$STAMP"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -e '.[dev]'
    touch -- "$STAMP"
    SUMMARY+=("pip: installed -e '.[dev]' in $(( $(date +%s) - T )) s")
fi

T=$(date +%s)
verify_python || die "'$VENV/bin/python -c \"$VERIFY_IMPORTS\"' failed"
# The flow model's event loop is compiled by Numba on first use and cached next to its
# module; compile it here (once, seconds) so no model run or test waits for it.
"$VENV/bin/python" -m testbed.models.maxmin || die "compiling the flow model's kernel (python -m testbed.models.maxmin) failed"
# The replay's compiled sender/receiver (traffic/csrc/pktio.c), rebuilt when its source changes.
"$VENV/bin/python" -c 'from traffic.shell.pktio import build; build()' \
    || die "building the compiled traffic plane (traffic/csrc/pktio.c) failed"
SUMMARY+=("imports checked, flow model kernel and pktio compiled in $(( $(date +%s) - T )) s")
command -v mnexec >/dev/null 2>&1 || die "mnexec not found on PATH (apt package mininet)"

# ---------------------------------------------------------------------------------------------
# d. summary
# ---------------------------------------------------------------------------------------------
summary=$(printf '%s; ' "${SUMMARY[@]}")
say "done in $(( $(date +%s) - START_S ))s: ${summary%; } (datapath: $(datapath_name))"
