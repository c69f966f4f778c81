#!/usr/bin/env bash
# Installs what qemu-uftrace needs, idempotently.
#   install-deps.sh demo   what scripts/demo.sh uses: QEMU >= 9.2 with plugins (bookworm-backports
#                          has 10.0), uftrace, the aarch64 cross compiler (a minute or two)
#   install-deps.sh [test] also everything the tests and bench/ run on (scripts/test.sh, .ci/run):
#     - QEMU 10.2.2 built from Debian's source package (plugins in user mode, the
#       discontinuity callback) and QEMU 11.1.3 from trixie-backports in a trixie root
#     - Debian's arm64, amd64 and riscv64 kernels with their -dbg vmlinux, OpenSBI with symbols
#     - Debian's arm64 glibc with its debug files, unpacked as a sysroot
#     - cross compilers and binutils for the guests, bzip2 and sqlite3 for the benchmarks
#     - uftrace 0.17 and 0.19 (Debian's source packages): the tests read traces with each
#     - the nightly Rust toolchain with Miri, and cargo-fuzz
# Files kept from Debian's packages go to the cache ($QEMU_UFTRACE_CACHE), each written under a
# temporary name and renamed into place, its stamp last: an interrupted run leaves nothing a
# later one takes for complete. Which file of which package holds a kernel is decided by
# `cargo xtask` (xtask/: every layout the archive has used, tested on fixtures). Package mirrors
# come from the machine's own apt sources; no host name is written here.
# A mirror mid-sync, or no network: put the .deb (or a source package's .dsc and files) in a
# directory named by $QEMU_UFTRACE_DEBS and run again.
set -euo pipefail

what=${1:-test}
case "$what" in demo | test) ;; *) echo "usage: $0 [demo|test]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
CACHE="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

log() { echo "install-deps: $*" >&2; }
die() { log "$*"; exit 1; }

# One install at a time per cache (scripts/cache-lock.sh): this script runs again under its lock.
if [ "${QEMU_UFTRACE_CACHE_LOCKED:-}" != "$CACHE" ]; then
    exec "$root/scripts/cache-lock.sh" "$CACHE" env QEMU_UFTRACE_CACHE_LOCKED="$CACHE" "$0" "$@"
fi

command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain >= 1.88 (rustup) first"

codename=$(. /etc/os-release; echo "${VERSION_CODENAME:-}")

# The Debian archive this machine already uses: the first `deb` source whose suite is the
# release itself (not -security, not -updates), from deb822 or one-line sources.
debian_mirror() {
    local uri
    uri=$(awk -v rel="$codename" '
        /^URIs:/ { uris = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == rel) { print uris; exit } }
        /^$/ { uris = "" }' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
    [ -n "$uri" ] || uri=$(awk -v rel="$codename" '$1 == "deb" && $3 == rel { print $2; exit }' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -n1)
    [ -n "$uri" ] || die "cannot find the Debian mirror in /etc/apt/sources*: add the release's own suite ($codename)"
    echo "${uri%/}"
}

# private_apt DIR TYPE SUITES [ARCH]: an apt state of its own in DIR (lists, cache, sources), so
# that other suites or architectures never touch the system's; prints the APT_CONFIG file.
# Fails when a suite's lists cannot be fetched (a mirror mid-sync serves indexes older than
# its Release file: "File has unexpected size").
private_apt() {
    local dir=$1 type=$2 suites=$3 arch=${4:-}
    rm -rf "$dir" && mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial" "$dir/parts"
    # apt downloads as its own user when it can reach the state (else it warns).
    chmod -R go+rx "$dir"
    : >"$dir/status"
    {
        echo "Types: $type"
        echo "URIs: $(debian_mirror)"
        echo "Suites: $suites"
        echo "Components: main"
        [ -z "$arch" ] || echo "Architectures: $arch"
        echo "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
    } >"$dir/sources.sources"
    {
        echo "Dir::Etc::SourceList \"$dir/sources.sources\";"
        echo "Dir::Etc::SourceParts \"$dir/parts\";"
        echo "Dir::Etc::Preferences \"/dev/null\";"
        echo "Dir::Etc::PreferencesParts \"$dir/parts\";"
        echo "Dir::State::Lists \"$dir/lists\";"
        echo "Dir::Cache \"$dir/cache\";"
        echo "Dir::State::status \"$dir/status\";"
        echo "Debug::NoLocking \"1\";"
        [ -z "$arch" ] || echo "APT::Architecture \"$arch\"; APT::Architectures { \"$arch\"; };"
    } >"$dir/apt.conf"
    APT_CONFIG="$dir/apt.conf" apt-get update -qq >"$dir/update.log" 2>&1 &&
        ! grep -qE '^(E:|W: (Failed to fetch|Some index files))' "$dir/update.log" || return 1
    echo "$dir/apt.conf"
}

# Only the reason of a failed `apt-get update`: apt's own lines name the mirror.
apt_failure() {
    grep -oEm1 'File has unexpected size|Hash Sum mismatch|Release file .* is not valid yet|[45][0-9][0-9] [A-Z][A-Za-z ]+' "$1" ||
        echo "apt-get update failed"
}

apt_install() {
    # Another install on this machine (a run with a cache of its own) may hold dpkg's lock.
    $SUDO apt-get install -o DPkg::Lock::Timeout=1200 -y -qq --no-install-recommends "$@" >/dev/null ||
        die "apt-get install $* failed: run apt-get update, then this script again"
}

# On bookworm, QEMU >= 9.2 (10.0), the 6.12 kernel and meson >= 1.5 come from backports.
backports=""
if [ "$codename" = bookworm ]; then
    backports=bookworm-backports
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding the bookworm-backports suite"
        printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$(debian_mirror)" | $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
        $SUDO apt-get update -qq
    fi
fi

have_qemu() {
    command -v qemu-system-aarch64 >/dev/null 2>&1 || return 1
    local v
    v=$(qemu-system-aarch64 --version | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
    set -- $v
    [ "${1:-0}" -gt 9 ] || { [ "${1:-0}" -eq 9 ] && [ "${2:-0}" -ge 2 ]; }
}

# need_cmd COMMAND PACKAGE / need_pkg PACKAGE: collect what is missing, installed at once.
need=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
need_pkg() { dpkg -s "$1" >/dev/null 2>&1 || need+=("$1"); }
install_needed() {
    [ "${#need[@]}" -gt 0 ] || return 0
    log "installing: ${need[*]}"
    $SUDO apt-get update -qq
    local qemu=() plain=() p
    for p in "${need[@]}"; do
        case "$p" in qemu-system-* | ipxe-qemu) qemu+=("$p") ;; *) plain+=("$p") ;; esac
    done
    [ "${#plain[@]}" -eq 0 ] || apt_install "${plain[@]}"
    [ "${#qemu[@]}" -eq 0 ] || apt_install ${backports:+-t "$backports"} "${qemu[@]}"
    need=()
}

# ---- The demo's needs: QEMU with plugins for aarch64, uftrace, the example's cross compiler.
have_qemu || need+=(qemu-system-arm)
need_cmd uftrace uftrace
need_cmd aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
need_cmd make make
install_needed
have_qemu || die "qemu-system-aarch64 >= 9.2 is still missing (Debian ships 10.0 in bookworm-backports and trixie)"
if [ "$what" = demo ]; then
    log "ok (the demo's needs)"
    exit 0
fi

# ---- The tests' needs.
need_cmd aarch64-linux-gnu-nm binutils-aarch64-linux-gnu
# The instruction decoders' tests assemble x86 (native binutils, named explicitly) and RISC-V.
need_cmd x86_64-linux-gnu-as binutils-x86-64-linux-gnu
need_cmd riscv64-linux-gnu-as binutils-riscv64-linux-gnu
need_cmd tmux tmux
need_cmd hyperfine hyperfine
need_cmd zstd zstd
need_cmd lz4 lz4 # the amd64 bzImage's payload, for the kallsyms peer test
need_cmd /usr/bin/time time
need_cmd strace strace # late munmaps, for the user-mode layout test
need_cmd eu-readelf elfutils # kernel modules' source lines: the oracle
need_cmd tclsh tcl # sqlite's amalgamation
need_cmd debootstrap debootstrap
# -M virt's default NIC wants its option ROM (a Recommends of QEMU, skipped).
need_pkg ipxe-qemu
need_cmd qemu-system-x86_64 qemu-system-x86
need_cmd qemu-system-riscv64 qemu-system-riscv
# A real emulator for a target qemu-uftrace does not support (the CLI's bad-input tests).
need_cmd qemu-system-s390x qemu-system-s390x
# qcow2 disks for the snapshot tests (savevm/-loadvm).
need_cmd qemu-img qemu-utils
# Dynamic and PIE guests for all three user-mode targets, C++ for the unwinding tests.
need_pkg libc6-dev-arm64-cross
need_cmd riscv64-linux-gnu-gcc gcc-riscv64-linux-gnu
need_pkg libc6-dev-riscv64-cross
need_cmd aarch64-linux-gnu-g++ g++-aarch64-linux-gnu
need_cmd riscv64-linux-gnu-g++ g++-riscv64-linux-gnu
need_cmd x86_64-linux-gnu-g++ g++
need_pkg python3-venv
# The host's libc with its detached DWARF: -a's values of a program's libc calls (record_args).
need_pkg libc6-dbg
# Building QEMU 10.2.2 (meson >= 1.5 and pycotap come from backports on bookworm).
for p in ninja-build libglib2.0-dev libpixman-1-dev libfdt-dev libcapstone-dev pkg-config flex \
    bison dpkg-dev zlib1g-dev; do need_pkg "$p"; done
install_needed
# QEMU 10.2 wants meson >= 1.5 (bookworm has 1.0) and pycotap.
meson_ok() { dpkg --compare-versions "$(dpkg-query -W -f '${Version}' meson 2>/dev/null || echo 0)" ge 1.5; }
if ! meson_ok || ! dpkg -s python3-pycotap >/dev/null 2>&1; then
    apt_install ${backports:+-t "$backports"} meson python3-pycotap
fi

# The nightly toolchain: Miri runs the engine's tests, cargo-fuzz the fuzz targets.
command -v rustup >/dev/null 2>&1 || die "rustup not found: Miri and cargo-fuzz need a nightly toolchain"
rustup run nightly rustc --version >/dev/null 2>&1 || {
    log "installing the nightly Rust toolchain (Miri, fuzz targets)"
    rustup toolchain install nightly --profile minimal
}
cargo +nightly miri --version >/dev/null 2>&1 || {
    log "installing the nightly toolchain's miri component"
    rustup component add --toolchain nightly miri >/dev/null
}
cargo +nightly miri setup >/dev/null 2>&1
command -v cargo-fuzz >/dev/null 2>&1 || {
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked
}

# source_package NAME VERSION SUITES DIR [OPTION...]: the files of Debian's source package
# (VERSION may be empty: the newest) from the deb-src of SUITES into DIR, through a private apt
# state; OPTIONs go to `apt-get source` (`--tar-only`). apt checks each file against the signed
# Sources index. A .dsc already in $QEMU_UFTRACE_DEBS is taken from there.
source_package() {
    local name=$1 version=$2 suites=$3 dest=$4 state conf local_dsc
    shift 4
    mkdir -p "$dest"
    local_dsc=$(ls "${QEMU_UFTRACE_DEBS:-/nonexistent}/${name}_${version#*:}"*.dsc 2>/dev/null | head -n1 || true)
    if [ -n "$local_dsc" ] && [ -n "$version" ]; then
        cp "$(dirname "$local_dsc")/${name}_"* "$dest"/ && return 0
    fi
    state=$(mktemp -d)
    conf=$(private_apt "$state" deb-src "$suites") ||
        { log "the deb-src lists of $suites fail ($(apt_failure "$state/update.log")): retry later"; rm -rf "$state"; return 1; }
    if ! (cd "$dest" && APT_CONFIG=$conf apt-get source --download-only -qq "$@" "$name${version:+=$version}" \
        >/dev/null 2>&1); then
        local carried
        carried=$(APT_CONFIG=$conf apt-cache showsrc "$name" 2>/dev/null | sed -n 's/^Version: //p' | sort -u | tr '\n' ' ')
        if [ -n "$version" ] && [[ " $carried" == *" $version "* ]]; then
            log "the files of Debian's source package $name $version, listed in $suites, cannot be downloaded from the mirror;" \
                "put its .dsc and files in a directory named by \$QEMU_UFTRACE_DEBS"
        else
            log "Debian's source package $name${version:+ $version} is not in $suites (they carry: ${carried:-nothing});" \
                "put its .dsc and files in a directory named by \$QEMU_UFTRACE_DEBS${version:+, or change the version in scripts/install-deps.sh}"
        fi
        rm -rf "$state"
        return 1
    fi
    rm -rf "$state"
}
# unpack_source NAME VERSION SUITES DIR: the same, unpacked with its patches into DIR.
unpack_source() {
    local tmp
    tmp=$(mktemp -d)
    source_package "$1" "$2" "$3" "$tmp" &&
        dpkg-source --no-check -x "$tmp"/*.dsc "$4" >/dev/null || { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
}

# QEMU 10.2.2 from Debian's source package, built for the targets qemu-uftrace traces with
# plugins enabled, user mode included: Debian's binaries lack plugins in user mode and 10.0
# lacks the discontinuity callback. About 13 minutes on two cores, once. Without debug
# information (-g): the binaries are stripped below anyway, and DWARF for every object is
# compile and link time on the install's critical path (issue 35).
QEMU_SRC_VERSION=1:10.2.2+ds-1
QEMU_TARGETS=aarch64-softmmu,x86_64-softmmu,riscv64-softmmu,aarch64-linux-user,x86_64-linux-user,riscv64-linux-user
q102="$CACHE/qemu-10.2.2"
# It is the install's longest step and needs the CPU while the kernels, the roots and the VM
# need the network: it runs in the background from here, and the install waits for it at its end.
build_qemu_102() {
    if [ ! -x "$q102/bin/qemu-system-aarch64" ] || [ "$(cat "$q102/targets" 2>/dev/null)" != "$QEMU_TARGETS" ]; then
        log "building QEMU ${QEMU_SRC_VERSION#1:} from Debian's source package into $q102 (~13 min)"
        work=$(mktemp -d)
        # apt checked the files against the signed index; the .dsc's own signature needs keys this
        # machine has no reason to hold.
        unpack_source qemu "$QEMU_SRC_VERSION" "sid forky trixie-backports" "$work/qemu" || exit 1
        mkdir "$work/qemu/build"
        (cd "$work/qemu/build" && ../configure --python=/usr/bin/python3 --prefix="$q102" \
            --target-list="$QEMU_TARGETS" --without-default-features --enable-plugins \
            --enable-capstone --enable-fdt=system --enable-tcg --disable-docs --disable-werror \
            --disable-install-blobs --disable-download --disable-debug-info \
            --firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu \
            >"$work/configure.log" 2>&1) ||
            { tail -n 30 "$work/configure.log" >&2; die "configuring QEMU failed"; }
        bins=(qemu-system-aarch64 qemu-system-x86_64 qemu-system-riscv64 qemu-aarch64 qemu-x86_64
            qemu-riscv64)
        # QEMU's own uftrace plugin and execlog: the peers the benchmarks and tests compare with.
        peers=(contrib/plugins/libuftrace.so contrib/plugins/libexeclog.so)
        ninja -C "$work/qemu/build" "${bins[@]}" "${peers[@]}" >"$work/build.log" 2>&1 ||
            { tail -n 30 "$work/build.log" >&2; die "building QEMU failed"; }
        rm -rf "$q102.tmp"
        mkdir -p "$q102.tmp/bin" "$q102.tmp/plugins"
        for b in "${bins[@]}"; do strip -o "$q102.tmp/bin/$b" "$work/qemu/build/$b"; done
        for p in "${peers[@]}"; do cp "$work/qemu/build/$p" "$q102.tmp/plugins/"; done
        echo "$QEMU_TARGETS" >"$q102.tmp/targets"
        rm -rf "$q102" && mv "$q102.tmp" "$q102"
        rm -rf "$work"
    fi
}
build_qemu_102 &
qemu_102_pid=$!
# A failed or interrupted install leaves no build behind (configure, ninja, the compilers).
trap '"$root/scripts/kill-tree.sh" "$qemu_102_pid"' EXIT

# The archive work: which file of which package (xtask/), built once (seconds).
# Its own target directory: scripts/test.sh builds the workspace beside the install, and a shared
# one would keep every xtask call waiting on that build's lock.
xtask() {
    cargo run --quiet --manifest-path "$root/Cargo.toml" --package xtask \
        --target-dir "${CARGO_TARGET_DIR:-$root/target}/xtask" -- "$@"
}

# fetch_kernel DIR META QUAL WANT=NAME...: the versioned kernel package that metapackage META
# pulls in (QUAL: `:ARCH` and `/SUITE` as apt takes them), its files kept as DIR/NAME; then
# DIR/package names it (the stamp, written last). Once more after `apt-get update` when the
# lists are stale (a point release drops the old file).
fetch_kernel() {
    local dir=$1 meta=$2 qual=$3 pkg s keeps=()
    shift 3
    for s in "$@"; do keeps+=("${s%%=*}=$dir/${s#*=}"); done
    pkg=$(xtask kernel-package "$meta$qual") || return 1
    log "fetching $pkg into $dir"
    if ! xtask keep "$pkg$qual" "${keeps[@]}" >/dev/null; then
        [ -z "${APT_CONFIG:-}" ] || return 1
        log "retrying after apt-get update"
        $SUDO apt-get update -qq
        pkg=$(xtask kernel-package "$meta$qual") && xtask keep "$pkg$qual" "${keeps[@]}" >/dev/null || return 1
    fi
    echo "$pkg" >"$dir/package.tmp" && mv "$dir/package.tmp" "$dir/package"
}
# keep_files DIR PKG QUAL WHAT WANT=NAME...: the files of package PKG that xtask keep's WANTs
# select, into DIR as NAME each, then PKG as DIR's stamp; WHAT says what is fetched.
keep_files() {
    local dir=$1 pkg=$2 qual=$3 what=$4 s keeps=()
    shift 4
    for s in "$@"; do keeps+=("${s%%=*}=$dir/${s#*=}"); done
    log "fetching $what into $dir"
    xtask keep "$pkg$qual" "${keeps[@]}" >/dev/null || return 1
    echo "$pkg" >"$dir/package.tmp" && mv "$dir/package.tmp" "$dir/package"
}
# fetch_dbg DIR IMAGE_DIR QUAL WANT=NAME...: the -dbg package of the kernel in IMAGE_DIR.
fetch_dbg() {
    local pkg
    pkg="$(cat "$2/package")-dbg"
    keep_files "$1" "$pkg" "$3" "$pkg (large)" "${@:4}"
}
# fetch_modules DIR IMAGE_DIR QUAL WANT=NAME...: files of the very package in IMAGE_DIR (its
# modules).
fetch_modules() {
    local pkg
    pkg=$(cat "$2/package")
    keep_files "$1" "$pkg" "$3" "modules of $pkg" "${@:4}"
}
# fresh DIR FILE...: DIR has its stamp and every FILE.
fresh() {
    local dir=$1 f
    shift
    [ -s "$dir/package" ] || return 1
    for f in "$@"; do [ -s "$dir/$f" ] || return 1; done
}

if [ "$codename" = bookworm ]; then
    # bookworm's own QEMU 7.2 (too old) and backports' static user-mode 10.0 (no plugins): the
    # CLI's bad-input tests.
    [ -s "$CACHE/qemu-7.2/qemu-aarch64-static" ] ||
        xtask keep qemu-user-static/bookworm \
            "path:usr/bin/qemu-aarch64-static=$CACHE/qemu-7.2/qemu-aarch64-static" >/dev/null ||
        die "cannot keep bookworm's qemu-aarch64-static"
    [ -s "$CACHE/qemu-user-10.0/qemu-aarch64" ] ||
        xtask keep qemu-user/bookworm-backports \
            "path:usr/bin/qemu-aarch64=$CACHE/qemu-user-10.0/qemu-aarch64" >/dev/null ||
        die "cannot keep bookworm-backports' qemu-aarch64"
fi

dpkg --print-foreign-architectures | grep -qx arm64 ||
    { $SUDO dpkg --add-architecture arm64; $SUDO apt-get update -qq; }

# Debian's arm64 cloud kernel (the kernel tests and the benchmark boot it to its panic) and,
# from its -dbg package (~260 MB), the DWARF vmlinux and real System.map of that very kernel,
# and the debug files of the two modules the module test loads (their source lines).
module_dbg=('path:usr/lib/debug/lib/modules/*/kernel/drivers/net/dummy.ko=dummy.ko'
    'path:usr/lib/debug/lib/modules/*/kernel/drivers/net/ifb.ko=ifb.ko')
fresh "$CACHE/kernel" vmlinuz ||
    fetch_kernel "$CACHE/kernel" linux-image-cloud-arm64 :arm64 kernel-image=vmlinuz || exit 1
fresh "$CACHE/kernel-dbg" vmlinux System.map dummy.ko ifb.ko &&
    [ "$(cat "$CACHE/kernel/package")-dbg" = "$(cat "$CACHE/kernel-dbg/package")" ] ||
    fetch_dbg "$CACHE/kernel-dbg" "$CACHE/kernel" :arm64 dbg-vmlinux=vmlinux system-map=System.map \
        "${module_dbg[@]}" || exit 1
# Two modules of that very kernel (its package, already fetched: ~21 MB), for the module test
# (cli/tests/guest_modules.rs): dummy.ko and ifb.ko, loaded by the guest with finit_module.
fresh "$CACHE/kernel-modules" dummy.ko ifb.ko &&
    [ "$(cat "$CACHE/kernel/package")" = "$(cat "$CACHE/kernel-modules/package")" ] ||
    fetch_modules "$CACHE/kernel-modules" "$CACHE/kernel" :arm64 \
        'path:lib/modules/*/kernel/drivers/net/dummy.ko=dummy.ko' \
        'path:lib/modules/*/kernel/drivers/net/ifb.ko=ifb.ko' || exit 1
# The newer arm64 kernel Debian ships (backports on bookworm): the symbols crate reads the
# kallsyms of both kernels' raw images.
fresh "$CACHE/kernel-6.12" vmlinuz ||
    fetch_kernel "$CACHE/kernel-6.12" linux-image-cloud-arm64 ":arm64${backports:+/$backports}" kernel-image=vmlinuz || exit 1
# Debian's arm64 kernel built for 16 KiB pages (a ~92 MB package; only its Image is kept):
# processes' files placed by the kernel's own page size (cli/tests/guest_procs.rs).
fresh "$CACHE/kernel-16k" vmlinuz ||
    fetch_kernel "$CACHE/kernel-16k" linux-image-arm64-16k ":arm64${backports:+/$backports}" kernel-image=vmlinuz || exit 1
# Debian's amd64 cloud kernel and its DWARF vmlinux (~283 MB package): the x86_64 kernel test.
fresh "$CACHE/kernel-amd64" vmlinuz ||
    fetch_kernel "$CACHE/kernel-amd64" linux-image-cloud-amd64 "" kernel-image=vmlinuz || exit 1
fresh "$CACHE/kernel-amd64-dbg" vmlinux dummy.ko ifb.ko &&
    [ "$(cat "$CACHE/kernel-amd64/package")-dbg" = "$(cat "$CACHE/kernel-amd64-dbg/package")" ] ||
    fetch_dbg "$CACHE/kernel-amd64-dbg" "$CACHE/kernel-amd64" "" dbg-vmlinux=vmlinux "${module_dbg[@]}" || exit 1
# The same two modules of the amd64 kernel (its package, ~21 MB), for the module test.
fresh "$CACHE/kernel-amd64-modules" dummy.ko ifb.ko &&
    [ "$(cat "$CACHE/kernel-amd64/package")" = "$(cat "$CACHE/kernel-amd64-modules/package")" ] ||
    fetch_modules "$CACHE/kernel-amd64-modules" "$CACHE/kernel-amd64" "" \
        'path:lib/modules/*/kernel/drivers/net/dummy.ko=dummy.ko' \
        'path:lib/modules/*/kernel/drivers/net/ifb.ko=ifb.ko' || exit 1

# Debian's arm64 glibc with its detached debug files (libc6-dbg: by build ID under usr/lib/debug),
# unpacked as a sysroot: the cross libc has no debug package, so its ld.so shows only its dynamic
# symbols; run under -L this root, the loader's own functions are named (record_user_glibc.rs).
arm64_libc="$CACHE/arm64-libc"
if ! fresh "$arm64_libc" lib/ld-linux-aarch64.so.1; then
    log "unpacking Debian's libc6:arm64 and libc6-dbg:arm64 into $arm64_libc"
    work=$(mktemp -d) debs=${QEMU_UFTRACE_DEBS:-/nonexistent}
    if ls "$debs"/libc6_*_arm64.deb "$debs"/libc6-dbg_*_arm64.deb >/dev/null 2>&1; then
        cp "$debs"/libc6_*_arm64.deb "$debs"/libc6-dbg_*_arm64.deb "$work"
    else
        (cd "$work" && { apt-get download -qq libc6:arm64 libc6-dbg:arm64 2>/dev/null ||
            { $SUDO apt-get update -qq && apt-get download -qq libc6:arm64 libc6-dbg:arm64; }; }) ||
            die "cannot download libc6:arm64 and libc6-dbg:arm64: retry later"
    fi
    rm -rf "$arm64_libc.tmp" && mkdir -p "$arm64_libc.tmp"
    for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$arm64_libc.tmp"; done
    rm -rf "$arm64_libc.tmp/usr/share"
    (cd "$work" && ls) >"$arm64_libc.tmp/package"
    rm -rf "$arm64_libc" "$work" && mv "$arm64_libc.tmp" "$arm64_libc"
fi

# Debian's riscv64 kernel and its -dbg vmlinux (~1.2 GB package, streamed). bookworm has no
# riscv64 port: trixie's, else forky's, else sid's, whichever suite's riscv64 lists fetch.
krv="$CACHE/kernel-riscv64" krv_dbg="$CACHE/kernel-riscv64-dbg"
if ! fresh "$krv" vmlinuz || ! fresh "$krv_dbg" vmlinux ||
    [ "$(cat "$krv/package")-dbg" != "$(cat "$krv_dbg/package")" ]; then
    rvstate=$(mktemp -d)
    conf=""
    for suite in trixie forky sid; do
        conf=$(private_apt "$rvstate/$suite" deb "$suite" riscv64) && break
        log "$suite's riscv64 package lists fail ($(apt_failure "$rvstate/$suite/update.log")), trying the next suite"
    done
    [ -n "$conf" ] || die "no suite's riscv64 package lists could be fetched (trixie, forky, sid): the mirror may be mid-sync, retry later"
    APT_CONFIG=$conf fetch_kernel "$krv" linux-image-riscv64 "" kernel-image=vmlinuz || exit 1
    APT_CONFIG=$conf fetch_dbg "$krv_dbg" "$krv" "" dbg-vmlinux=vmlinux || exit 1
    rm -rf "$rvstate"
fi

# vmlinux-to-elf (PyPI), the peer the kallsyms tests compare with, in a venv of Debian's
# python3 (not whatever python3 comes first in PATH).
venv="$CACHE/venv"
if ! "$venv/bin/vmlinux-to-elf" --help >/dev/null 2>&1; then
    log "installing vmlinux-to-elf into $venv"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check vmlinux-to-elf==1.4.0 ||
        die "pip cannot install vmlinux-to-elf 1.4.0 into $venv: retry"
    "$venv/bin/vmlinux-to-elf" --help >/dev/null
fi
# Perfetto's trace schema (PyPI perfetto ships perfetto_trace_pb2) and protobuf: the export
# tests decode every exported trace with them, offline.
if ! "$venv/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
    log "installing perfetto and protobuf into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check perfetto==0.59.1 protobuf==7.36.2 ||
        die "pip cannot install perfetto 0.59.1 and protobuf 7.36.2 into $venv: retry"
fi

# QEMU 11.1.3 (plugin API 7 only) from trixie-backports. Its binaries need trixie's libc, so
# they live in a minimal trixie root and run on its dynamic loader and libraries, behind
# wrappers named like the emulators: every host path stays visible, no mount or chroot.
troot="$CACHE/trixie-root"
q111="$CACHE/qemu-11.1.3"
if [ ! -x "$troot/usr/bin/qemu-system-aarch64" ] || [ ! -x "$troot/usr/bin/qemu-system-riscv64" ]; then
    mirror=$(debian_mirror)
    log "making a trixie root with QEMU 11.1 in $troot"
    rm -rf "$troot.tmp"
    $SUDO debootstrap --variant=minbase trixie "$troot.tmp" "$mirror" >"$CACHE/trixie-root.log" 2>&1 ||
        { tail -n 5 "$CACHE/trixie-root.log" >&2; die "debootstrap of trixie failed: retry later (mirror mid-sync?)"; }
    printf 'deb %s trixie main\ndeb %s trixie-backports main\n' "$mirror" "$mirror" |
        $SUDO tee "$troot.tmp/etc/apt/sources.list" >/dev/null
    $SUDO cp /etc/resolv.conf "$troot.tmp/etc/resolv.conf" 2>/dev/null || true
    # apt in a chroot without /dev/pts complains that it cannot log: kept out of sight unless
    # the install fails.
    $SUDO chroot "$troot.tmp" sh -c 'export DEBIAN_FRONTEND=noninteractive;
        apt-get update -qq && apt-get install -y -qq --no-install-recommends -t trixie-backports \
        qemu-system-arm qemu-system-x86 qemu-system-misc qemu-system-riscv' >>"$CACHE/trixie-root.log" 2>&1 ||
        { tail -n 20 "$CACHE/trixie-root.log" >&2; die "installing QEMU 11.1 in $troot.tmp failed"; }
    rm -rf "$troot" && mv "$troot.tmp" "$troot"
fi
for emu in qemu-system-aarch64 qemu-system-x86_64 qemu-system-riscv64; do
    wrapper="$q111/bin/$emu"
    [ -x "$wrapper" ] && grep -qs "$troot/" "$wrapper" && continue
    mkdir -p "$q111/bin"
    cat >"$wrapper.tmp" <<WRAP
#!/bin/sh
# QEMU 11.1 from trixie-backports on trixie's own loader and libraries (install-deps.sh).
QEMU_MODULE_DIR="$troot/usr/lib/x86_64-linux-gnu/qemu" exec "$troot/lib64/ld-linux-x86-64.so.2" \\
    --library-path "$troot/usr/lib/x86_64-linux-gnu" "$troot/usr/bin/$emu" "\$@"
WRAP
    chmod +x "$wrapper.tmp" && mv "$wrapper.tmp" "$wrapper"
done
"$q111/bin/qemu-system-aarch64" --version | grep -q "version 11\.1" ||
    die "the QEMU 11.1 wrapper in $q111 does not run (trixie-backports may have moved on from 11.1: see $troot)"

# OpenSBI with its symbols, for the riscv64 kernel test that names the M-mode firmware: QEMU's
# bundled `-bios default` is a raw blob, and Debian's `opensbi` package ships fw_dynamic.elf
# stripped and linked at 0 (QEMU refuses it as -bios: it overlaps the reset ROM).
# FW_TEXT_START links it where `-M virt` loads firmware, which makes an ET_EXEC ELF with its
# symbols there. Built from trixie's source package (~20 s); only its upstream tarball.
OPENSBI_SRC_VERSION=1.6-1
OPENSBI_TEXT_START=0x80000000
sbi="$CACHE/opensbi-riscv64"
sbi_stamp="opensbi $OPENSBI_SRC_VERSION FW_TEXT_START=$OPENSBI_TEXT_START"
if [ ! -s "$sbi/fw_dynamic.elf" ] || [ "$(cat "$sbi/package" 2>/dev/null)" != "$sbi_stamp" ]; then
    log "building OpenSBI from Debian's opensbi $OPENSBI_SRC_VERSION source into $sbi (~20 s)"
    work=$(mktemp -d)
    source_package opensbi "$OPENSBI_SRC_VERSION" "trixie forky sid" "$work" --tar-only || exit 1
    mkdir "$work/src"
    tar -xzf "$work"/opensbi_*.orig.tar.gz -C "$work/src" --strip-components=1
    make -s -C "$work/src" PLATFORM=generic CROSS_COMPILE=riscv64-linux-gnu- \
        FW_TEXT_START="$OPENSBI_TEXT_START" -j"$(nproc)" >"$work/build.log" 2>&1 ||
        { tail -n 30 "$work/build.log" >&2; die "building OpenSBI failed"; }
    rm -rf "$sbi.tmp" && mkdir -p "$sbi.tmp"
    cp "$work/src/build/platform/generic/firmware/fw_dynamic.elf" "$sbi.tmp/"
    echo "$sbi_stamp" >"$sbi.tmp/package"
    rm -rf "$sbi" && mv "$sbi.tmp" "$sbi"
    rm -rf "$work"
fi

# uftrace 0.17 (trixie) and 0.19 (forky, sid) next to the system's (0.13 on bookworm): the tests
# read traces with each (tests/src/replay.rs, uftrace_versions). Built from Debian's source
# package without the optional libraries (~15 s each; replay, report, info and dump need none,
# and nothing records with them). Where the mirror serves a version's binary package but not its
# source, that binary package with its libraries instead, run on the loader it ships with.
# The Debian revision is the newest the suites carry for the upstream version.
UFTRACE_BUILDS="0.17:trixie 0.19:forky,sid"
uftrace_fresh() { # DIR UPSTREAM
    [ -s "$1/package" ] && "$1/bin/uftrace" --version 2>/dev/null | grep -q "^uftrace v$2 "
}
# uftrace_from_source DEBVER SUITES DIR: builds into DIR.tmp.
uftrace_from_source() {
    local ver=$1 suites=$2 dir=$3 work
    work=$(mktemp -d)
    unpack_source uftrace "$ver" "$suites" "$work/src" || { rm -rf "$work"; return 1; }
    (cd "$work/src" && ./configure --without-libdw --without-libpython --without-libluajit \
        --without-capstone --without-libunwind --without-libtraceevent --without-perf \
        --without-schedule --without-libncurses --without-libstdc++ &&
        make -j"$(nproc)" "$work/src/uftrace") >"$work/build.log" 2>&1 ||
        { tail -n 20 "$work/build.log" >&2; log "building uftrace $ver from its source package failed"; rm -rf "$work"; return 1; }
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/bin"
    strip -o "$dir.tmp/bin/uftrace" "$work/src/uftrace"
    echo "uftrace $ver (source)" >"$dir.tmp/package"
    rm -rf "$work"
}
# uftrace_from_binary DEBVER CONF DIR: Debian's binary package and its dependencies (from an
# empty status: libc6 and its loader included) unpacked into DIR.tmp/root, behind a wrapper.
uftrace_from_binary() {
    local ver=$1 conf=$2 dir=$3 archives deb loader libs
    archives=$(dirname "$conf")/cache/archives
    APT_CONFIG=$conf apt-get install --download-only --no-install-recommends -qq "uftrace=$ver" \
        >/dev/null 2>&1 || { log "downloading Debian's uftrace $ver binary package failed"; return 1; }
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp/root" "$dir.tmp/bin"
    for deb in "$archives"/*.deb; do dpkg-deb -x "$deb" "$dir.tmp/root"; done
    # Documentation, time zones and Python's library (scripting only): 70 MB down to 20.
    rm -rf "$dir.tmp/root/usr/share" "$dir.tmp"/root/usr/lib/python3*
    # The loader itself, not usr/lib64's link to it (absolute: the host's).
    loader=$(ls "$dir.tmp"/root/usr/lib/*-linux-gnu/ld-linux*.so.* 2>/dev/null | head -n1)
    libs=$(ls -d "$dir.tmp"/root/usr/lib/*-linux-gnu | head -n1)
    [ -n "$loader" ] && [ -n "$libs" ] && [ -x "$dir.tmp/root/usr/bin/uftrace" ] ||
        { log "Debian's uftrace $ver binary package has no usr/bin/uftrace, loader or library dir"; return 1; }
    loader=${loader/#"$dir.tmp"/"$dir"} libs=${libs/#"$dir.tmp"/"$dir"}
    printf '#!/bin/sh\n# Debian'"'"'s uftrace %s on its own loader and libraries (install-deps.sh).\nexec "%s" --library-path "%s" "%s" "$@"\n' \
        "$ver" "$loader" "$libs" "$dir/root/usr/bin/uftrace" >"$dir.tmp/bin/uftrace"
    chmod +x "$dir.tmp/bin/uftrace"
    echo "uftrace $ver (binary)" >"$dir.tmp/package"
}
for build in $UFTRACE_BUILDS; do
    up=${build%%:*} suites=${build#*:}
    suites=${suites//,/ }
    ufdir="$CACHE/uftrace-$up"
    uftrace_fresh "$ufdir" "$up" && continue
    state=$(mktemp -d)
    conf=$(private_apt "$state" deb "$suites" "$(dpkg --print-architecture)") ||
        die "the package lists of $suites fail ($(apt_failure "$state/update.log")): retry later"
    ver=$(APT_CONFIG=$conf apt-cache madison uftrace | awk -v up="$up" '$3 ~ "^" up "-" { print $3 }' |
        sort -V | tail -n1)
    [ -n "$ver" ] || die "no uftrace $up in $suites (they carry: $(APT_CONFIG=$conf apt-cache madison uftrace |
        awk '{ print $3 }' | tr '\n' ' ')): change UFTRACE_BUILDS in scripts/install-deps.sh"
    log "building uftrace $ver from Debian's source package into $ufdir (~15 s)"
    if ! uftrace_from_source "$ver" "$suites" "$ufdir"; then
        log "taking Debian's uftrace $ver binary package instead"
        uftrace_from_binary "$ver" "$conf" "$ufdir" || die "no uftrace $ver for the tests: retry later"
    fi
    rm -rf "$state"
    rm -rf "$ufdir" && mv "$ufdir.tmp" "$ufdir"
    uftrace_fresh "$ufdir" "$up" || die "$ufdir/bin/uftrace does not run as uftrace v$up"
done

# bench/user.sh's workloads, real CPU-bound programs from Debian's source packages, built for
# each user-mode target as dynamic PIEs against the cross glibc (x86_64: the host's), with DWARF
# and frame pointers (QEMU's own uftrace plugin, the benchmark's peer, walks them); cached.
# build_workload NAME CACHE_DIR CC_ARGS...: builds NAME for the three targets in the source
# tree's BUILD dir (the working directory), where CC_ARGS name the sources.
build_workload() {
    local name=$1 dir=$2 arch cc
    shift 2
    rm -rf "$dir.tmp"
    for arch in aarch64 x86_64 riscv64; do
        cc=gcc
        [ "$arch" = x86_64 ] || cc=$arch-linux-gnu-gcc
        mkdir -p "$dir.tmp/$arch"
        $cc -O2 -g -fno-omit-frame-pointer -o "$dir.tmp/$arch/$name" "$@" || die "building $name for $arch failed"
    done
}
workload_fresh() {
    [ "$(cat "$1/cflags" 2>/dev/null)" = frame-pointers ] && [ -x "$1/aarch64/$2" ] &&
        [ -x "$1/x86_64/$2" ] && [ -x "$1/riscv64/$2" ]
}
# bzip2 (seconds to build) makes few calls: its hot loops are inlined.
bz="$CACHE/bzip2"
if ! workload_fresh "$bz" bzip2; then
    log "building bzip2 from Debian's source package into $bz"
    work=$(mktemp -d)
    unpack_source bzip2 "" "$codename" "$work/src" || exit 1
    (cd "$work/src" && build_workload bzip2 "$bz" -D_FILE_OFFSET_BITS=64 blocksort.c huffman.c \
        crctable.c randtable.c compress.c decompress.c bzlib.c bzip2.c)
    dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version >"$bz.tmp/version"
    echo frame-pointers >"$bz.tmp/cflags"
    rm -rf "$bz" && mv "$bz.tmp" "$bz"
    rm -rf "$work"
fi
# The sqlite3 shell (~2 min to build): a call-dense workload. The amalgamation is made on the
# host (tclsh), then compiled by each cross compiler.
sq="$CACHE/sqlite3"
if ! workload_fresh "$sq" sqlite3; then
    log "building the sqlite3 shell from Debian's source package into $sq (~2 min)"
    work=$(mktemp -d)
    unpack_source sqlite3 "" "$codename" "$work/src" || exit 1
    mkdir "$work/build"
    (cd "$work/build" && ../src/configure --disable-tcl >"$work/configure.log" 2>&1 &&
        make sqlite3.c shell.c >"$work/make.log" 2>&1) ||
        { tail -n 20 "$work"/*.log >&2; die "making sqlite's amalgamation failed"; }
    (cd "$work/build" && build_workload sqlite3 "$sq" -DSQLITE_THREADSAFE=0 \
        -DSQLITE_OMIT_LOAD_EXTENSION shell.c sqlite3.c -lm)
    dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version >"$sq.tmp/version"
    echo frame-pointers >"$sq.tmp/cflags"
    rm -rf "$sq" && mv "$sq.tmp" "$sq"
    rm -rf "$work"
fi

# The Debian VM the systemd boot tests record (issue 36): a bookworm root with systemd, udev and
# the cloud kernel, its initramfs-tools initrd and an ext4 image of it (scripts/debian-vm.sh;
# ~4 min, most of it downloading ~65 MB of packages; 52 s of CPU; 0.6 GB in the cache).
# Nothing to do when the VM there has the script's layout.
mirror=$(debian_mirror)
$SUDO "$root/scripts/debian-vm.sh" amd64 "$mirror" "$CACHE/debian-vm-amd64" || exit 1
# The arm64 VM, made from the amd64 one without running arm64 code (no binfmt_misc here): the
# arm64 builds of the same packages unpacked over a copy of its root, the initrd rebuilt from
# its file list (scripts/debian-vm-arm64.sh; ~60 MB of packages, ~40 s of CPU, 0.6 GB).
$SUDO "$root/scripts/debian-vm-arm64.sh" "$CACHE/debian-vm-amd64" "$CACHE/debian-vm-arm64" || exit 1

wait "$qemu_102_pid" || die "building QEMU ${QEMU_SRC_VERSION#1:} failed (its lines above say why)"
trap - EXIT
log "ok (cache: $CACHE)"
