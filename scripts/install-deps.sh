#!/usr/bin/env bash
# Installs everything qemu-uftrace needs to build, record and test, idempotently.
# Used by the README, by the tests (via .ci/run) and by bench/.
#   - QEMU >= 9.2 with plugin support (bookworm-backports ships 10.0)
#   - QEMU 10.2.2 built from Debian's source package (plugins in user mode too, the
#     discontinuity callback), and QEMU 11.1.3 from trixie-backports in a trixie root (plugin
#     API 7), both cached outside the repo: every test runs on all three
#   - uftrace (Debian's 0.13)
#   - the aarch64 cross compiler for the example and test guests (riscv64's for the riscv64
#     user-mode tests); x86 and riscv64 binutils for
#     the instruction decoders' tests
#   - Debian's arm64 cloud kernel (cached outside the repo) for the kernel test and benchmark
#   - Debian's amd64 cloud kernel and its -dbg vmlinux (cached) for the x86_64 kernel test
#   - Debian's riscv64 kernel and its -dbg vmlinux (cached) for the riscv64 kernel test,
#     and OpenSBI with its symbols from Debian's opensbi source (cached)
#   - the nightly Rust toolchain and cargo-fuzz for the fuzz targets
# Package mirrors come from the machine's own apt sources; no host name is written here.
set -euo pipefail

CACHE="${QEMU_UFTRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qemu-uftrace}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

log() { echo "install-deps: $*" >&2; }

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
    [ -n "$uri" ] || { log "cannot find the Debian mirror in /etc/apt/sources*"; return 1; }
    echo "${uri%/}"
}

# bookworm-backports carries QEMU 10.0 and Linux 6.12; bookworm itself is too old for both.
ensure_backports() {
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding the bookworm-backports suite"
        $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null <<SRC
Types: deb
URIs: $(debian_mirror)
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

# The nightly toolchain: Miri runs the engine's tests and cargo-fuzz the fuzz targets
# (scripts/test.sh runs both, the fuzzers for a bounded time).
command -v rustup >/dev/null 2>&1 || { log "rustup not found: Miri and cargo-fuzz need a nightly toolchain"; exit 1; }
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
# The instruction decoders' tests assemble x86 (native binutils, named explicitly) and
# RISC-V code.
command -v x86_64-linux-gnu-as >/dev/null 2>&1 || need+=(binutils-x86-64-linux-gnu)
command -v riscv64-linux-gnu-as >/dev/null 2>&1 || need+=(binutils-riscv64-linux-gnu)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v hyperfine >/dev/null 2>&1 || need+=(hyperfine)
command -v zstd >/dev/null 2>&1 || need+=(zstd)
# -M virt's default NIC wants its option ROM (a Recommends of QEMU, skipped below).
dpkg -s ipxe-qemu >/dev/null 2>&1 || need+=(ipxe-qemu)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
# A real emulator for a target qemu-uftrace does not support (the CLI's bad-input tests).
command -v qemu-system-s390x >/dev/null 2>&1 || need+=(qemu-system-s390x)
# riscv64 system mode (Debian splits it out of qemu-system-misc; opensbi comes with it).
command -v qemu-system-riscv64 >/dev/null 2>&1 || need+=(qemu-system-riscv)
# lz4 decompresses the amd64 bzImage's payload for the kallsyms peer test.
command -v lz4 >/dev/null 2>&1 || need+=(lz4)
command -v /usr/bin/time >/dev/null 2>&1 || need+=(time)
# The symbols tests build dynamic and PIE arm64 programs; vmlinux-to-elf lives in a venv.
dpkg -s libc6-dev-arm64-cross >/dev/null 2>&1 || need+=(libc6-dev-arm64-cross)
dpkg -s python3-venv >/dev/null 2>&1 || need+=(python3-venv)
# The riscv64 user-mode tests build static and dynamic riscv64 programs.
command -v riscv64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-riscv64-linux-gnu)
dpkg -s libc6-dev-riscv64-cross >/dev/null 2>&1 || need+=(libc6-dev-riscv64-cross)
# The signal and unwinding tests build a C++ program for each user-mode architecture (the
# host g++ is x86_64-linux-gnu-g++).
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
command -v riscv64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-riscv64-linux-gnu)
command -v x86_64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++)

if [ "${#need[@]}" -gt 0 ]; then
    log "installing: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    pkgs=(uftrace gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu binutils-x86-64-linux-gnu
        binutils-riscv64-linux-gnu tmux hyperfine zstd make time libc6-dev-arm64-cross python3-venv
        gcc-riscv64-linux-gnu libc6-dev-riscv64-cross g++-aarch64-linux-gnu g++-riscv64-linux-gnu
        g++)
    $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
    qemu_release=()
    [ -z "$backports" ] || qemu_release=(-t "${backports#/}")
    $SUDO apt-get install -y -qq --no-install-recommends "${qemu_release[@]}" \
        qemu-system-arm qemu-system-x86 qemu-system-riscv qemu-system-s390x ipxe-qemu >/dev/null
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

# Debian's amd64 cloud kernel (6.1, the host's own architecture): the x86_64 whole-system
# test and benchmark boot its bzImage to its panic.
if [ ! -s "$CACHE/kernel-amd64/vmlinuz" ] || [ ! -s "$CACHE/kernel-amd64/package" ]; then
    kernel_amd64() {
        local pkg
        pkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
            sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-cloud-amd64\).*/\1/p' | head -n1)
        [ -n "$pkg" ] || return 1
        log "fetching $pkg into $CACHE/kernel-amd64"
        keep_from_deb "$pkg" "$CACHE/kernel-amd64" 'boot/vmlinuz-*=vmlinuz' &&
            echo "$pkg" >"$CACHE/kernel-amd64/package"
    }
    after_update kernel_amd64 ||
        { log "cannot fetch Debian's linux-image-*-cloud-amd64 package"; exit 1; }
fi
# From its -dbg package (~283 MB) only the DWARF vmlinux of that very kernel: names for every
# address of its text and source lines (`--symbols`), task_struct's comm and pid offsets.
if [ ! -s "$CACHE/kernel-amd64-dbg/vmlinux" ] || [ ! -s "$CACHE/kernel-amd64-dbg/package" ]; then
    dbg="$(cat "$CACHE/kernel-amd64/package")-dbg"
    log "fetching $dbg into $CACHE/kernel-amd64-dbg (large)"
    after_update keep_from_deb "$dbg" "$CACHE/kernel-amd64-dbg" \
        'usr/lib/debug/boot/vmlinux-*=vmlinux' ||
        { log "cannot fetch $dbg"; exit 1; }
    echo "$dbg" >"$CACHE/kernel-amd64-dbg/package"
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
# Perfetto's trace schema (PyPI perfetto ships perfetto_trace_pb2) and protobuf: the export
# tests decode every exported trace with them, offline.
if ! "$venv/bin/python" -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2' 2>/dev/null; then
    log "installing perfetto and protobuf into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check perfetto==0.59.1 protobuf==7.36.2
fi

# QEMU 10.2.2 from Debian's source package (`+ds`, patches applied), built for the targets
# qemu-uftrace traces with plugins enabled, user mode included: Debian's binaries lack plugins
# in user mode and 10.0 lacks the discontinuity callback. About 13 minutes on two cores, once.
QEMU_SRC_VERSION=1:10.2.2+ds-1
QEMU_TARGETS=aarch64-softmmu,x86_64-softmmu,riscv64-softmmu,aarch64-linux-user,x86_64-linux-user,riscv64-linux-user
q102="$CACHE/qemu-10.2.2"
if [ ! -x "$q102/bin/qemu-system-aarch64" ] || [ "$(cat "$q102/targets" 2>/dev/null)" != "$QEMU_TARGETS" ]; then
    log "building QEMU ${QEMU_SRC_VERSION#1:} from Debian's source package into $q102 (~13 min)"
    build_need=()
    for pkg in ninja-build libglib2.0-dev libpixman-1-dev libfdt-dev libcapstone-dev pkg-config \
        flex bison dpkg-dev zlib1g-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || build_need+=("$pkg")
    done
    [ "${#build_need[@]}" -eq 0 ] ||
        $SUDO apt-get install -y -qq --no-install-recommends "${build_need[@]}" >/dev/null
    # QEMU 10.2 wants meson >= 1.5 and pycotap: bookworm-backports has both.
    $SUDO apt-get install -y -qq --no-install-recommends ${backports:+-t "${backports#/}"} \
        meson python3-pycotap >/dev/null
    work=$(mktemp -d)
    # Only the source: a private apt state for the deb-src of the suites that carry (or
    # carried) this version, so the system's lists stay as they are.
    mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
    cat >"$work/apt/src.sources" <<SRC
Types: deb-src
URIs: $(debian_mirror)
Suites: sid forky
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt_src=(-o Dir::Etc::SourceList="$work/apt/src.sources" -o Dir::Etc::SourceParts=/nonexistent
        -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache")
    apt-get "${apt_src[@]}" update -qq
    (cd "$work" && apt-get "${apt_src[@]}" source --download-only -qq "qemu=$QEMU_SRC_VERSION") \
        2>/dev/null
    # apt checked the files against the signed index; the .dsc's own signature needs keys
    # this machine has no reason to hold.
    dpkg-source --no-check -x "$work"/qemu_*.dsc "$work/qemu" >/dev/null
    mkdir "$work/qemu/build"
    (cd "$work/qemu/build" && ../configure --python=/usr/bin/python3 --prefix="$q102" \
        --target-list="$QEMU_TARGETS" --without-default-features --enable-plugins \
        --enable-capstone --enable-fdt=system --enable-tcg --disable-docs --disable-werror \
        --disable-install-blobs --disable-download \
        --firmwarepath=/usr/share/qemu:/usr/share/seabios:/usr/lib/ipxe/qemu \
        >"$work/configure.log" 2>&1) ||
        { tail -n 30 "$work/configure.log" >&2; log "configuring QEMU failed"; exit 1; }
    bins=(qemu-system-aarch64 qemu-system-x86_64 qemu-system-riscv64 qemu-aarch64 qemu-x86_64
        qemu-riscv64)
    # QEMU's own uftrace plugin and execlog: the peers the benchmarks and tests compare with.
    peers=(contrib/plugins/libuftrace.so contrib/plugins/libexeclog.so)
    ninja -C "$work/qemu/build" "${bins[@]}" "${peers[@]}" >"$work/build.log" 2>&1 ||
        { tail -n 30 "$work/build.log" >&2; log "building QEMU failed"; exit 1; }
    rm -rf "$q102.tmp"
    mkdir -p "$q102.tmp/bin" "$q102.tmp/plugins"
    for b in "${bins[@]}"; do strip -o "$q102.tmp/bin/$b" "$work/qemu/build/$b"; done
    for p in "${peers[@]}"; do cp "$work/qemu/build/$p" "$q102.tmp/plugins/"; done
    echo "$QEMU_TARGETS" >"$q102.tmp/targets"
    rm -rf "$q102" && mv "$q102.tmp" "$q102"
    rm -rf "$work"
fi

# Debian's riscv64 kernel (the riscv64 kernel test and benchmark boot it to its panic, the
# symbols crate reads its kallsyms) and its -dbg vmlinux. bookworm has no riscv64 port: the
# packages come from trixie, or from forky (then sid) when trixie's riscv64 lists fail (here
# they do, with "File has unexpected size": the mirror's riscv64 indexes are older than its
# Release file).
# A private apt state for riscv64 alone: the system's architectures, lists and pins stay as
# they are, and nothing from those suites can be installed on it.
krv="$CACHE/kernel-riscv64"
krv_dbg="$CACHE/kernel-riscv64-dbg"
# rv_apt_init DIR SUITE: a private apt state in DIR with SUITE's riscv64 lists.
rv_apt_init() {
    local dir=$1 suite=$2
    rm -rf "$dir" && mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    # apt downloads as its own user when it can reach the state (else it warns).
    chmod go+rx "$dir"
    : >"$dir/status"
    cat >"$dir/rv.sources" <<SRC
Types: deb
URIs: $(debian_mirror)
Suites: $suite
Components: main
Architectures: riscv64
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    rv_apt=(-o Dir::Etc::SourceList="$dir/rv.sources" -o Dir::Etc::SourceParts=/nonexistent
        -o Dir::Etc::Preferences=/nonexistent -o Dir::Etc::PreferencesParts=/nonexistent
        -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache"
        -o Dir::State::status="$dir/status" -o APT::Architecture=riscv64
        -o APT::Architectures=riscv64 -o Debug::NoLocking=1)
    apt-get "${rv_apt[@]}" update -qq >"$dir/update.log" 2>&1 &&
        ! grep -qE '^(E:|W: (Failed to fetch|Some index files))' "$dir/update.log"
}
# rv_keep PACKAGE DIR NAME PATTERN...: downloads PACKAGE with the private state and keeps
# its first file matching one of the tar PATTERNs as DIR/NAME.tmp (the -dbg package is
# ~1.2 GB: dpkg-deb streams it to tar, which writes only the matching file; tar exits 2
# for the patterns that match nothing, so the file itself is the check).
rv_keep() {
    local pkg=$1 dir=$2 name=$3 tmp member
    shift 3
    tmp=$(mktemp -d)
    chmod go+rx "$tmp"
    mkdir "$tmp/x"
    (cd "$tmp" && apt-get "${rv_apt[@]}" download -qq "$pkg" 2>/dev/null) &&
        { dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp/x" --wildcards "$@" 2>/dev/null || true; } &&
        member=$(find "$tmp/x" -type f -size +0 | head -n1) && [ -n "$member" ] &&
        mkdir -p "$dir" && mv "$member" "$dir/$name.tmp" || { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
}
rv_stamp_ok() { [ -s "$1/$2" ] && grep -qs '^linux-image-' "$1/package"; }
if ! rv_stamp_ok "$krv" vmlinuz || ! rv_stamp_ok "$krv_dbg" vmlinux ||
    [ "$(cat "$krv/package")-dbg" != "$(cat "$krv_dbg/package")" ]; then
    rvtmp=$(mktemp -d)
    chmod go+rx "$rvtmp"
    rv_suite=""
    for suite in trixie forky sid; do
        if rv_apt_init "$rvtmp/apt" "$suite"; then rv_suite=$suite; break; fi
        # Only the reason: apt's lines name the mirror.
        log "$suite's riscv64 package lists fail ($(grep -oEm1 'File has unexpected size|Hash Sum mismatch|[45][0-9][0-9] [A-Z][A-Za-z ]+' "$rvtmp/apt/update.log" || echo "apt-get update failed")), trying the next suite"
    done
    [ -n "$rv_suite" ] || { log "no riscv64 package lists could be fetched"; exit 1; }
    # The kernel the metapackage depends on; since 6.16 its image sits in linux-binary-*.
    pkg=$(apt-cache "${rv_apt[@]}" depends linux-image-riscv64 2>/dev/null |
        sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*-riscv64\)$/\1/p' | head -n1)
    [ -n "$pkg" ] || { log "no linux-image-*-riscv64 in $rv_suite"; exit 1; }
    holder=$pkg
    binary="linux-binary-${pkg#linux-image-}"
    apt-cache "${rv_apt[@]}" show "$binary" >/dev/null 2>&1 && holder=$binary
    log "fetching $holder and $pkg-dbg ($rv_suite, ~1.2 GB) into $krv and $krv_dbg"
    rm -rf "$krv" "$krv_dbg"
    rv_keep "$holder" "$krv" vmlinuz './boot/vmlinuz-*' './usr/lib/modules/*/vmlinuz' ||
        { log "cannot fetch $holder's kernel image"; exit 1; }
    rv_keep "$pkg-dbg" "$krv_dbg" vmlinux './usr/lib/debug/boot/vmlinux-*' \
        './usr/lib/debug/lib/modules/*/vmlinux' './usr/lib/debug/usr/lib/modules/*/vmlinux' ||
        { log "cannot fetch $pkg-dbg's vmlinux"; exit 1; }
    mv "$krv/vmlinuz.tmp" "$krv/vmlinuz" && echo "$pkg" >"$krv/package"
    mv "$krv_dbg/vmlinux.tmp" "$krv_dbg/vmlinux" && echo "$pkg-dbg" >"$krv_dbg/package"
    rm -rf "$rvtmp"
fi

# QEMU 11.1.3 (plugin API 7 only) from trixie-backports. Its binaries need trixie's libc, so
# they live in a minimal trixie root and run on its dynamic loader and libraries, behind
# wrappers named like the emulators: every host path stays visible, no mount or chroot.
troot="$CACHE/trixie-root"
q111="$CACHE/qemu-11.1.3"
if [ ! -x "$troot/usr/bin/qemu-system-aarch64" ]; then
    command -v debootstrap >/dev/null 2>&1 ||
        $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    mirror=$(debian_mirror)
    log "making a trixie root with QEMU 11.1 in $troot"
    rm -rf "$troot.tmp"
    $SUDO debootstrap --variant=minbase trixie "$troot.tmp" "$mirror" >/dev/null
    printf 'deb %s trixie main\ndeb %s trixie-backports main\n' "$mirror" "$mirror" |
        $SUDO tee "$troot.tmp/etc/apt/sources.list" >/dev/null
    $SUDO cp /etc/resolv.conf "$troot.tmp/etc/resolv.conf" 2>/dev/null || true
    # apt in a chroot without /dev/pts complains that it cannot log: kept out of sight
    # unless the install fails.
    $SUDO chroot "$troot.tmp" sh -c 'export DEBIAN_FRONTEND=noninteractive;
        apt-get update -qq && apt-get install -y -qq --no-install-recommends -t trixie-backports \
        qemu-system-arm qemu-system-x86 qemu-system-misc qemu-system-riscv' >"$CACHE/trixie-root.log" 2>&1 ||
        { tail -n 20 "$CACHE/trixie-root.log" >&2; log "installing QEMU 11.1 in $troot.tmp failed"; exit 1; }
    rm -rf "$troot" && mv "$troot.tmp" "$troot"
fi
# trixie's qemu-system-misc no longer brings the riscv64 emulator: a root made before it was
# asked for gets it now.
if [ ! -x "$troot/usr/bin/qemu-system-riscv64" ]; then
    log "installing QEMU 11.1's riscv64 emulator in $troot"
    $SUDO chroot "$troot" sh -c 'export DEBIAN_FRONTEND=noninteractive;
        apt-get update -qq && apt-get install -y -qq --no-install-recommends -t trixie-backports \
        qemu-system-riscv' >"$CACHE/trixie-root.log" 2>&1 ||
        { tail -n 20 "$CACHE/trixie-root.log" >&2; log "installing qemu-system-riscv in $troot failed"; exit 1; }
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
    { log "the QEMU 11.1 wrapper in $q111 does not run"; exit 1; }

# source_download PKG SUITES DIR [OPTION...]: the files of Debian's source package PKG (NAME or
# NAME=VERSION) from the deb-src of SUITES into DIR, through a private apt state so the
# system's lists stay as they are; OPTIONs go to `apt-get source` (`--tar-only`). apt checks
# each file against the signed Sources index.
source_download() {
    local pkg=$1 suites=$2 dest=$3 tmp
    shift 3
    tmp=$(mktemp -d)
    # apt downloads as its own user when it can reach the lists (else it warns and does it
    # as root).
    chmod go+rx "$tmp"
    mkdir -p "$tmp/apt/lists/partial" "$tmp/apt/cache/archives/partial" "$dest"
    cat >"$tmp/apt/src.sources" <<SRC
Types: deb-src
URIs: $(debian_mirror)
Suites: $suites
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    local apt_src=(-o Dir::Etc::SourceList="$tmp/apt/src.sources" -o Dir::Etc::SourceParts=/nonexistent
        -o Dir::State::Lists="$tmp/apt/lists" -o Dir::Cache="$tmp/apt/cache")
    apt-get "${apt_src[@]}" update -qq &&
        (cd "$dest" && apt-get "${apt_src[@]}" source --download-only -qq "$@" "$pkg" 2>/dev/null) ||
        { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
}

# source_package PKG SUITES DIR: Debian's source package PKG (NAME or NAME=VERSION) from the
# deb-src of SUITES, unpacked with its patches into DIR.
source_package() {
    local pkg=$1 suites=$2 dir=$3 tmp
    tmp=$(mktemp -d)
    source_download "$pkg" "$suites" "$tmp" &&
        dpkg-source --no-check -x "$tmp"/*.dsc "$dir" >/dev/null || { rm -rf "$tmp"; return 1; }
    rm -rf "$tmp"
}

# OpenSBI with its symbols, for the riscv64 kernel test that names the M-mode firmware: QEMU's
# bundled `-bios default` is a raw blob, and Debian's `opensbi` package ships fw_dynamic.elf
# stripped and linked at 0 (QEMU refuses it as -bios: it overlaps the reset ROM). OpenSBI is
# always position-independent since 1.6 (FW_PIC is gone); FW_TEXT_START links it where
# `-M virt` loads firmware, which makes an ET_EXEC ELF with its symbols there. Built from
# trixie's source package (~20 s); only its upstream tarball: the mirror lacks the .dsc and
# Debian's own tarball.
OPENSBI_SRC_VERSION=1.6-1
OPENSBI_TEXT_START=0x80000000
sbi="$CACHE/opensbi-riscv64"
sbi_stamp="opensbi $OPENSBI_SRC_VERSION FW_TEXT_START=$OPENSBI_TEXT_START"
if [ ! -s "$sbi/fw_dynamic.elf" ] || [ "$(cat "$sbi/package" 2>/dev/null)" != "$sbi_stamp" ]; then
    log "building OpenSBI from Debian's opensbi $OPENSBI_SRC_VERSION source into $sbi (~20 s)"
    work=$(mktemp -d)
    source_download "opensbi=$OPENSBI_SRC_VERSION" trixie "$work" --tar-only ||
        { log "cannot fetch Debian's opensbi $OPENSBI_SRC_VERSION source"; exit 1; }
    mkdir "$work/src"
    tar -xzf "$work"/opensbi_*.orig.tar.gz -C "$work/src" --strip-components=1
    make -s -C "$work/src" PLATFORM=generic CROSS_COMPILE=riscv64-linux-gnu- \
        FW_TEXT_START="$OPENSBI_TEXT_START" -j"$(nproc)" >"$work/build.log" 2>&1 ||
        { tail -n 30 "$work/build.log" >&2; log "building OpenSBI failed"; exit 1; }
    rm -rf "$sbi.tmp" && mkdir -p "$sbi.tmp"
    cp "$work/src/build/platform/generic/firmware/fw_dynamic.elf" "$sbi.tmp/"
    echo "$sbi_stamp" >"$sbi.tmp/package"
    rm -rf "$sbi" && mv "$sbi.tmp" "$sbi"
    rm -rf "$work"
fi

# bench/user.sh's workloads, real CPU-bound programs from Debian's source packages, built for
# each user-mode target as dynamic PIEs against the cross glibc (x86_64: the host's), with
# DWARF and frame pointers (QEMU's own uftrace plugin, the benchmark's peer, walks them;
# without, it writes gigabytes of noise); cached. bzip2 (seconds to build) makes few calls:
# its hot loops are inlined.
bz="$CACHE/bzip2"
if [ "$(cat "$bz/cflags" 2>/dev/null)" != frame-pointers ] || [ ! -x "$bz/aarch64/bzip2" ] || [ ! -x "$bz/x86_64/bzip2" ] || [ ! -x "$bz/riscv64/bzip2" ]; then
    log "building bzip2 from Debian's source package into $bz"
    work=$(mktemp -d)
    source_package bzip2 "$codename" "$work/src" || { log "cannot fetch bzip2's source package"; exit 1; }
    rm -rf "$bz.tmp"
    for arch in aarch64 x86_64 riscv64; do
        cc=gcc
        [ "$arch" = x86_64 ] || cc=$arch-linux-gnu-gcc
        mkdir -p "$bz.tmp/$arch"
        (cd "$work/src" && $cc -O2 -g -fno-omit-frame-pointer -D_FILE_OFFSET_BITS=64 -o "$bz.tmp/$arch/bzip2" blocksort.c \
            huffman.c crctable.c randtable.c compress.c decompress.c bzlib.c bzip2.c) ||
            { log "building bzip2 for $arch failed"; exit 1; }
    done
    dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version >"$bz.tmp/version"
    echo frame-pointers >"$bz.tmp/cflags"
    rm -rf "$bz" && mv "$bz.tmp" "$bz"
    rm -rf "$work"
fi

# The sqlite3 shell (~2 min to build): a call-dense workload. The amalgamation is made on the
# host (tclsh), then compiled by each cross compiler.
sq="$CACHE/sqlite3"
if [ "$(cat "$sq/cflags" 2>/dev/null)" != frame-pointers ] || [ ! -x "$sq/aarch64/sqlite3" ] || [ ! -x "$sq/x86_64/sqlite3" ] || [ ! -x "$sq/riscv64/sqlite3" ]; then
    log "building the sqlite3 shell from Debian's source package into $sq (~2 min)"
    command -v tclsh >/dev/null 2>&1 || $SUDO apt-get install -y -qq --no-install-recommends tcl >/dev/null
    work=$(mktemp -d)
    source_package sqlite3 "$codename" "$work/src" || { log "cannot fetch sqlite3's source package"; exit 1; }
    mkdir "$work/build"
    (cd "$work/build" && ../src/configure --disable-tcl >"$work/configure.log" 2>&1 &&
        make sqlite3.c shell.c >"$work/make.log" 2>&1) ||
        { tail -n 20 "$work"/*.log >&2; log "making sqlite's amalgamation failed"; exit 1; }
    rm -rf "$sq.tmp"
    for arch in aarch64 x86_64 riscv64; do
        cc=gcc
        [ "$arch" = x86_64 ] || cc=$arch-linux-gnu-gcc
        mkdir -p "$sq.tmp/$arch"
        (cd "$work/build" && $cc -O2 -g -fno-omit-frame-pointer -DSQLITE_THREADSAFE=0 -DSQLITE_OMIT_LOAD_EXTENSION \
            -o "$sq.tmp/$arch/sqlite3" shell.c sqlite3.c -lm) ||
            { log "building sqlite3 for $arch failed"; exit 1; }
    done
    dpkg-parsechangelog -l "$work/src/debian/changelog" -S Version >"$sq.tmp/version"
    echo frame-pointers >"$sq.tmp/cflags"
    rm -rf "$sq" && mv "$sq.tmp" "$sq"
    rm -rf "$work"
fi

log "ok (cache: $CACHE)"
