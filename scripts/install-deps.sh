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

if [ "${#need[@]}" -gt 0 ]; then
    log "installing: ${need[*]}"
    . /etc/os-release
    if [ "${VERSION_CODENAME:-}" = bookworm ]; then ensure_backports; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    pkgs=(uftrace gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu tmux hyperfine zstd make time)
    $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    if [ "${VERSION_CODENAME:-}" = bookworm ]; then
        $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-arm qemu-system-x86 ipxe-qemu >/dev/null
    else
        $SUDO apt-get install -y -qq --no-install-recommends qemu-system-arm qemu-system-x86 ipxe-qemu >/dev/null
    fi
fi
have_qemu || { log "qemu-system-aarch64 >= 9.2 is still missing"; exit 1; }

# Real QEMUs that qemu-uftrace must refuse, unpacked into the cache (installing them would
# register binfmt handlers system-wide): bookworm's 7.2 (too old) and the backported 10.0 user
# emulator, which Debian builds static, without plugin support.
unpack_qemu() { # DIR PACKAGE/RELEASE
    [ -d "$CACHE/$1" ] && return 0
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -qq "$2" 2>/dev/null) || { $SUDO apt-get update -qq; (cd "$tmp" && apt-get download -qq "$2"); }
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    mkdir -p "$CACHE/$1.tmp"
    cp "$tmp"/x/usr/bin/qemu-aarch64* "$CACHE/$1.tmp/"
    mv "$CACHE/$1.tmp" "$CACHE/$1"
    rm -rf "$tmp"
}
if [ "${VERSION_CODENAME:-$(. /etc/os-release; echo "$VERSION_CODENAME")}" = bookworm ]; then
    unpack_qemu qemu-7.2 qemu-user-static/bookworm
    unpack_qemu qemu-user-10.0 qemu-user/bookworm-backports
fi

# Debian's arm64 cloud kernel: the real-kernel test and the benchmark boot it to its panic.
mkdir -p "$CACHE/kernel"
if [ ! -s "$CACHE/kernel/vmlinuz" ]; then
    log "fetching Debian's arm64 cloud kernel into $CACHE/kernel"
    dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update -qq
    pkg=$(apt-cache depends linux-image-cloud-arm64:arm64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-cloud-arm64\).*/\1/p' | head -n1)
    [ -n "$pkg" ] || { log "cannot find the linux-image-*-cloud-arm64 package"; exit 1; }
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -qq "$pkg:arm64")
    dpkg-deb -x "$tmp"/*.deb "$tmp/x"
    cp "$tmp"/x/boot/vmlinuz-* "$CACHE/kernel/vmlinuz.tmp"
    cp "$tmp"/x/boot/System.map-* "$CACHE/kernel/System.map" 2>/dev/null || true
    echo "$pkg" >"$CACHE/kernel/package"
    mv "$CACHE/kernel/vmlinuz.tmp" "$CACHE/kernel/vmlinuz"
    rm -rf "$tmp"
fi
log "ok (cache: $CACHE)"

# --- kernel debug symbols (symbols crate) ---
# The symbols crate's kernel-scale tests and bench/symbols.sh need the DWARF vmlinux and the
# real System.map of the very kernel cached above; the -dbg package is ~260 MB, so only those
# two files are kept, outside the repo.
kernel_debug_symbols() {
    # /usr/bin/time: peak RSS for bench/symbols.sh; the arm64 libc headers and crt files:
    # the symbols tests build dynamic executables and PIEs.
    local extra=()
    [ -x /usr/bin/time ] || extra+=(time)
    dpkg -s libc6-dev-arm64-cross >/dev/null 2>&1 || extra+=(libc6-dev-arm64-cross)
    if [ "${#extra[@]}" -gt 0 ]; then
        log "installing: ${extra[*]}"
        $SUDO apt-get install -y -qq --no-install-recommends "${extra[@]}" >/dev/null
    fi
    local dir="$CACHE/kernel-dbg" pkg
    mkdir -p "$dir"
    [ -s "$dir/vmlinux" ] && [ -s "$dir/System.map" ] && return 0
    pkg="$(cat "$CACHE/kernel/package")-dbg"
    log "fetching $pkg into $dir (large)"
    dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
    apt-cache show "$pkg:arm64" >/dev/null 2>&1 || $SUDO apt-get update -qq
    local tmp
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download -qq "$pkg:arm64")
    # Extract only the two files we need (the package unpacks to ~1.4 GB).
    dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards \
        './usr/lib/debug/boot/vmlinux-*' './usr/lib/debug/boot/System.map-*'
    cp "$tmp"/usr/lib/debug/boot/System.map-* "$dir/System.map.tmp"
    cp "$tmp"/usr/lib/debug/boot/vmlinux-* "$dir/vmlinux.tmp"
    echo "$pkg" >"$dir/package"
    mv "$dir/System.map.tmp" "$dir/System.map"
    mv "$dir/vmlinux.tmp" "$dir/vmlinux"
    rm -rf "$tmp"
}
kernel_debug_symbols
# --- end kernel debug symbols ---

# --- kernel 6.12 and vmlinux-to-elf (symbols crate) ---
# The symbols crate recovers kallsyms from raw images of every kernel Debian ships: 6.1
# (cached above) and 6.12 (bookworm-backports; trixie's default). Its peer test compares the
# recovered functions with those of vmlinux-to-elf (PyPI), installed into a venv in the cache.
kernel_6_12_and_peer() {
    local dir="$CACHE/kernel-6.12"
    mkdir -p "$dir"
    if [ ! -s "$dir/vmlinuz" ] || [ ! -s "$dir/package" ]; then
        dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
        local suite="" codename
        codename=$(. /etc/os-release; echo "${VERSION_CODENAME:-}")
        if [ "$codename" = bookworm ]; then
            suite=/bookworm-backports
            ensure_backports
        fi
        # The package's name carries the full version: after a point release the lists name
        # a new one and the old file is gone from the mirror, so a failed download updates
        # the lists and resolves the name again.
        local pkg tmp attempt
        tmp=$(mktemp -d)
        for attempt in 1 2; do
            pkg=$(apt-cache depends "linux-image-cloud-arm64:arm64$suite" 2>/dev/null |
                sed -n 's/.*Depends: \(linux-image-6\.12\.[^ ]*-cloud-arm64\).*/\1/p' | head -n1)
            if [ -n "$pkg" ]; then
                log "fetching $pkg into $dir"
                (cd "$tmp" && apt-get download -qq "$pkg:arm64$suite") && break
            fi
            [ "$attempt" = 1 ] || { log "cannot fetch Debian's linux-image-6.12.*-cloud-arm64 package"; exit 1; }
            $SUDO apt-get update -qq
        done
        # Only the image: Debian's 6.12 vmlinuz is a raw arm64 Image (no EFI zboot).
        dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*'
        cp "$tmp"/boot/vmlinuz-* "$dir/vmlinuz.tmp"
        echo "$pkg" >"$dir/package"
        mv "$dir/vmlinuz.tmp" "$dir/vmlinuz"
        rm -rf "$tmp"
    fi

    # Debian's python3 (not whatever python3 comes first in PATH), with its venv module.
    local venv="$CACHE/venv"
    if ! "$venv/bin/vmlinux-to-elf" --help >/dev/null 2>&1; then
        dpkg -s python3-venv >/dev/null 2>&1 || {
            log "installing: python3-venv"
            $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null 2>&1 || {
                $SUDO apt-get update -qq
                $SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
            }
        }
        log "installing vmlinux-to-elf into $venv"
        rm -rf "$venv"
        /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install -q --disable-pip-version-check vmlinux-to-elf==1.4.0
        "$venv/bin/vmlinux-to-elf" --help >/dev/null
    fi
}
kernel_6_12_and_peer
# --- end kernel 6.12 and vmlinux-to-elf ---
