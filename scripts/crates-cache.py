#!/usr/bin/env python3
"""Keeps the third-party crates' build outputs between runs of scripts/test.sh.

    scripts/crates-cache.py restore|save SLOT WORKSPACE_DIR TARGET_DIR [+TOOLCHAIN] [--except DIR]...

(scripts/test.sh: slot `main` for the workspace, `fuzz` for fuzz/, built by cargo +nightly
into TARGET_DIR/fuzz, which `main`'s save leaves out with `--except fuzz`.)

CI builds a fresh clone each time. Compiling the crates this project depends on cost
about a third of the workspace's build (2026-12-06, 2 cores: 252 s and 487 s of CPU from
nothing, 180 s and 347 s with them kept) and two thirds of the fuzzers' (267 s of CPU,
81 s with them kept), all of it on the run's critical path or in its tail.

`save` copies, from every profile directory in the target directory (`debug`,
`xtask/debug`, `plugin-target/release`, `x86_64-unknown-linux-gnu/release`, …), the
outputs of every package that is not one of the workspace's own (`deps/`, `build/` and
`.fingerprint/` entries), into a slot of the cache (`$QEMU_UFTRACE_CACHE/crates/SLOT`).
It does so only when the slot was saved under another toolchain, lock file or manifest
(its `key`), so a warm run pays one hash. `restore` copies the slot into an empty target
directory; a target directory already built into is left alone.

Nothing here decides what is fresh: cargo does, from its fingerprints, as for any target
directory. A slot from another toolchain or other versions is only copied for nothing.
The workspace's own packages are never kept: a clone's sources are newer than any output
kept, and cargo would rebuild them anyway. The slot keeps the workspace's lock file,
and a clone without one gets it: the fuzzers' is not in git (cargo-fuzz's .gitignore), and
a fresh resolution could pick newer versions than those kept.

Safe to copy elsewhere: no dependency's kept build-script output names a path the next
build reads (libfuzzer-sys links libFuzzer from its own out/ directory, but rustc has
bundled it into the rlib kept beside; a fuzz build after the original target directory
was removed links, 2026-12-06).
"""

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

CACHE = os.environ.get("QEMU_UFTRACE_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "qemu-uftrace"
)
# Cargo's unit directories and file names: NAME-HASH, HASH 16 hex digits.
UNIT = re.compile(r"^(.+?)-[0-9a-f]{16}(?:\.[A-Za-z0-9.]+)?$")
# What a target directory holds that is none of cargo's profiles.
NOT_PROFILES = {"deps", "build", ".fingerprint", "incremental", "examples", "tmp", "doc"}


def say(msg):
    print(f"crates-cache: {msg}", file=sys.stderr)


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout


def members(args, rustc):
    """The packages built from sources beside the workspace's (its members, and the path
    dependencies of the fuzzers' workspace): their names and their targets', as cargo
    spells them in unit names, and their manifests. Read after the build: the lock file is
    there, and --offline resolves from it. `rustc`: the toolchain's `rustc -vV`."""
    host = re.search(r"^host: (\S+)$", rustc, re.M)
    # Resolved for this host only: other platforms' crates (Windows') were never downloaded.
    out = run(["cargo", *args.toolchain, "metadata", "--offline", "--format-version", "1",
               "--filter-platform", host.group(1) if host else "x86_64-unknown-linux-gnu"],
              args.workspace)
    names, manifests = set(), []
    for p in json.loads(out)["packages"]:
        if p["source"] is not None:
            continue
        manifests.append(p["manifest_path"])
        for n in [p["name"]] + [t["name"] for t in p["targets"]]:
            names.update((n, n.replace("-", "_")))
    return names, sorted(manifests)


def key(args, rustc, manifests):
    """What the kept outputs were built from: the toolchain (`rustc -vV`), the flags, the
    lock file, the members' manifests. Another key replaces the slot at the next save."""
    h = hashlib.sha256()
    h.update(rustc.encode())
    h.update(os.environ.get("RUSTFLAGS", "").encode())
    for f in [os.path.join(args.workspace, "Cargo.lock"),
              os.path.join(args.workspace, ".cargo", "config.toml"), *manifests]:
        if os.path.isfile(f):
            h.update(os.path.relpath(f, args.workspace).encode())
            with open(f, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


def profiles(target, depth=0, skip=()):
    """Cargo's profile directories under a target directory (those with .fingerprint/),
    relative to it: a nested target directory's (xtask's, the plugin's) included, those
    named in `skip` (another workspace's, at the top) not."""
    found = []
    try:
        entries = sorted(os.scandir(target), key=lambda e: e.name)
    except FileNotFoundError:
        return found
    for e in entries:
        if not e.is_dir(follow_symlinks=False) or e.name in NOT_PROFILES or e.name in skip:
            continue
        if os.path.isdir(os.path.join(e.path, ".fingerprint")):
            found.append(e.name)
        elif depth < 2:
            found += [os.path.join(e.name, p) for p in profiles(e.path, depth + 1)]
    return found


def foreign(entry, own):
    """Whether a deps/, build/ or .fingerprint/ entry is a dependency's output."""
    m = UNIT.match(entry)
    if not m:
        return False
    unit = m.group(1)
    return unit not in own and not (unit.startswith("lib") and unit[3:] in own)


def copy(src, dst):
    if os.path.isdir(src) and not os.path.islink(src):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(src, dst, follow_symlinks=False)


def lock(slots, exclusive):
    os.makedirs(slots, exist_ok=True)
    fd = os.open(os.path.join(slots, ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    return fd


def save(args, slot):
    rustc = run(["rustc", *args.toolchain, "-vV"], args.workspace)
    own, manifests = members(args, rustc)
    k = key(args, rustc, manifests)
    try:
        with open(os.path.join(slot, "key")) as f:
            if f.read().strip() == k:
                return
    except OSError:
        pass
    fresh = f"{slot}.new.{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    kept = 0
    for prof in profiles(args.target, skip=args.exclude):
        for sub in ("deps", "build", ".fingerprint"):
            src = os.path.join(args.target, prof, sub)
            if not os.path.isdir(src):
                continue
            dst = os.path.join(fresh, "target", prof, sub)
            os.makedirs(dst, exist_ok=True)
            for entry in os.listdir(src):
                if foreign(entry, own):
                    copy(os.path.join(src, entry), os.path.join(dst, entry))
                    kept += 1
    if kept == 0:
        shutil.rmtree(fresh, ignore_errors=True)
        say(f"{args.slot}: no dependency's output under {args.target} to keep")
        return
    lockfile = os.path.join(args.workspace, "Cargo.lock")
    if os.path.isfile(lockfile):
        shutil.copy2(lockfile, os.path.join(fresh, "Cargo.lock"))
    with open(os.path.join(fresh, "key"), "w") as f:
        f.write(k + "\n")
    old = f"{slot}.old.{os.getpid()}"
    fd = lock(os.path.dirname(slot), True)
    try:
        if os.path.exists(slot):
            os.rename(slot, old)
        os.rename(fresh, slot)
    finally:
        os.close(fd)
    # Out of the lock: a restore need not wait for 0.4 GB to be deleted.
    shutil.rmtree(old, ignore_errors=True)
    say(f"{args.slot}: kept {kept} outputs of the dependencies in {slot}")


def restore(args, slot):
    if not os.path.isdir(os.path.join(slot, "target")) or profiles(args.target, skip=args.exclude):
        return  # nothing kept, or built into already: cargo's own outputs there are newer
    fd = lock(os.path.dirname(slot), False)
    try:
        lockfile = os.path.join(args.workspace, "Cargo.lock")
        if not os.path.exists(lockfile) and os.path.isfile(os.path.join(slot, "Cargo.lock")):
            shutil.copy2(os.path.join(slot, "Cargo.lock"), lockfile)
        os.makedirs(args.target, exist_ok=True)
        src = os.path.join(slot, "target")
        for entry in os.listdir(src):
            copy(os.path.join(src, entry), os.path.join(args.target, entry))
    finally:
        os.close(fd)


def main():
    p = argparse.ArgumentParser(prog="crates-cache.py")
    p.add_argument("action", choices=["restore", "save"])
    p.add_argument("slot", help="the slot's name: main, fuzz")
    p.add_argument("workspace", help="the directory of the workspace's Cargo.toml")
    p.add_argument("target", help="its target directory")
    p.add_argument("toolchain", nargs="?", help="+TOOLCHAIN, as cargo takes it")
    p.add_argument("--except", dest="exclude", action="append", default=[], metavar="DIR",
                   help="a directory of TARGET_DIR holding another workspace's build")
    args = p.parse_args()
    if not re.fullmatch(r"[A-Za-z0-9_-]+", args.slot):
        p.error(f"slot {args.slot!r}: letters, digits, - and _ only")
    if args.toolchain and not args.toolchain.startswith("+"):
        p.error(f"{args.toolchain!r}: a toolchain is written +NAME (+nightly)")
    args.toolchain = [args.toolchain] if args.toolchain else []
    args.workspace = os.path.abspath(args.workspace)
    args.target = os.path.abspath(args.target)
    slot = os.path.join(CACHE, "crates", args.slot)
    try:
        (save if args.action == "save" else restore)(args, slot)
    except (OSError, subprocess.CalledProcessError, ValueError) as e:
        # The slot only saves time: a run goes on without it, and says why.
        say(f"{args.action} {args.slot}: {e}: the build goes on without the kept crates")


main()
