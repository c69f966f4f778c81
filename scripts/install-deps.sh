#!/usr/bin/env bash
# Installs everything qemu-uftrace needs to build, record and test, idempotently.
# Used by the README, by the tests (via .ci/run) and by bench/.
#   - QEMU >= 9.2 with plugin support (bookworm-backports ships 10.0)
#   - uftrace (Debian's 0.13)
#   - the aarch64 cross compiler for the example and test guests
#   - Debian's arm64 cloud kernel (cached outside the repo) for the kernel test and benchmark
set -euo pipefail

CACHE="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { echo "install-deps: $*" >&2; }

# bookworm-backports carries QEMU 10.0 and Linux 6.12; bookworm itself is too old for both.
ensure_backports() {
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding the bookworm-backports suite"
        $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        $SUDO apt-get update -qq
    fi
}

command -v cargo >/dev/null 2>&1 || {
    log "cargo not found: install a Rust toolchain >= 1.88 (rustup) first"
    exit 1
}

have_qemu() {
    command -v qemu-system-aarch64 >/dev/null 2>&1 || return 1
    local v
    v=$(qemu-system-aarch64 --version | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    set -- $v
    [ "${1:-0}" -gt 9 ] || { [ "${1:-0}" -eq 9 ] && [ "${2:-0}" -ge 2 ]; }
}

# On bookworm, QEMU, the 6.12 kernel and the user-mode QEMU come from backports.
codename=$(. /etc/os-release; echo "${VERSION_CODENAME:-}")
backports=""
if [ "$codename" = bookworm ]; then
    ensure_backports
    backports=/bookworm-backports
fi

need=()
have_qemu || need+=(qemu)
command -v uftrace >/dev/null 2>&1 || need+=(uftrace)
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-nm >/dev/null 2>&1 || need+=(binutils-aarch64-linux-gnu)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
# -M virt's default NIC wants its option ROM (a Recommends of QEMU, skipped below).
dpkg -s ipxe-qemu >/dev/null 2>&1 || need+=(ipxe-qemu)
# A real emulator for a target qemu-uftrace does not support yet (the CLI's bad-input tests).
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v /usr/bin/time >/dev/null 2>&1 || need+=(time)
# The symbols tests build dynamic and PIE arm64 programs; vmlinux-to-elf lives in a venv.
dpkg -s libc6-dev-arm64-cross >/dev/null 2>&1 || need+=(libc6-dev-arm64-cross)
dpkg -s python3-venv >/dev/null 2>&1 || need+=(python3-venv)

if [ "${#need[@]}" -gt 0 ]; then
    log "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    pkgs=(uftrace gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu tmux hyperfine zstd make time
        libc6-dev-arm64-cross python3-venv)
    $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    qemu_release=()
    [ -z "$backports" ] || qemu_release=(-t "${backports#/}")
    $SUDO apt-get install -y -qq --no-install-recommends "${qemu_release[@]}" \
        qemu-system-arm qemu-system-x86 ipxe-qemu >/dev/null
fi
have_qemu || { log "qemu-system-aarch64 >= 9.2 is still missing"; exit 1; }

# Files from Debian packages, kept in the cache rather than installed (arm64 kernels; QEMUs
# that installing would register as binfmt handlers system-wide).

# keep_from_deb PACKAGE DIR PATH=NAME...: downloads PACKAGE (apt's name, with :arch and
# /suite as needed) and keeps each file matching PATH (a glob inside the package) as
# DIR/NAME. The files appear together, once all are extracted.
keep_from_deb() {
    local pkg=$1 dir=$2 spec tmp globs=() ok=1
    shift 2
    tmp=$(mktemp -d)
    for spec in "$@"; do globs+=("./${spec%%=*}"); done
    # Called where `set -e` does not apply (after ||): every step is checked.
    (cd "$tmp" && apt-get download -qq "$pkg" 2>/dev/null) &&
        dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards "${globs[@]}" &&
        mkdir -p "$dir" || ok=0
    for spec in "$@"; do
        [ "$ok" = 1 ] && cp "$tmp"/${spec%%=*} "$dir/${spec#*=}.tmp" || ok=0
    done
    for spec in "$@"; do
        [ "$ok" = 1 ] && mv "$dir/${spec#*=}.tmp" "$dir/${spec#*=}" || ok=0
    done
    rm -rf "$tmp"
    [ "$ok" = 1 ]
}

# after_update CMD...: runs CMD; when it fails, refreshes the package lists and runs it
# once more. Kernel package names carry the full version: after a point release the mirror
# drops the old file and stale lists still name it.
after_update() {
    "$@" && return 0
    $SUDO apt-get update -qq
    "$@"
}

# kernel_from SUITE VERSION DIR PATH=NAME...: the arm64 cloud kernel the metapackage in SUITE
# depends on (VERSION: a sed pattern for the version part) into DIR, named in DIR/package.
kernel_from() {
    local suite=$1 version=$2 dir=$3 pkg
    shift 3
    pkg=$(apt-cache depends "linux-image-cloud-arm64:arm64$suite" 2>/dev/null |
        sed -n "s/.*Depends: \(linux-image-$version-cloud-arm64\).*/\1/p" | head -n1)
    [ -n "$pkg" ] || return 1
    log "fetching $pkg into $dir"
    keep_from_deb "$pkg:arm64$suite" "$dir" "$@" && echo "$pkg" >"$dir/package"
}

if [ "$codename" = bookworm ]; then
    # bookworm's own 7.2 (too old) and the backported 10.0 user-mode emulator, which Debian
    # builds static, without plugin support: the CLI's bad-input tests.
    [ -s "$CACHE/qemu-7.2/qemu-aarch64-static" ] || after_update keep_from_deb \
        qemu-user-static/bookworm "$CACHE/qemu-7.2" usr/bin/qemu-aarch64-static=qemu-aarch64-static
    [ -s "$CACHE/qemu-user-10.0/qemu-aarch64" ] || after_update keep_from_deb \
        qemu-user/bookworm-backports "$CACHE/qemu-user-10.0" usr/bin/qemu-aarch64=qemu-aarch64
fi

dpkg --print-foreign-architectures | grep -qx arm64 ||
    { $SUDO dpkg --add-architecture arm64; $SUDO apt-get update -qq; }

# Debian's arm64 cloud kernel (the real-kernel tests and the benchmark boot it to its panic),
# and from its -dbg package (~260 MB) the DWARF vmlinux and real System.map of that very
# kernel, for the symbols crate's kernel-scale tests and bench/symbols.sh.
if [ ! -s "$CACHE/kernel/vmlinuz" ] || [ ! -s "$CACHE/kernel/package" ]; then
    after_update kernel_from "" "[0-9][^ ]*" "$CACHE/kernel" 'boot/vmlinuz-*=vmlinuz' ||
        { log "cannot fetch Debian's linux-image-*-cloud-arm64 package"; exit 1; }
fi
if [ ! -s "$CACHE/kernel-dbg/vmlinux" ] || [ ! -s "$CACHE/kernel-dbg/System.map" ]; then
    dbg="$(cat "$CACHE/kernel/package")-dbg"
    log "fetching $dbg into $CACHE/kernel-dbg (large)"
    after_update keep_from_deb "$dbg:arm64" "$CACHE/kernel-dbg" \
        'usr/lib/debug/boot/vmlinux-*=vmlinux' 'usr/lib/debug/boot/System.map-*=System.map' ||
        { log "cannot fetch $dbg"; exit 1; }
    echo "$dbg" >"$CACHE/kernel-dbg/package"
fi

# Debian's 6.12 (bookworm-backports; trixie's default): the symbols crate recovers kallsyms
# from the raw images of both kernels Debian ships. Only the image: it is a raw arm64 Image.
if [ ! -s "$CACHE/kernel-6.12/vmlinuz" ] || [ ! -s "$CACHE/kernel-6.12/package" ]; then
    after_update kernel_from "$backports" "6\\.12\\.[^ ]*" "$CACHE/kernel-6.12" 'boot/vmlinuz-*=vmlinuz' ||
        { log "cannot fetch Debian's linux-image-6.12.*-cloud-arm64 package"; exit 1; }
fi

# vmlinux-to-elf (PyPI), the peer the kallsyms tests compare with, in a venv of Debian's
# python3 (not whatever python3 comes first in PATH).
venv="$CACHE/venv"
if ! "$venv/bin/vmlinux-to-elf" --help >/dev/null 2>&1; then
    log "installing vmlinux-to-elf into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check vmlinux-to-elf==1.4.0
    "$venv/bin/vmlinux-to-elf" --help >/dev/null
fi

log "ok (cache: $CACHE)"
