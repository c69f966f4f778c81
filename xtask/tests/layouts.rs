//! Every layout Debian's kernel packages have had, as the file lists of real packages
//! (`tests/fixtures/`, module trees cut out), and the whole `xtask keep` path on packages built
//! here with dpkg-deb: a kernel found in the package, in the package it depends on, or nowhere
//! (one line saying what the package holds, and no file left behind).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use xtask::layout::{pick, Want};
use xtask::listing;

fn fixture(name: &str) -> Vec<listing::Member> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.txt"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    listing::parse(&text)
}

fn picked(want: Want, name: &str) -> String {
    let members = fixture(name);
    match pick(&want, &members) {
        Ok(m) => m.path.clone(),
        Err(e) => panic!("{name}: {e}"),
    }
}

#[test]
fn bookworm_amd64_and_arm64_keep_boot_vmlinuz() {
    assert_eq!(
        picked(Want::KernelImage, "linux-image-6.1.0-56-cloud-amd64"),
        "boot/vmlinuz-6.1.0-56-cloud-amd64"
    );
    assert_eq!(
        picked(Want::KernelImage, "linux-image-6.12.95+deb12-cloud-arm64"),
        "boot/vmlinuz-6.12.95+deb12-cloud-arm64"
    );
}

/// The layout that broke every fresh install on 2026-11-26.
#[test]
fn trixie_riscv64_keeps_boot_vmlinux() {
    assert_eq!(
        picked(Want::KernelImage, "linux-image-6.12.117+deb13-riscv64"),
        "boot/vmlinux-6.12.117+deb13-riscv64"
    );
}

#[test]
fn since_6_16_the_image_is_in_linux_binary() {
    assert_eq!(
        picked(Want::KernelImage, "linux-binary-7.2.13+deb14-riscv64"),
        "usr/lib/modules/7.2.13+deb14-riscv64/vmlinuz"
    );
    let members = fixture("linux-image-7.2.13+deb14-riscv64");
    let err = pick(&Want::KernelImage, &members).unwrap_err().to_string();
    assert!(
        err.starts_with("holds no kernel image (looked for boot/vmlinuz-*, boot/vmlinux-*"),
        "{err}"
    );
    assert!(err.contains("nothing like it among its"), "{err}");
}

#[test]
fn the_image_packages_system_map_is_a_stub() {
    let members = fixture("linux-image-6.1.0-56-cloud-amd64");
    let err = pick(&Want::SystemMap, &members).unwrap_err().to_string();
    assert!(
        err.contains("boot/System.map-6.1.0-56-cloud-amd64 (83 bytes)"),
        "{err}"
    );
}

#[test]
fn dbg_packages_old_and_new() {
    assert_eq!(
        picked(Want::DbgVmlinux, "linux-image-6.1.0-56-cloud-arm64-dbg"),
        "usr/lib/debug/boot/vmlinux-6.1.0-56-cloud-arm64"
    );
    assert_eq!(
        picked(Want::SystemMap, "linux-image-6.1.0-56-cloud-arm64-dbg"),
        "usr/lib/debug/boot/System.map-6.1.0-56-cloud-arm64"
    );
    assert_eq!(
        picked(Want::DbgVmlinux, "linux-image-7.2.13+deb14-riscv64-dbg"),
        "usr/lib/debug/boot/vmlinux-7.2.13+deb14-riscv64"
    );
    assert_eq!(
        picked(Want::SystemMap, "linux-image-7.2.13+deb14-riscv64-dbg"),
        "usr/lib/debug/lib/modules/7.2.13+deb14-riscv64/System.map"
    );
}

// The whole path, on packages made here.

struct Pkg<'a> {
    name: &'a str,
    depends: Option<&'a str>,
    files: &'a [(&'a str, usize)],
}

fn build_deb(dir: &Path, pkg: &Pkg) -> PathBuf {
    let root = dir.join(format!("root-{}", pkg.name));
    fs::create_dir_all(root.join("DEBIAN")).unwrap();
    let mut control = format!(
        "Package: {}\nVersion: 1.0-1\nArchitecture: all\nMaintainer: test <t@t>\nDescription: fixture\n",
        pkg.name
    );
    if let Some(d) = pkg.depends {
        control += &format!("Depends: {d}\n");
    }
    fs::write(root.join("DEBIAN/control"), control).unwrap();
    for (path, size) in pkg.files {
        let p = root.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        // Content that tells the files apart: the path, repeated.
        let content: Vec<u8> = path.bytes().cycle().take(*size).collect();
        fs::write(&p, content).unwrap();
    }
    let debs = dir.join("debs");
    fs::create_dir_all(&debs).unwrap();
    let deb = debs.join(format!("{}_1.0-1_all.deb", pkg.name));
    let out = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zgzip", "--build"])
        .arg(&root)
        .arg(&deb)
        .output()
        .expect("dpkg-deb runs (Debian's dpkg)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    deb
}

fn xtask(debs: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env("QEMU_UFTRACE_DEBS", debs)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const MIB2: usize = 2 << 20;

#[test]
fn keep_extracts_the_image_whatever_its_layout() {
    let t = tempfile::tempdir().unwrap();
    build_deb(
        t.path(),
        &Pkg {
            name: "linux-image-6.12.117+deb13-riscv64",
            depends: Some("kmod"),
            files: &[
                ("boot/System.map-6.12.117+deb13-riscv64", 83),
                ("boot/vmlinux-6.12.117+deb13-riscv64", MIB2),
            ],
        },
    );
    let cache = t.path().join("cache/kernel-riscv64");
    let dest = cache.join("vmlinuz");
    let debs = t.path().join("debs");
    // What a run killed mid-download left behind.
    fs::create_dir_all(cache.join(".xtask-a1b2/dl-x")).unwrap();
    fs::write(cache.join(".xtask-a1b2/dl-x/part.deb"), b"partial").unwrap();
    fs::write(cache.join("vmlinuz.tmp"), b"half").unwrap();
    let (ok, out, err) = xtask(
        &debs,
        &[
            "keep",
            "linux-image-6.12.117+deb13-riscv64:riscv64/trixie",
            &format!("kernel-image={}", dest.display()),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "linux-image-6.12.117+deb13-riscv64\n");
    let content = fs::read(&dest).unwrap();
    assert_eq!(content.len(), MIB2);
    assert!(content.starts_with(b"boot/vmlinux-6.12.117"));
    // Nothing else is left in the cache directory (work files, .tmp, old leftovers).
    let names: Vec<_> = fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("vmlinuz")]);
}

#[test]
fn keep_follows_the_image_into_linux_binary() {
    let t = tempfile::tempdir().unwrap();
    build_deb(
        t.path(),
        &Pkg {
            name: "linux-image-7.2.13+deb14-riscv64",
            depends: Some(
                "dracut | initramfs-tools (>= 0.120+deb8u2), linux-binary-7.2.13+deb14-riscv64 (= 7.2.13-1)",
            ),
            files: &[("usr/share/lintian/overrides/linux-image-7.2.13+deb14-riscv64", 344)],
        },
    );
    build_deb(
        t.path(),
        &Pkg {
            name: "linux-binary-7.2.13+deb14-riscv64",
            depends: None,
            files: &[("usr/lib/modules/7.2.13+deb14-riscv64/vmlinuz", MIB2)],
        },
    );
    let dest = t.path().join("k/vmlinuz");
    let (ok, out, err) = xtask(
        &t.path().join("debs"),
        &[
            "keep",
            "linux-image-7.2.13+deb14-riscv64",
            &format!("kernel-image={}", dest.display()),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out, "linux-binary-7.2.13+deb14-riscv64\n");
    assert!(fs::read(&dest)
        .unwrap()
        .starts_with(b"usr/lib/modules/7.2.13"));
}

#[test]
fn dbg_package_gives_vmlinux_and_system_map_together() {
    let t = tempfile::tempdir().unwrap();
    build_deb(
        t.path(),
        &Pkg {
            name: "linux-image-6.1.0-56-cloud-arm64-dbg",
            depends: None,
            files: &[
                ("usr/lib/debug/boot/vmlinux-6.1.0-56-cloud-arm64", MIB2),
                ("usr/lib/debug/boot/System.map-6.1.0-56-cloud-arm64", 8192),
            ],
        },
    );
    let dir = t.path().join("kernel-dbg");
    let (ok, out, err) = xtask(
        &t.path().join("debs"),
        &[
            "keep",
            "linux-image-6.1.0-56-cloud-arm64-dbg:arm64",
            &format!("dbg-vmlinux={}", dir.join("vmlinux").display()),
            &format!("system-map={}", dir.join("System.map").display()),
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 2);
    assert_eq!(fs::metadata(dir.join("System.map")).unwrap().len(), 8192);
}

#[test]
fn an_unknown_layout_is_one_line_and_leaves_nothing() {
    let t = tempfile::tempdir().unwrap();
    build_deb(
        t.path(),
        &Pkg {
            name: "linux-image-9.9.9-riscv64",
            depends: Some("kmod"),
            files: &[
                ("usr/lib/kernel/9.9.9/Image.efi", MIB2),
                ("boot/config-9.9.9", 100),
            ],
        },
    );
    let dest = t.path().join("kernel-riscv64/vmlinuz");
    let (ok, out, err) = xtask(
        &t.path().join("debs"),
        &[
            "keep",
            "linux-image-9.9.9-riscv64:riscv64/forky",
            &format!("kernel-image={}", dest.display()),
        ],
    );
    assert!(!ok);
    assert_eq!(out, "");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("install-deps: linux-image-9.9.9-riscv64 (riscv64, forky) holds no kernel image (looked for boot/vmlinuz-*"),
        "{err}"
    );
    assert!(
        err.contains("it holds usr/lib/kernel/9.9.9/Image.efi"),
        "{err}"
    );
    assert!(
        err.contains("depends on no package that could hold it"),
        "{err}"
    );
    assert!(!dest.exists());
    let left: Vec<_> = fs::read_dir(dest.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn a_damaged_download_is_not_kept() {
    let t = tempfile::tempdir().unwrap();
    let deb = build_deb(
        t.path(),
        &Pkg {
            name: "linux-image-1-amd64",
            depends: None,
            files: &[("boot/vmlinuz-1-amd64", MIB2)],
        },
    );
    // Cut the package short, as a download interrupted mid-way would.
    let bytes = fs::read(&deb).unwrap();
    fs::write(&deb, &bytes[..bytes.len() / 2]).unwrap();
    let dest = t.path().join("kernel-amd64/vmlinuz");
    let (ok, _, err) = xtask(
        &t.path().join("debs"),
        &[
            "keep",
            "linux-image-1-amd64",
            &format!("kernel-image={}", dest.display()),
        ],
    );
    assert!(!ok);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("retry"), "{err}");
    assert!(!dest.exists() && !xtask::deb::tmp_path(&dest).exists());
}

#[test]
fn bad_arguments_are_one_line() {
    let t = tempfile::tempdir().unwrap();
    let (ok, _, err) = xtask(t.path(), &["keep", "x", "vmlinuz=/tmp/x"]);
    assert!(!ok);
    assert_eq!(
        err,
        "install-deps: unknown file kind \"vmlinuz\": kernel-image, dbg-vmlinux, system-map or path:GLOB\n"
    );
}
