#!/usr/bin/env bash
# debian-vm-arm64.sh FROM DEST: the arm64 Debian VM (issue 36) made from the amd64 one in FROM
# (scripts/debian-vm.sh), into DEST with the same layout (root/, rootfs.ext4, vmlinuz,
# initrd.img, package; `from` holds FROM's stamp: a new amd64 VM makes a new arm64 one), whole
# or not at all.
#
# Without running an arm64 program: debootstrap's second stage (the maintainer scripts) would
# need qemu-user through binfmt_misc. Instead
#   - the amd64 root's files of each amd64 package are replaced by those of the arm64 build of
#     the very same package and version (apt-get download from the machine's apt sources,
#     unpacked with dpkg-deb; the amd64 kernel by the arm64 one of the same version), so that
#     everything the maintainer scripts made (users, enabled units, the power-off unit,
#     alternatives, udev's hwdb, fstab) is the amd64 run's, which is the same on arm64;
#     /etc/ld.so.cache (amd64's) is left out: ld.so searches the multiarch directories itself;
#   - the initrd holds the amd64 initramfs-tools initrd's files: each program or library from
#     the arm64 package that holds it at the same path (found by content in the amd64 root),
#     with the arm64 libraries and loaders it needs; the arm64 kernel's modules of the same
#     names, with their dependencies and the virtio/ext4 ones; the scripts and configuration
#     as they are (the architecture's name changed);
#   - module lists by the amd64 root's own depmod, the archive by its own cpio (run from the
#     amd64 root through its loader: the host may have neither).
# Needs root (file owners kept in the image). ~1 min, most of it downloading ~60 MB.
set -euo pipefail

from=${1:?usage: debian-vm-arm64.sh FROM DEST}
dest=${2:?usage: debian-vm-arm64.sh FROM DEST}
kernel_pkg=linux-image-cloud-arm64
log() { echo "debian-vm-arm64: [${SECONDS}s] $*" >&2; }

# The layout number of this script, as debian-vm.sh's stamp: a change to the VM's contents
# changes it. The same VM, made from the same amd64 VM: nothing to do.
layout="debian-vm 1 bookworm arm64 $kernel_pkg"
[ -s "$from/package" ] && [ -d "$from/root" ] && [ -s "$from/initrd.img" ] ||
    { log "no amd64 VM in $from: run scripts/debian-vm.sh amd64 first"; exit 1; }
if [ -f "$dest/rootfs.ext4" ] && [ "$(cut -d' ' -f1-5 "$dest/package" 2>/dev/null)" = "$layout" ] &&
    cmp -s "$dest/from" "$from/package"; then
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { log "run as root (file owners)"; exit 1; }

tmp="$dest.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/debs"
root="$tmp/root"
logfile="$dest.log"
: >"$logfile"
fail() { tail -n 20 "$logfile" >&2; log "$*"; rm -rf "$tmp"; exit 1; }

# The amd64 root's own programs, run by its loader (they are the host's architecture).
a="$from/root"
amd64() {
    local name=$1 prog=$2
    shift 2
    "$a/usr/lib64/ld-linux-x86-64.so.2" --library-path "$a/usr/lib/x86_64-linux-gnu" \
        --argv0 "$name" "$a$prog" "$@"
}
cpio_() { amd64 cpio /usr/bin/cpio "$@"; }
depmod_() { amd64 depmod /usr/bin/kmod "$@"; }

log "copying the amd64 root"
cp -a "$a" "$root"

# The amd64 packages, their arm64 builds of the same version.
mapfile -t pkgs < <(dpkg-query --admindir="$root/var/lib/dpkg" -W \
    -f '${Package} ${Version} ${Architecture}\n' | awk '$3 == "amd64" { print $1, $2 }')
[ "${#pkgs[@]}" -gt 0 ] || fail "no amd64 package in $a"
specs=()
kernel_version=""
for p in "${pkgs[@]}"; do
    name=${p% *} version=${p#* }
    case "$name" in
    linux-image-*-amd64) name="${name%-amd64}-arm64" ;;
    esac
    [ "$name" != "$kernel_pkg" ] || kernel_version=$version
    specs+=("$name:arm64=$version")
done
[ -n "$kernel_version" ] || fail "no $kernel_pkg among the amd64 root's packages"
log "downloading the arm64 builds of ${#specs[@]} packages"
download() { (cd "$tmp/debs" && apt-get download -qq "${specs[@]}") >>"$logfile" 2>&1; }
download || { apt-get update -qq >>"$logfile" 2>&1 && download; } ||
    fail "apt-get download of the arm64 packages failed (stale lists, or a version gone)"

log "unpacking them over the amd64 files"
# Every file of the amd64 packages goes (directories stay: a merged /usr's /lib is a link to
# one); then the arm64 files, through the root's directory links.
for p in "${pkgs[@]}"; do
    name=${p% *}
    list="$root/var/lib/dpkg/info/$name:amd64.list"
    [ -f "$list" ] || list="$root/var/lib/dpkg/info/$name.list"
    [ -f "$list" ] || continue
    while IFS= read -r f; do
        [ -d "$root$f" ] || printf '%s\0' "$root$f"
    done <"$list"
done | xargs -0 rm -f
for d in "$tmp"/debs/*.deb; do
    dpkg-deb --fsys-tarfile "$d" | tar -x -C "$root" --keep-directory-symlink ||
        fail "unpacking $d failed"
done
amd64_version=$(ls "$a/usr/lib/modules")
rm -rf "$root/usr/lib/x86_64-linux-gnu" "$root/usr/lib64" "$root/lib64" \
    "$root/usr/lib/modules/$amd64_version" "$root/boot/initrd.img-$amd64_version" \
    "$root/etc/ld.so.cache" "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
version=$(ls "$root/usr/lib/modules")
[ -n "$version" ] && [ -f "$root/boot/vmlinuz-$version" ] || fail "no arm64 kernel in $root"
depmod_ -b "$root" "$version" >>"$logfile" 2>&1 || fail "depmod of $version failed"

log "the initrd: the amd64 initrd's files, from the arm64 packages"
ai="$tmp/amd64-initrd" bi="$tmp/initrd"
mkdir -p "$ai"
(cd "$ai" && gzip -dc "$from/initrd.img" | cpio_ -idm --quiet) >>"$logfile" 2>&1 ||
    fail "unpacking the amd64 initrd failed"
cp -a "$ai" "$bi"
rm -rf "$bi/usr/lib/modules" "$bi/usr/lib64" "$bi/lib64" "$bi/etc/ld.so.cache"
is_elf() { local m=""; IFS= read -r -n 4 m <"$1" 2>/dev/null; [ "$m" = $'\x7fELF' ]; }
arm() { echo "${1//x86_64-linux-gnu/aarch64-linux-gnu}"; }
find "$a" -xdev -type f -printf '%s\t%p\n' >"$tmp/sizes"
# Each ELF file of the initrd: the root's file of the same content (first at the same path),
# replaced by the arm64 file at that path (none: an amd64-only loader or library, which the
# closure below brings in its arm64 form).
while IFS= read -r -d '' f; do
    rel=${f#"$ai"/}
    is_elf "$f" || continue
    rm -f "$bi/$rel"
    src=""
    if cmp -s "$f" "$a/$rel"; then
        src=$rel
    else
        while IFS= read -r c; do
            cmp -s "$f" "$c" && { src=${c#"$a"/}; break; }
        done < <(awk -F'\t' -v s="$(stat -c %s "$f")" '$1 == s { print $2 }' "$tmp/sizes")
    fi
    [ -n "$src" ] || fail "$rel of the amd64 initrd is no file of the amd64 root"
    [ -f "$root/$(arm "$src")" ] || continue
    mkdir -p "$bi/$(dirname "$(arm "$rel")")"
    cp -L "$root/$(arm "$src")" "$bi/$(arm "$rel")"
done < <(find "$ai" -type f -print0)
# Symlinks into the amd64 multiarch directory point at the arm64 one.
while IFS= read -r -d '' l; do
    t=$(readlink "$l")
    [ "$t" = "$(arm "$t")" ] || ln -sfn "$(arm "$t")" "$l"
done < <(find "$bi" -type l -print0)
find "$bi" -depth -path '*x86_64-linux-gnu*' -exec rm -rf {} + 2>/dev/null || true
cp "$root/etc/ld.so.conf.d/aarch64-linux-gnu.conf" "$bi/etc/ld.so.conf.d/"
sed -i 's/^DPKG_ARCH=amd64$/DPKG_ARCH=arm64/' "$bi/conf/arch.conf"
log "the initrd's libraries and modules"
# What the programs load: their loader and libraries (RUNPATH first, then the multiarch
# directories), until nothing new is needed.
declare -A read_=()
while :; do
    added=0
    while IFS= read -r -d '' f; do
        [ -z "${read_[$f]:-}" ] || continue
        read_[$f]=1
        is_elf "$f" || continue
        rel=/${f#"$bi"/}
        interp=$(readelf -lW "$f" 2>/dev/null | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
        dirs=$(readelf -dW "$f" 2>/dev/null | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]$/\2/p' | tr ':' ' ')
        dirs=${dirs//\$ORIGIN/$(dirname "$rel")}
        need=()
        [ -z "$interp" ] || need+=("$interp")
        for n in $(readelf -dW "$f" 2>/dev/null | sed -n 's/.*Shared library: \[\(.*\)\]$/\1/p'); do
            for d in $dirs /usr/lib/aarch64-linux-gnu /usr/lib; do
                [ -e "$root$d/$n" ] && { need+=("$d/$n"); break; }
            done
        done
        for n in "${need[@]}"; do
            [ -e "$bi$n" ] && continue
            [ -e "$root$n" ] || fail "$rel needs $n, which the arm64 root lacks"
            mkdir -p "$bi$(dirname "$n")"
            cp -L "$root$n" "$bi$n"
            added=1
        done
    done < <(find "$bi" -type f -not -name '*.ko' -print0)
    [ "$added" = 1 ] || break
done
# The arm64 kernel's modules of the amd64 initrd's names, the virtio disk's and ext4, with
# what they depend on (modules.dep, relative paths).
moddir="$root/usr/lib/modules/$version"
declare -A want=()
while IFS= read -r m; do want[$m]=1; done < <(find "$ai/usr/lib/modules" -name '*.ko*' -printf '%f\n' |
    sed 's/\.ko.*$//')
for m in virtio_blk virtio_pci virtio_mmio ext4 crc32c_generic; do want[$m]=1; done
mkdir -p "$bi/usr/lib/modules/$version"
cp "$moddir"/modules.order "$moddir"/modules.builtin "$moddir"/modules.builtin.modinfo \
    "$bi/usr/lib/modules/$version/"
declare -A taken=()
while IFS= read -r line; do
    path=${line%%:*}
    base=${path##*/}
    [ -n "${want[${base%%.ko*}]:-}" ] || continue
    for p in "$path" ${line#*:}; do
        [ -n "${taken[$p]:-}" ] && continue
        taken[$p]=1
        mkdir -p "$bi/usr/lib/modules/$version/$(dirname "$p")"
        cp "$moddir/$p" "$bi/usr/lib/modules/$version/$p"
    done
done <"$moddir/modules.dep"
depmod_ -b "$bi" "$version" >>"$logfile" 2>&1 || fail "depmod of the initrd failed"
(cd "$bi" && find . | LC_ALL=C sort | cpio_ -o -H newc -R 0:0 --reproducible --quiet) |
    gzip -n -9 >"$tmp/initrd.img" || fail "packing the initrd failed"
cp "$root/boot/vmlinuz-$version" "$tmp/vmlinuz"
log "the image"
rm -rf "$ai" "$bi" "$tmp/debs" "$tmp/sizes"

# The image, as debian-vm.sh makes amd64's.
kib=$(du -sk "$root" | cut -f1)
mke2fs -q -t ext4 -L debvm -d "$root" "$tmp/rootfs.ext4" "$((kib * 5 / 4 + 65536))k" >>"$logfile" 2>&1 ||
    fail "mke2fs -d failed"

cp "$from/package" "$tmp/from"
echo "$layout $kernel_version $version" >"$tmp/package"
rm -rf "$dest" && mv "$tmp" "$dest"
log "ok: $dest ($(du -sh --apparent-size "$dest" | cut -f1) apparent, $(du -sh "$dest" | cut -f1) on disk, ${#taken[@]} modules in the initrd)"
