//! The symbol job of `record`: which sources to read, and a low-priority thread that loads
//! them and writes the trace's symbol files while QEMU runs (none of it depends on the run).

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::datadir;
use crate::errors::warn;
use crate::kernel_alias::{self, Board};
use crate::qemu::GuestImage;
use crate::symbol_source::{BackgroundLoad, Loaded, SourceArg, ToRead};

use super::kaslr;

/// What the symbol thread did.
pub struct SymbolJob {
    /// One line per source that gave nothing, shown once QEMU is done with the terminal.
    pub failures: Vec<String>,
    /// The KASLR warning, when the symbols show a Linux kernel that preparation could not
    /// tell from its file.
    pub kaslr: Option<String>,
    /// User mode: where the replay will show addresses for want of symbols, and how to name
    /// them ([`exported_only_hint`]).
    pub unnamed: Option<String>,
    pub files: Result<datadir::SymbolFiles>,
    /// The images the files were written from, kept when a kernel's randomised base may
    /// move them after the run (`kaslr`).
    pub images: Option<Vec<qemu_uftrace_symbols::Image>>,
    /// How far the files' kernel symbols were moved already.
    pub moved: Option<kaslr::Moves>,
}

impl Default for SymbolJob {
    /// No symbols at all: the trace still gets its session.
    fn default() -> Self {
        SymbolJob {
            failures: Vec::new(),
            kaslr: None,
            unnamed: None,
            files: Ok(datadir::SymbolFiles {
                sid: datadir::new_session_id(),
                ..Default::default()
            }),
            images: None,
            moved: None,
        }
    }
}

impl SymbolJob {
    /// Waits for the thread. A panic in a loader costs the names, never the recorded trace.
    pub fn join(load: BackgroundLoad<SymbolJob>) -> SymbolJob {
        load.join().unwrap_or_else(|| {
            warn("the symbol loader crashed; the trace has no function names");
            SymbolJob::default()
        })
    }
}

/// What the thread needs besides the sources.
pub struct SymbolContext {
    /// The kernel (`-kernel`), whose symbols may also be placed at its physical address.
    pub kernel: Option<PathBuf>,
    pub board: Board,
    /// The KASLR warning still to give if the symbols show a Linux kernel (`None`: KASLR is
    /// off, or it was said before QEMU started).
    pub kaslr_warning: Option<String>,
    /// The guest's architecture, for the way to name what stays unnamed.
    pub arch: Option<qemu_uftrace_symbols::Arch>,
    /// Keep the images: a kernel's randomised base may move them after the run.
    pub keep_images: bool,
}

/// `--symbols` sources first (the user's choice wins an overlap), then the images on the
/// QEMU command line, without repeating a file.
pub fn sources(extra: Vec<SourceArg>, images: &[GuestImage], no_auto: bool) -> Vec<SourceArg> {
    let mut out = extra;
    if !no_auto {
        for img in images {
            if !out.iter().any(|s| s.path == img.path) {
                out.push(SourceArg {
                    path: img.path.clone(),
                    offset: 0,
                    origin: img.origin.option(),
                });
            }
        }
    }
    out
}

/// Loads the sources `read` names and writes the trace's symbol files into `staging`, in a
/// low-priority thread.
pub fn start(read: ToRead, staging: &Path, ctx: SymbolContext) -> BackgroundLoad<SymbolJob> {
    let staging = staging.to_path_buf();
    BackgroundLoad::start(read, move |loaded| {
        let kaslr = ctx
            .kaslr_warning
            .filter(|_| kaslr::symbols_show_linux(&loaded));
        let unnamed = exported_only_hint(&loaded, ctx.arch);
        // The last reader of a compressed kernel image: preparation's BTF, process watch and
        // task slot read it before (one that has not yet only decompresses it again).
        qemu_uftrace_symbols::release_unpacked_kernel();
        let mut images = Vec::new();
        let mut failures = Vec::new();
        for l in loaded {
            match l {
                Loaded::Ok(_, img) => images.push(img),
                Loaded::Failed(src, why) => failures.push(failure_line(&src, &why)),
            }
        }
        let alias = ctx
            .kernel
            .and_then(|k| kernel_alias::physical_alias(&images, &k, &ctx.board));
        images.extend(alias);
        let kept = ctx.keep_images.then(|| images.clone());
        // A kernel found at a random base by now (`plugin.kaslr`, written as the plugin
        // found it): its symbols are written where it ran, once.
        let moved = kept.as_ref().and_then(|kept| {
            let text = std::fs::read_to_string(staging.join(kaslr::FOUND_FILE)).ok()?;
            kaslr::moves(&crate::stats::Stats::parse(&text), kept)
        });
        if let Some(moves) = moved {
            images = kaslr::moved_images(images, moves);
        }
        SymbolJob {
            failures,
            kaslr,
            unnamed,
            files: datadir::write_symbols(&staging, images),
            images: kept,
            moved,
        }
    })
}

/// User mode: the loader and libraries that gave only their exported symbols (a stripped
/// file whose debug file was not found: Debian's cross libcs), whose internal functions the
/// replay names only by address. One line naming them and how to name those; `None` when
/// there are none. On aarch64 the install's `arm64-libc` (Debian's libc6:arm64 with
/// libc6-dbg, unpacked by scripts/install-deps.sh) names them as `-L`.
pub fn exported_only_hint(
    loaded: &[Loaded],
    arch: Option<qemu_uftrace_symbols::Arch>,
) -> Option<String> {
    let files: Vec<&Path> = loaded
        .iter()
        .filter_map(|l| match l {
            // The program and the vDSO are left out: a program's functions may all be
            // global, and the vDSO has nothing more to give.
            Loaded::Ok(src, img)
                if matches!(src.origin, "the dynamic loader" | "a shared library")
                    && !img.functions.is_empty()
                    && img.functions.iter().all(|f| f.global) =>
            {
                Some(src.path.as_path())
            }
            _ => None,
        })
        .collect();
    if files.is_empty() {
        return None;
    }
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let libc = crate::plugin_cache::cache_root().join("arm64-libc");
    let way_out = if arch == Some(qemu_uftrace_symbols::Arch::Aarch64)
        && libc.join("lib/ld-linux-aarch64.so.1").is_file()
        && !files.iter().all(|f| f.starts_with(&libc))
    {
        format!(
            "record with -L {} instead (Debian's libc6:arm64 with its debug files, which \
             scripts/install-deps.sh unpacked there) to have them named",
            libc.display()
        )
    } else {
        "install their debug files (Debian: the -dbg package) or give copies with their \
         symbol tables with --symbols to have them named"
            .to_string()
    };
    Some(format!(
        "{} gave only exported symbols: the replay names the functions inside {} by their \
         address in the file (FILE+0xADDR); {way_out}",
        names.join(" and "),
        if files.len() == 1 { "it" } else { "them" }
    ))
}

/// `no symbols from FILE (ORIGIN): WHY`.
pub fn failure_line(src: &SourceArg, why: &str) -> String {
    format!(
        "no symbols from {} ({}): {why}",
        src.path.display(),
        src.origin
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::ImageOrigin;

    #[test]
    fn user_symbols_come_first_and_files_are_not_repeated() {
        let extra = vec![SourceArg {
            path: "vmlinux".into(),
            offset: 0,
            origin: "--symbols",
        }];
        let images = [
            GuestImage {
                path: "vmlinux".into(),
                origin: ImageOrigin::Kernel,
            },
            GuestImage {
                path: "fw.elf".into(),
                origin: ImageOrigin::Loader,
            },
        ];
        let s = sources(extra.clone(), &images, false);
        let paths: Vec<&Path> = s.iter().map(|s| s.path.as_path()).collect();
        assert_eq!(paths, [Path::new("vmlinux"), Path::new("fw.elf")]);
        assert_eq!(sources(extra, &images, true).len(), 1);
    }

    /// Only the loader and libraries read from their exported symbols alone are named, with
    /// the way to name what they hold.
    #[test]
    fn libraries_with_only_exported_symbols_are_named() {
        let loaded = |origin: &'static str, path: &str, local: bool| {
            let mut img =
                crate::symfiles::tests::image(path, 0x1000, &[(0x1000, 4, "a"), (0x1010, 4, "b")]);
            img.functions[1].global = !local;
            Loaded::Ok(
                SourceArg {
                    path: path.into(),
                    offset: 0,
                    origin,
                },
                img,
            )
        };
        let all = [
            loaded("the program", "/p/prog", false),
            loaded("the dynamic loader", "/sys/lib/ld.so", false),
            loaded("a shared library", "/sys/lib/libm.so.6", true),
            loaded("a shared library", "/sys/lib/libc.so.6", false),
            loaded("the vDSO", "/t/vdso", false),
        ];
        assert_eq!(
            exported_only_hint(&all, None).as_deref(),
            Some(
                "/sys/lib/ld.so and /sys/lib/libc.so.6 gave only exported symbols: the replay \
                 names the functions inside them by their address in the file (FILE+0xADDR); \
                 install their debug files (Debian: the -dbg package) or give copies with their \
                 symbol tables with --symbols to have them named"
            )
        );
        assert_eq!(exported_only_hint(&all[2..3], None), None);
        assert_eq!(exported_only_hint(&all[..1], None), None);
    }

    #[test]
    fn late_kaslr_warning_only_for_linux_kernels() {
        let loaded = |origin: &'static str, name: &str| {
            vec![Loaded::Ok(
                SourceArg {
                    path: "Image".into(),
                    offset: 0,
                    origin,
                },
                crate::symfiles::tests::image("Image", 0x1000, &[(0x1000, 4, name)]),
            )]
        };
        assert!(kaslr::symbols_show_linux(&loaded(
            "-kernel",
            "start_kernel"
        )));
        assert!(!kaslr::symbols_show_linux(&loaded("-kernel", "main")));
        assert!(!kaslr::symbols_show_linux(&loaded(
            "--symbols",
            "start_kernel"
        )));
    }
}
