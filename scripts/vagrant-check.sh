#!/usr/bin/env bash
# `vagrant up` for real, with the libvirt provider: the lab VM (a fabric, the demo, the unit
# tests) and Cluster Edition across two kernels over GRE (lab + worker1). Not part of `make test`:
# under QEMU's software emulation each VM takes tens of minutes (docs/vagrant.md has the times).
#
#   bash scripts/vagrant-check.sh        both VMs brought up once; the cluster checks, then lab's
#                                        own (fabric, demo, unit tests); destroy
#   bash scripts/vagrant-check.sh one    `vagrant up lab` only: fabric, demo, unit tests, destroy
#   bash scripts/vagrant-check.sh two    LAB_WORKERS=1: cluster fabric, replay, destroy
#
# Needs vagrant, vagrant-libvirt, a running libvirtd the user may use (root, or group libvirt)
# and the box debian/bookworm64 for libvirt (offline: sudo bash scripts/build-vagrant-box.sh).
# Prints one line per step with its time; full output in results/vagrant-check-<time>/.
# Whatever fails or is interrupted, the machines it brought up are destroyed (KEEP=1 keeps
# them for a look: then `vagrant destroy -f` yourself). REUSE=1 runs the check on the machines
# KEEP=1 left (after a fix: `vagrant up --provision` instead of a new hour of provisioning).
set -euo pipefail

PROG=vagrant-check.sh
cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
WHAT=${1:-all}
case $WHAT in one|two|all) ;; -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "$PROG: error: unknown argument $WHAT (one, two or all)" >&2; exit 2 ;; esac

LOGS=${LOGS:-results/vagrant-check-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
SUMMARY=$LOGS/summary.txt
URI=${LIBVIRT_DEFAULT_URI:-qemu:///system}
T0=$(date +%s)
export VAGRANT_DEFAULT_PROVIDER=libvirt
# No unasked-for trips to Vagrant's catalogue: the box is local.
export VAGRANT_BOX_UPDATE_CHECK_DISABLE=1 VAGRANT_CHECKPOINT_DISABLE=1

say() { echo "$PROG: $*" | tee -a "$SUMMARY"; }
die() { say "error: $*"; exit 1; }

N=0
# step NAME COMMAND...: run it, its output to $LOGS/NN-NAME.log; one line with ok/FAILED and time
step() {
    local name=$1 t rc=0 log slug
    shift
    N=$((N + 1))
    slug=$(tr -cs 'A-Za-z0-9' '-' <<<"$name" | cut -c1-50)
    log=$(printf '%s/%02d-%s.log' "$LOGS" "$N" "${slug%-}")
    t=$(date +%s)
    CURRENT="step $N ($name, started $(date +%T), log $log)"
    "$@" > "$log" 2>&1 || rc=$?
    CURRENT=""
    STEP_LOG=$log
    STEP_S=$(( $(date +%s) - t ))
    if [ "$rc" -eq 0 ]; then
        printf '%s: %02d %-58s ok     %5d s\n' "$PROG" "$N" "$name" "$STEP_S" | tee -a "$SUMMARY"
    else
        printf '%s: %02d %-58s FAILED %5d s (exit %d; %s)\n' "$PROG" "$N" "$name" "$STEP_S" "$rc" \
            "$log" | tee -a "$SUMMARY"
        tail -15 "$log" | sed 's/^/    /'
    fi
    return "$rc"
}
note() { say "   $*"; }

in_vm() {   # in_vm MACHINE 'command'
    vagrant ssh "$1" --no-tty -c "$2" -- -o LogLevel=ERROR
}

# --- what is ours to clean up ------------------------------------------------------------------
BROUGHT_UP=0
CURRENT=""
destroy_all() {
    LAB_WORKERS=1 vagrant destroy -f
}
on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "${CURRENT:-}" ] && say "stopped during $CURRENT"
    if [ "$BROUGHT_UP" -eq 1 ]; then
        if [ "${KEEP:-0}" = 1 ]; then
            say "KEEP=1: machines left running (vagrant destroy -f when done)"
        else
            say "cleaning up: vagrant destroy -f"
            LAB_WORKERS=1 vagrant destroy -f >> "$LOGS/cleanup.log" 2>&1 \
                || say "vagrant destroy failed: see $LOGS/cleanup.log"
        fi
    fi
    say "$([ "$rc" -eq 0 ] && echo passed || echo "FAILED (exit $rc)") in $(( $(date +%s) - T0 )) s; logs: $LOGS"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# libvirt objects this checkout's machines leave: domains and volumes (named <folder>_<machine>;
# the box's base volume is Vagrant's cache of the box, not a leftover), and the networks that
# vagrant-libvirt makes (its management network, a private one named <folder><n>).
PROJECT=$(basename "$(pwd)")
PREFIX=${PROJECT}_
leftovers() {
    local doms vols nets
    doms=$(virsh -c "$URI" list --all --name | grep "^$PREFIX" || true)
    vols=$(virsh -c "$URI" vol-list default 2>/dev/null | awk 'NR > 2 && $1 != "" {print $1}' \
        | grep "^$PREFIX" || true)
    nets=$(virsh -c "$URI" net-list --all --name \
        | grep -E "^(vagrant-libvirt|vagrant-private-dhcp|${PROJECT//./\\.}[0-9]+)\$" || true)
    if [ -n "$doms$vols$nets" ]; then
        echo "left behind: domains [${doms//$'\n'/ }] volumes [${vols//$'\n'/ }] networks [${nets//$'\n'/ }]"
        return 1
    fi
    echo "no domain, volume or network of $PREFIX* left"
}

# --- 0. preflight ------------------------------------------------------------------------------
command -v vagrant >/dev/null || die "vagrant is not installed (Debian: apt-get install vagrant vagrant-libvirt libvirt-daemon-system)"
command -v virsh >/dev/null || die "virsh is not installed (apt-get install libvirt-clients)"
vagrant plugin list 2>/dev/null | grep -q vagrant-libvirt || die "the vagrant-libvirt plugin is missing (apt-get install vagrant-libvirt)"
virsh -c "$URI" version >/dev/null 2>&1 || die "cannot reach libvirt at $URI (is libvirtd running, may this user use it?)"
vagrant box list 2>/dev/null | grep -q '^debian/bookworm64 *(libvirt' \
    || die "no debian/bookworm64 box for libvirt: sudo bash scripts/build-vagrant-box.sh (offline), or vagrant box add debian/bookworm64 --provider libvirt"
if [ "${REUSE:-0}" = 1 ]; then
    say "REUSE=1: on the machines a run before kept, provisioned again, not from a clean state"
else
    if LAB_WORKERS=1 vagrant status --machine-readable 2>/dev/null | grep ',state,' | grep -vq ',state,not_created'; then
        die "this checkout already has Vagrant machines (vagrant status): destroy them first, REUSE=1 to check them, or run the check from another clone"
    fi
    leftovers > "$LOGS/00-leftovers-before.log" 2>&1 || die "libvirt objects named $PREFIX* exist already: $(cat "$LOGS/00-leftovers-before.log")"
fi
say "$(vagrant --version), $(vagrant plugin list 2>/dev/null | grep vagrant-libvirt), $(virsh -c "$URI" version 2>/dev/null | grep -i 'running hypervisor' | sed 's/.*: *//'); box $(vagrant box list | grep '^debian/bookworm64 *(libvirt' | head -1)"
say "astral-lab $(git log -1 --format='%h %cs' 2>/dev/null || echo '(not a git checkout)'); logs in $LOGS"

# What libvirt runs: domain type (kvm, or qemu = software emulation) and CPU model.
domain_type() {
    local xml
    xml=$(virsh -c "$URI" dumpxml "$PREFIX$1" 2>/dev/null || true)
    note "$1: libvirt domain type $(sed -n "s/^<domain type='\([a-z]*\)'.*/\1/p" <<<"$xml"), CPU $(grep -oE "<cpu mode='[a-z-]*'|<model fallback[^>]*>[^<]*" <<<"$xml" | sed 's/.*[=>]//' | tr '\n' ' ')"
}

# The kernel datapath fabric, every pair reached: prints the lab's own lines.
check_up_output() {   # check_up_output LOG
    grep -E 'datapath=|all-pairs ping|up in' "$1" | sed 's/^/   /' | tee -a "$SUMMARY" || true
    grep -q 'datapath=kernel' "$1" || { say "   not on the kernel datapath"; return 1; }
    grep -Eq 'all-pairs ping: ([0-9]+)/\1 pairs reached' "$1" || { say "   not every pair reached"; return 1; }
}

# What a run leaves on a machine: bridges, QoS rows, interfaces, the lab's processes. Compared
# with a snapshot taken before: the GRE module's own devices (gre0, gretap0, erspan0) excepted.
SNAP='{ sudo ovs-vsctl list-br | sed "s/^/bridge /"; sudo ovs-vsctl --columns=_uuid --bare list qos | sed "/^$/d; s/^/qos /";
        ip -o link | awk -F": " "{print \"link \" \$2}" | sed "s/@.*//" | grep -Ev "^link (gre0|gretap0|erspan0|ovs-system)$";
        pgrep -af "mnexec|astral_lab|astral-pktio|controller_cli" | grep -v pgrep | sed "s/^[0-9]* /proc /"; } | sort'
snapshot() { in_vm "$1" "$SNAP" > "$LOGS/snap-$1-$2.txt" 2>/dev/null; }
same_as_before() {   # same_as_before MACHINE
    snapshot "$1" after
    if diff "$LOGS/snap-$1-before.txt" "$LOGS/snap-$1-after.txt"; then
        echo "$1: nothing left ($(wc -l < "$LOGS/snap-$1-after.txt") items, as before)"
    else
        echo "$1: the run left the lines marked > above"; return 1
    fi
}

# vagrant up [MACHINE]; with REUSE=1 the kept machines get this checkout again (`vagrant rsync`)
# and are provisioned again (setup.sh and the cluster step rerun).
up() {
    if [ "${REUSE:-0}" = 1 ]; then
        vagrant rsync "$@" && vagrant up --provider libvirt --provision "$@"
    else
        vagrant up --provider libvirt "$@"
    fi
}

# --- 1. one VM ----------------------------------------------------------------------------------
# `make demo` in lab: passes, or stops at the fidelity guard with the lab's one-line error
# (exit 0 then too); a traceback or any other failure fails the step.
demo_in_lab() {   # its output reaches the step's log as it comes (a demo runs for minutes)
    local rc out=$LOGS/demo-output.txt
    in_vm lab 'cd /vagrant && sudo make demo' 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] && return 0
    if grep -q 'Traceback' "$out"; then
        echo "$PROG: the demo crashed (traceback above)"; return 1
    fi
    grep -q 'astral-lab demo: error: fidelity guard' "$out" && return 0
    echo "$PROG: the demo failed, and not at the fidelity guard (exit $rc)"; return 1
}

# lab's own checks, on one kernel: the default fabric with every pair, then the demo.
lab_checks() {
    snapshot lab before
    step "in lab: astral-lab up astral3 --no-cli (default fabric, all pairs)" in_vm lab \
        'cd /vagrant && sudo .venv/bin/astral-lab up astral3 --no-cli'
    check_up_output "$STEP_LOG"
    # The demo may pass (a fast host) or be refused by the fidelity guard (emulation): both
    # are fine if a refusal is one clear line and not a traceback.
    step "in lab: sudo make demo (or the guard's one-line refusal)" demo_in_lab
    local line
    line=$(grep -m1 'astral-lab demo: error:' "$STEP_LOG" || true)
    [ -z "$line" ] || say "   refused by the fidelity guard, as expected under emulation: ${line:0:400}"
    step "lab: nothing left of the runs" same_as_before lab
}

# The unit tests last: under emulation they take longer than everything else together. On
# both vCPUs (pytest-xdist), which QEMU runs as a thread each: about half the time of one.
unit_in_lab() {
    step "in lab: sudo make unit PYTEST_ARGS='-n auto'" in_vm lab \
        "cd /vagrant && sudo make unit PYTEST_ARGS='-n auto'"
    grep -E '^=+ .*(passed|failed).* in ' "$STEP_LOG" | tail -1 | sed 's/^/   /' | tee -a "$SUMMARY" || true
}

about_lab() {
    domain_type lab
    step "in lab: stock kernel, openvswitch module, emulation" in_vm lab \
        'uname -r; systemd-detect-virt; grep -m1 "model name" /proc/cpuinfo; nproc; lsmod | grep -w openvswitch; sudo ovs-vsctl --version | head -1'
    sed 's/^/   /' "$STEP_LOG" | tee -a "$SUMMARY"
}

destroyed() {   # destroyed WHAT: vagrant destroy -f, then nothing of the checkout left in libvirt
    step "vagrant destroy -f ($1)" destroy_all
    step "libvirt: nothing left (domains, volumes, networks)" leftovers
    sed 's/^/   /' "$STEP_LOG" | tee -a "$SUMMARY"
    BROUGHT_UP=0
}

one_vm() {
    BROUGHT_UP=1
    step "vagrant up lab --provider libvirt (boot + scripts/setup.sh)" up lab
    grep -E 'setup.sh: done in' "$STEP_LOG" | sed 's/^ *lab: */   /' | tee -a "$SUMMARY" || true
    about_lab
    lab_checks
    unit_in_lab
    destroyed lab
}

# --- 2. two VMs: Cluster Edition across two kernels --------------------------------------------
# A small replay between the two blocks (every flow crosses a GRE tunnel): every byte arrives.
# Small and paced slowly: 32 flows at the NICs' 40 Mb/s each lost 1.3% of their packets between
# two emulated VMs, whose virtual NICs are far slower than the lanes that cross them (a real
# cluster's servers are joined by a link faster than that). The drop counters printed after
# the step say on which interface a lossy replay lost them. On the 8-GPU fabric (two GPUs per
# server): built across the VMs in a quarter of the 32-GPU one's time, which the step before
# has brought up already.
REPLAY_PY='
import sys
from testbed.shell.cluster import make_lab
from testbed.topologies import build_for_gpus
from traffic.kernels import FlowSpec
from traffic.shell.replay import replay

plan = build_for_gpus("astral3", gpus=8, gpus_per_server=2)  # a block per VM, 8 of its 24 links cross
with make_lab(plan, ["lab", "worker1"], lb="ecmp") as lab:
    server = {h.name: lab.server_of(h.name) for h in plan.hosts}
    here = [h.name for h in plan.hosts if server[h.name] == "lab"][:2]
    there = [h.name for h in plan.hosts if server[h.name] == "worker1"][:2]
    pairs = list(zip(here, there)) + list(zip(there, here))
    flows = [FlowSpec.make(src, dst, 256 * 1024, qp=i + 1, message_bytes=64 * 1024)
             for i, (src, dst) in enumerate(pairs)]
    print(lab.summary)
    res = replay(lab, flows, progress=False, rate_mbps=5)
    print(f"replay across GRE: {len(flows)} flows lab<->worker1 at 5 Mb/s each, "
          f"{res.bytes_received}/{res.bytes_sent} bytes, {res.lost_packets} packets lost "
          f"({res.receiver_drops} by the receivers), done in {res.job_completion_s:.1f} s")
    sys.exit(0 if res.bytes_received == res.bytes_sent else 1)
'

# Interfaces of a VM that dropped packets (/proc/net/dev): where a lossy replay lost them.
DROPS="sed 's/:/ /' /proc/net/dev | awk 'NR>2 && (\$5+\$13)>0 {print \$1\": rx_drop \"\$5\" tx_drop \"\$13}'"

up_two() {
    BROUGHT_UP=1
    export LAB_WORKERS=1
    step "LAB_WORKERS=1 vagrant up (lab + worker1, provisioned)" up
    grep -E 'setup.sh: done in' "$STEP_LOG" | sed 's/^ */   /' | tee -a "$SUMMARY" || true
    about_lab
    domain_type worker1
}

cluster_checks() {
    step "private network: lab and worker1 reach each other by name" in_vm lab \
        'ping -c 2 -q worker1 && ssh -o BatchMode=yes worker1 hostname && sudo ssh -o BatchMode=yes vagrant@worker1 "sudo -n true && uname -r"'
    in_vm worker1 'chronyc -n tracking' 2>&1 | grep -E 'Reference ID|System time' | sed 's/^/   worker1 chrony: /' | tee -a "$SUMMARY" || true
    snapshot lab before
    snapshot worker1 before
    step "in lab: astral-lab up astral3 --servers 4 --cluster lab,worker1 --no-cli" in_vm lab \
        'cd /vagrant && sudo .venv/bin/astral-lab up astral3 --servers 4 --cluster lab,worker1 --no-cli'
    check_up_output "$STEP_LOG"
    grep -iE 'cross|tunnel|gre|clock|server' "$STEP_LOG" | head -8 | sed 's/^/   /' | tee -a "$SUMMARY" || true
    local rc=0   # the drop counters matter most when the replay lost packets: print them first
    step "in lab: replay across the GRE tunnels, every byte delivered" in_vm lab \
        "cd /vagrant && sudo .venv/bin/python -c '$REPLAY_PY'" || rc=$?
    grep 'replay across GRE' "$STEP_LOG" | sed 's/^/   /' | tee -a "$SUMMARY" || true
    for m in lab worker1; do
        in_vm "$m" "$DROPS" 2>&1 | head -8 | sed "s/^/   $m drops: /" | tee -a "$SUMMARY" || true
    done
    bash -c "$DROPS" | grep -E '^(vnet|virbr)' | sed 's/^/   host drops: /' | tee -a "$SUMMARY" || true
    [ "$rc" -eq 0 ] || return "$rc"
    step "lab: nothing left of the runs" same_as_before lab
    step "worker1: nothing left of the runs" same_as_before worker1
}

two_vms() {
    up_two
    cluster_checks
    destroyed "lab, worker1"
}

# Both halves on one provisioning: worker1 is halted once the cluster checks are done, so lab
# has the host's CPU for its own.
both() {
    up_two
    cluster_checks
    step "vagrant halt worker1 (done with it)" vagrant halt worker1
    lab_checks
    unit_in_lab
    destroyed "lab, worker1"
}

case $WHAT in
    one) one_vm ;;
    two) two_vms ;;
    all) both ;;
esac
