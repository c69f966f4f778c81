#!/usr/bin/env bash
# debian-vm.sh ARCH MIRROR DEST: the Debian VM the systemd boot tests record (issue 36), built
# from Debian's packages into DEST (a directory of the cache), whole or not at all:
#   root/        the debootstrap'd bookworm root (systemd-sysv, udev, the cloud kernel,
#                initramfs-tools), the tree `record --sysroot` names the guest's files from
#   rootfs.ext4  that root as an ext4 image (`mke2fs -d`: no loop mount), for a virtio disk;
#                boot it with `-drive file=…,if=virtio,format=raw,snapshot=on` (the guest
#                writes to its root: the cached image must stay as built)
#   vmlinuz, initrd.img  the root's kernel and Debian's own initramfs-tools initrd (gzip, with
#                its modules), for `-kernel`/`-initrd` with `root=/dev/vda`
#   package      the stamp, written last: this script's layout number, suite, architecture,
#                kernel package, its version and the kernel's; a VM of the same layout is kept
# One unit of the root powers the machine off once `multi-user.target` is reached.
# MIRROR is the Debian archive's URI (scripts/install-deps.sh takes it from the machine's apt
# sources). Needs root (debootstrap, chroot, file owners kept in the image). amd64 only: another
# architecture's root needs debootstrap's foreign second stage under qemu-user (binfmt_misc);
# scripts/debian-vm-arm64.sh makes the arm64 VM from this one instead.
set -euo pipefail

arch=${1:?usage: debian-vm.sh ARCH MIRROR DEST}
mirror=${2:?usage: debian-vm.sh ARCH MIRROR DEST}
dest=${3:?usage: debian-vm.sh ARCH MIRROR DEST}
suite=bookworm
case "$arch" in
amd64) kernel_pkg=linux-image-cloud-amd64 ;;
*) echo "debian-vm: no $arch VM yet (amd64 only)" >&2; exit 2 ;;
esac
log() { echo "debian-vm: $*" >&2; }

# What this script builds, first in the stamp: a change to the VM's contents changes it, and
# the next install builds the VM again. The same VM already there: nothing to do.
layout="debian-vm 1 $suite $arch $kernel_pkg"
if [ -f "$dest/rootfs.ext4" ] && [ "$(cut -d' ' -f1-5 "$dest/package" 2>/dev/null)" = "$layout" ]; then
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "debian-vm: run as root (debootstrap, chroot)" >&2; exit 1; }

# Built beside DEST (same file system: the rename at the end is atomic); a failed build leaves
# only its log.
tmp="$dest.tmp"
rm -rf "$tmp"
mkdir -p "$tmp"
root="$tmp/root"
logfile="$dest.log"
: >"$logfile"
fail() { tail -n 20 "$logfile" >&2; log "$*"; rm -rf "$tmp"; exit 1; }

log "debootstrap $suite ($arch) with systemd, udev and $kernel_pkg into $root"
debootstrap --arch="$arch" --variant=minbase \
    --include=systemd-sysv,udev,initramfs-tools,"$kernel_pkg" \
    "$suite" "$root" "$mirror" >>"$logfile" 2>&1 ||
    fail "debootstrap failed: retry later (mirror mid-sync?)"

# The root file system on the virtio disk, and a machine that powers itself off once up.
echo "/dev/vda / ext4 rw,errors=remount-ro 0 1" >"$root/etc/fstab"
echo debvm >"$root/etc/hostname"
cat >"$root/etc/systemd/system/qemu-uftrace-poweroff.service" <<'UNIT'
[Unit]
Description=Power the machine off once multi-user.target is reached (qemu-uftrace's test VM)
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/usr/bin/systemctl --no-block poweroff

[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/qemu-uftrace-poweroff.service \
    "$root/etc/systemd/system/multi-user.target.wants/qemu-uftrace-poweroff.service"

# Debian's initrd, gzip-compressed (record reads a gzip -initrd; bookworm's default is zstd),
# with the modules initramfs-tools takes by default (MODULES=most).
echo COMPRESS=gzip >"$root/etc/initramfs-tools/conf.d/qemu-uftrace-compress"
version=$(ls "$root/lib/modules" | head -n1)
[ -n "$version" ] || fail "no kernel in $root/lib/modules"
chroot "$root" update-initramfs -c -k "$version" >>"$logfile" 2>&1 ||
    fail "update-initramfs in $root failed"
cp "$root/boot/vmlinuz-$version" "$tmp/vmlinuz"
cp "$root/boot/initrd.img-$version" "$tmp/initrd.img"
gzip -t "$tmp/initrd.img" 2>/dev/null || fail "the initrd is not gzip-compressed"

# What apt downloaded is not the guest's.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

# The image: the root's size, a quarter more and 64 MiB for the guest's own writes.
kib=$(du -sk "$root" | cut -f1)
mke2fs -q -t ext4 -L debvm -d "$root" "$tmp/rootfs.ext4" "$((kib * 5 / 4 + 65536))k" >>"$logfile" 2>&1 ||
    fail "mke2fs -d failed"

pkg_version=$(chroot "$root" dpkg-query -W -f '${Version}' "$kernel_pkg")
echo "$layout $pkg_version $version" >"$tmp/package"
rm -rf "$dest" && mv "$tmp" "$dest"
log "ok: $dest ($(du -sh --apparent-size "$dest" | cut -f1) apparent, $(du -sh "$dest" | cut -f1) on disk)"
