//! Builds the QEMU plugin (a cdylib in the same workspace) and copies it into `OUT_DIR`, so
//! that `src/embedded.rs` can `include_bytes!` it and the installed binary is self-contained.
//!
//! A nested `cargo build` is the only way to get a cdylib artifact from a build script today
//! (artifact dependencies are unstable). It uses its own target directory: the outer build
//! holds the lock on the outer one, so sharing it would deadlock. The plugin is built once per
//! plugin-API family QEMU may require (v4 and v7), and both are embedded.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const PLUGIN_PACKAGE: &str = "qemu-uftrace-plugin";
const PLUGIN_FILE: &str = "libqemu_uftrace_plugin.so";

use sha2::Digest;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest_dir
        .parent()
        .expect("cli/ lives inside the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets it"));
    let target = env::var("TARGET").expect("cargo sets it");

    for rel in [
        "Cargo.toml",
        "Cargo.lock",
        "plugin/Cargo.toml",
        "plugin/src",
        "engine/Cargo.toml",
        "engine/src",
        "format/Cargo.toml",
        "format/src",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(rel).display());
    }

    // Without the feature (the fuzz targets) nothing is embedded.
    if env::var_os("CARGO_FEATURE_EMBED_PLUGIN").is_none() {
        return;
    }
    let plugin_target = plugin_target_dir(&out_dir);
    // One build per plugin ABI family (plugin/src/api.rs); `embedded.rs` lists the same.
    for (api, features) in [(4, ""), (7, "api-v7")] {
        build_plugin(&workspace, &plugin_target, &target, features);
        let built = plugin_target
            .join(&target)
            .join("release")
            .join(PLUGIN_FILE);
        copy(&built, &out_dir.join(format!("plugin-v{api}.so")));
        // The name the plugin gets in the user's cache, from its content: computed here once
        // rather than hashing megabytes at every run.
        let bytes =
            std::fs::read(&built).unwrap_or_else(|e| panic!("cannot read the built plugin: {e}"));
        let digest = sha2::Sha256::digest(&bytes);
        let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        println!(
            "cargo:rustc-env=QEMU_UFTRACE_PLUGIN_V{api}_NAME=qemu-uftrace-plugin-v{api}-{hex}.so"
        );
    }
}

/// Where the nested builds go: beside the outer build's profiles, `TARGET/plugin-target`,
/// shared by every run of this script in that target directory. Each of them has an
/// `OUT_DIR` of its own: `cargo clippy` runs this script again (its wrapper is another
/// fingerprint), and with the nested target inside `OUT_DIR` it built both plugins again
/// from nothing (about 45 s of CPU, mostly the plugin crate alone on one core, on the
/// suite's critical path). Shared, the second build finds them fresh. It is still not the
/// outer target directory itself, whose lock the outer build holds. `OUT_DIR` is
/// `TARGET[/TRIPLE]/PROFILE/build/PACKAGE-HASH/out`; anywhere else, inside it as before.
fn plugin_target_dir(out_dir: &Path) -> PathBuf {
    let mut up = out_dir.ancestors();
    match (up.nth(2), up.nth(1)) {
        (Some(build), Some(outer)) if build.file_name().is_some_and(|n| n == "build") => {
            outer.join("plugin-target")
        }
        _ => out_dir.join("plugin-target"),
    }
}

/// `cargo build` of the plugin with `features` (the two builds share the target directory,
/// so only the plugin crate itself is compiled twice).
fn build_plugin(workspace: &Path, plugin_target: &Path, target: &str, features: &str) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .args(["-p", PLUGIN_PACKAGE])
        .args(["--features", features])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(plugin_target)
        // Explicit, so a cross build embeds a plugin for the machine the CLI runs on.
        .args(["--target", target])
        .current_dir(workspace)
        // QEMU only needs the code: a stripped plugin is a fifth the size to embed and load.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    // Inherited settings meant for the outer build: a redirected target dir would bring
    // back the lock deadlock; flags such as coverage instrumentation or clippy's wrapper do
    // not belong in the plugin that QEMU loads.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
    ] {
        cmd.env_remove(var);
    }

    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the QEMU plugin: {e}"));
    if !status.success() {
        panic!(
            "building the QEMU plugin ({PLUGIN_PACKAGE}, features '{features}') failed: {status}"
        );
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap_or_else(|e| {
        panic!(
            "cannot copy the built plugin {} to {}: {e}",
            from.display(),
            to.display()
        )
    });
}
