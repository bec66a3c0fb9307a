#!/usr/bin/env bash
# Build a libvirt Vagrant box equivalent to `debian/bookworm64` from Debian packages only, and
# add it as `debian/bookworm64`, so `vagrant up` works on a machine that cannot reach Vagrant's
# box catalogue (docs/vagrant.md).
#
# The box: Debian 12 (debootstrap, standard "important" set), Debian's stock kernel
# (linux-image-amd64) booted by GRUB from an MBR disk, ifupdown + DHCP on eth0 (as the public box:
# Vagrant's Debian guest plugin configures private networks through /etc/network/interfaces),
# a `vagrant` user (password "vagrant") with Vagrant's insecure public key and passwordless sudo,
# sshd, rsync. Each VM made from it gets its own machine-id and SSH host keys at first boot.
#
# Usage: sudo bash scripts/build-vagrant-box.sh [--no-add] [--force]
#   --no-add  build the .box file only (no Vagrant needed)
#   --force   rebuild even if the .box file exists
# Env: OUT (default /var/tmp/astral-vagrant-box: the .box and the build log), SIZE (disk, 20G as
#      the public box), MIRROR (Debian mirror), BOX_NAME (debian/bookworm64).
# Runs niced (nice 19, idle I/O) and does its mounts in a private mount namespace.
set -euo pipefail

PROG=build-vagrant-box.sh
OUT=${OUT:-/var/tmp/astral-vagrant-box}
SIZE=${SIZE:-20G}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
BOX_NAME=${BOX_NAME:-debian/bookworm64}
BOX=$OUT/debian-bookworm64-libvirt.box
NICE=(nice -n 19 ionice -c3)
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 LANG=C.UTF-8

die() { echo "$PROG: error: $*" >&2; exit 1; }
T0=$(date +%s)
T_STEP=$T0
step() {   # step "what was done": one line per step with its time
    local now; now=$(date +%s)
    printf '%s: %-44s %5d s  (total %d s)\n' "$PROG" "$1" $((now - T_STEP)) $((now - T0))
    T_STEP=$now
}

ADD=1 FORCE=0
for arg in "$@"; do
    case $arg in
        --no-add) ADD=0 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg (try --help)" ;;
    esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (it mounts a disk image): sudo bash scripts/$PROG"

# The user whose Vagrant gets the box: the one who ran sudo, else root.
BOX_USER=${SUDO_USER:-root}
add_box() {
    command -v vagrant >/dev/null || die "vagrant is not installed (sudo apt-get install vagrant vagrant-libvirt), or use --no-add"
    echo "$PROG: vagrant box add --force --name $BOX_NAME $BOX (as $BOX_USER)"
    if [ "$BOX_USER" = root ]; then
        vagrant box add --force --name "$BOX_NAME" "$BOX"
    else
        sudo -u "$BOX_USER" -H vagrant box add --force --name "$BOX_NAME" "$BOX"
    fi
    step "box added as $BOX_NAME"
}

if [ -f "$BOX" ] && [ "$FORCE" -eq 0 ]; then
    echo "$PROG: $BOX exists (--force rebuilds it)"
    [ "$ADD" -eq 1 ] && add_box
    exit 0
fi

# Mount in a private mount namespace: a mount namespace that another process creates meanwhile
# (Mininet makes one per host) would otherwise copy our loop mounts and keep them alive.
if [ -z "${BUILD_BOX_PRIVATE_NS:-}" ]; then
    # the box is added outside: `vagrant box add` needs nothing of ours mounted
    inner=(--no-add)
    [ "$FORCE" -eq 1 ] && inner+=(--force)
    BUILD_BOX_PRIVATE_NS=1 unshare --mount --propagation private bash "$0" "${inner[@]}"
    T_STEP=$(date +%s)   # the inner build timed its own steps; the add is timed alone
    [ "$ADD" -eq 1 ] && add_box
    exit 0
fi

# --- 0. host tools --------------------------------------------------------------------------
need=()
for tool in debootstrap:debootstrap qemu-img:qemu-utils mkfs.ext4:e2fsprogs sfdisk:fdisk \
            losetup:mount; do
    command -v "${tool%%:*}" >/dev/null || need+=("${tool#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    echo "$PROG: installing ${need[*]}"
    "${NICE[@]}" apt-get update -q
    "${NICE[@]}" apt-get install -y -q --no-install-recommends "${need[@]}"
fi

# Vagrant's insecure public key, as the vagrant package ships it (Debian's, or HashiCorp's
# /opt/vagrant); without Vagrant installed, from the vagrant .deb, unpacked in a scratch folder.
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/vagrant-box.XXXXXX")
find_key() {
    local k
    for k in /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub \
             /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub \
             "$WORK"/deb/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub; do
        [ -f "$k" ] && { echo "$k"; return 0; }
    done
    return 1
}
if ! KEY=$(find_key); then
    (cd "$WORK" && "${NICE[@]}" apt-get download -q vagrant >/dev/null 2>&1 \
        && dpkg-deb -x vagrant_*.deb deb) \
        || die "cannot get Vagrant's insecure key: install vagrant, or check 'apt-get download vagrant'"
    KEY=$(find_key) || die "no keys/vagrant.pub in the vagrant package"
fi
grep -q '^ssh-' "$KEY" || die "$KEY does not look like an OpenSSH public key"
step "host tools, Vagrant's insecure key"

# --- 1. disk: MBR, one ext4 partition -------------------------------------------------------
mkdir -p "$OUT"
mkdir -p "$WORK/disk"
RAW=$WORK/disk/disk.raw   # $WORK/disk is shown to the chroot for grub-bios-setup
MNT=$WORK/mnt
LOOP=""
cleanup() {
    local rc=$?
    set +e
    if [ -n "$MNT" ] && [ -d "$MNT" ]; then
        for d in mnt/disk dev/pts dev proc sys run; do
            mountpoint -q "$MNT/$d" && umount -l "$MNT/$d"
        done
        mountpoint -q "$MNT" && umount "$MNT"
    fi
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    mountpoint -q "$MNT" || rm -rf "$WORK"   # never into a still-mounted image
    [ "$rc" -ne 0 ] && rm -f "$BOX.partial" && echo "$PROG: failed (exit $rc); nothing kept" >&2
    return "$rc"
}
trap cleanup EXIT

truncate -s "$SIZE" "$RAW"
echo 'label: dos
start=2048, type=83, bootable' | sfdisk -q "$RAW"
# The partition gets a loop device of its own (offset, size from the table): no kernel
# partition scanning, which not every host kernel has.
read -r P_START P_SIZE < <(sfdisk --dump "$RAW" | sed -n 's/.*start= *\([0-9]*\), size= *\([0-9]*\).*/\1 \2/p')
[ -n "${P_SIZE:-}" ] || die "cannot read the partition table just written"
LOOP=$(losetup --find --show --offset $((P_START * 512)) --sizelimit $((P_SIZE * 512)) "$RAW")
PART=$LOOP
mkfs.ext4 -q -L root "$PART"
UUID=$(blkid -s UUID -o value "$PART")
mkdir -p "$MNT"
mount "$PART" "$MNT"
step "disk image ($SIZE, MBR, ext4)"

# --- 2. base system ---------------------------------------------------------------------------
"${NICE[@]}" debootstrap --include=openssh-server,sudo,rsync,ca-certificates,ifupdown,isc-dhcp-client \
    bookworm "$MNT" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
step "debootstrap bookworm"

mount --bind /dev "$MNT/dev"
mount --bind /dev/pts "$MNT/dev/pts"
mount -t proc proc "$MNT/proc"
mount -t sysfs sys "$MNT/sys"
mount -t tmpfs tmpfs "$MNT/run"
printf '#!/bin/sh\nexit 101\n' > "$MNT/usr/sbin/policy-rc.d"   # no daemons in the chroot
chmod +x "$MNT/usr/sbin/policy-rc.d"

cat > "$MNT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
# A machine that reaches the mirrors through a TLS-inspecting proxy has its CA in
# /usr/local/share/ca-certificates; the guest, which goes out the same way, trusts it too.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$MNT/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$MNT/usr/local/share/ca-certificates/"
fi
cat > "$MNT/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200n8"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
EOF
echo "UUID=$UUID / ext4 errors=remount-ro 0 1" > "$MNT/etc/fstab"

"${NICE[@]}" chroot "$MNT" /bin/bash -euc '
    export DEBIAN_FRONTEND=noninteractive
    echo "grub-pc grub-pc/install_devices_empty boolean true" | debconf-set-selections
    echo "grub-pc grub-pc/install_devices multiselect" | debconf-set-selections
    apt-get update -q
    apt-get -y -q dist-upgrade
    apt-get install -y -q linux-image-amd64 grub-pc
    update-ca-certificates
' > "$WORK/chroot.log" 2>&1 || { tail -30 "$WORK/chroot.log" >&2; die "installing the kernel and GRUB failed"; }
step "kernel, GRUB, updates"

# --- 3. boot loader ---------------------------------------------------------------------------
# What grub-install does, done on the image file (grub-install wants the kernel to see the
# disk's partitions): GRUB's modules in /boot/grub, a core image that finds the root file
# system by UUID, and grub-bios-setup writing boot.img to the MBR and the core image into the
# gap before the partition, with the image file mapped to (hd0).
cat > "$MNT/tmp/early.cfg" <<EOF
search.fs_uuid $UUID root
set prefix=(\$root)/boot/grub
EOF
mkdir -p "$MNT/mnt/disk"
mount --bind "$WORK/disk" "$MNT/mnt/disk"
echo "(hd0) /mnt/disk/disk.raw" > "$MNT/tmp/device.map"
chroot "$MNT" /bin/bash -euc '
    mkdir -p /boot/grub/i386-pc
    cp -a /usr/lib/grub/i386-pc/. /boot/grub/i386-pc/
    grub-editenv /boot/grub/grubenv create
    grub-mkimage -O i386-pc -d /usr/lib/grub/i386-pc -c /tmp/early.cfg -p /boot/grub \
        -o /boot/grub/i386-pc/core.img biosdisk part_msdos ext2 search_fs_uuid
    grub-bios-setup -d /boot/grub/i386-pc -m /tmp/device.map /mnt/disk/disk.raw
' > "$WORK/grub.log" 2>&1 || { cat "$WORK/grub.log" >&2; die "installing GRUB failed"; }
umount "$MNT/mnt/disk"; rmdir "$MNT/mnt/disk"
rm -f "$MNT/tmp/early.cfg" "$MNT/tmp/device.map"
# The first grub.cfg is written here: update-grub skips a root file system that is a loop
# device backed by a file (10_linux). Later kernel upgrades run update-grub inside the VM,
# which then writes the full configuration from /etc/default/grub.
KVER=$(ls "$MNT/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
[ -n "$KVER" ] || die "no kernel in /boot"
cat > "$MNT/boot/grub/grub.cfg" <<EOF
# written by astral-lab's build-vagrant-box.sh; update-grub replaces it
set default=0
set timeout=1
serial --speed=115200
terminal_input console serial
terminal_output console serial
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $UUID
menuentry 'Debian GNU/Linux, with Linux $KVER' {
    linux /boot/vmlinuz-$KVER root=UUID=$UUID ro net.ifnames=0 biosdevname=0 console=tty0 console=ttyS0,115200n8
    initrd /boot/initrd.img-$KVER
}
EOF
[ -f "$MNT/boot/initrd.img-$KVER" ] || die "no initrd.img-$KVER in /boot"
# later grub-pc upgrades inside the VM install to its disk (/dev/vda under libvirt)
echo "grub-pc grub-pc/install_devices multiselect /dev/vda" | chroot "$MNT" debconf-set-selections
step "GRUB installed (MBR)"

# --- 4. configuration -------------------------------------------------------------------------
echo bookworm > "$MNT/etc/hostname"
cat > "$MNT/etc/hosts" <<'EOF'
127.0.0.1	localhost
127.0.1.1	bookworm
::1	localhost ip6-localhost ip6-loopback
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
EOF
cat > "$MNT/etc/network/interfaces" <<'EOF'
# interfaces(5); Vagrant appends its private networks below
source /etc/network/interfaces.d/*

auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
EOF
: > "$MNT/etc/resolv.conf"   # debootstrap copied the host's; dhclient writes the VM's

# vagrant: password "vagrant", Vagrant's insecure key, passwordless sudo (Vagrant's box rules)
chroot "$MNT" useradd -m -s /bin/bash -U vagrant
echo 'vagrant:vagrant' | chroot "$MNT" chpasswd
install -d -m 700 "$MNT/home/vagrant/.ssh"
install -m 600 "$KEY" "$MNT/home/vagrant/.ssh/authorized_keys"
chroot "$MNT" chown -R vagrant:vagrant /home/vagrant/.ssh
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$MNT/etc/sudoers.d/vagrant"
chmod 440 "$MNT/etc/sudoers.d/vagrant"
chroot "$MNT" visudo -cq || die "sudoers does not parse"
cat > "$MNT/etc/ssh/sshd_config.d/vagrant.conf" <<'EOF'
UseDNS no
EOF

# Every VM gets its own SSH host keys and machine-id at first boot.
rm -f "$MNT"/etc/ssh/ssh_host_*
cat > "$MNT/etc/systemd/system/ssh-host-keys.service" <<'EOF'
[Unit]
Description=Generate SSH host keys on first boot
Before=ssh.service
ConditionPathExistsGlob=!/etc/ssh/ssh_host_*_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target
EOF
chroot "$MNT" systemctl enable ssh-host-keys.service ssh.service >/dev/null 2>&1
: > "$MNT/etc/machine-id"
rm -f "$MNT/var/lib/dbus/machine-id"
# No apt run of its own may hold the package lock while Vagrant provisions.
chroot "$MNT" systemctl mask apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1

rm -f "$MNT/usr/sbin/policy-rc.d"
chroot "$MNT" apt-get clean
rm -rf "$MNT"/var/lib/apt/lists/* "$MNT"/tmp/* "$MNT"/var/log/*.log
for m in openvswitch sch_netem ip_gre; do
    find "$MNT/lib/modules/$KVER" -name "$m.ko*" | grep -q . || die "the kernel has no $m module"
done
step "configured (kernel $KVER)"

for d in dev/pts dev proc sys run; do umount -l "$MNT/$d"; done
fstrim "$MNT" >/dev/null 2>&1 || true   # freed blocks become holes in the sparse image
umount "$MNT"
losetup -d "$LOOP"; LOOP=""

# --- 5. the box -----------------------------------------------------------------------------
STAGE=$WORK/box
mkdir -p "$STAGE"
"${NICE[@]}" qemu-img convert -O qcow2 "$RAW" "$STAGE/box.img"
rm -f "$RAW"
GB=$(( $(qemu-img info --output=json "$STAGE/box.img" | sed -n 's/.*"virtual-size": *\([0-9]*\).*/\1/p') / 1024 / 1024 / 1024 ))
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$GB" > "$STAGE/metadata.json"
cat > "$STAGE/Vagrantfile" <<'EOF'
# Debian 12 (bookworm) libvirt box built by astral-lab's scripts/build-vagrant-box.sh.
Vagrant.configure("2") do |config|
  config.vm.synced_folder ".", "/vagrant", type: "rsync"
  config.vm.provider :libvirt do |libvirt|
    libvirt.disk_bus = "virtio"
  end
end
EOF
cat > "$STAGE/info.json" <<EOF
{"name": "$BOX_NAME", "built": "$(date -u +%FT%TZ)", "kernel": "$KVER",
 "builder": "astral-lab scripts/build-vagrant-box.sh"}
EOF
tar -C "$STAGE" -cf "$BOX.partial" metadata.json Vagrantfile info.json box.img
mv "$BOX.partial" "$BOX"
step "box $(du -h "$BOX" | cut -f1) ($BOX)"
