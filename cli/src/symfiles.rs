//! Turning loaded symbol images into what uftrace reads: one map line and one `.sym` (and
//! `.dbg`) file per image, with unique module names and no overlapping ranges. Shared by
//! `record` and the `symbols` subcommand; the file layouts themselves are the `format`
//! crate's.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};
use qemu_uftrace_format::symfile::{self, DbgLine, DbgSpec, SymLine};
use qemu_uftrace_format::{addr48, ADDR_MASK};
use qemu_uftrace_symbols::{Function, Image};

/// One function's `-a` values: its arguments and its return value, each a spec's values
/// (`arg1/i32,arg2/s`, `retval/d32`).
pub type AutoValues = (Option<String>, Option<String>);

/// `-a`'s values, by file (its canonical path) and by each function's offset from its
/// image's start, which moves with the image (a PIE's bias, a kernel's random base): the
/// `.dbg` files' `A:`/`R:` lines. `record` sets them once, before the run; each image of
/// those files written later carries them.
static AUTO_VALUES: OnceLock<HashMap<PathBuf, HashMap<u64, AutoValues>>> = OnceLock::new();

/// Sets [`AUTO_VALUES`] (once a process: a second call is ignored).
pub fn set_auto_values(values: HashMap<PathBuf, HashMap<u64, AutoValues>>) {
    let _ = AUTO_VALUES.set(values);
}

fn auto_values(path: &Path) -> Option<&'static HashMap<u64, AutoValues>> {
    let all = AUTO_VALUES.get()?;
    all.get(&std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
}

/// An image with the map path it gets in the trace.
#[derive(Debug, Clone)]
pub struct PlacedImage {
    pub map: MapEntry,
    pub image: Image,
}

impl PlacedImage {
    pub fn module_name(&self) -> &str {
        self.map.module_name()
    }
}

/// 48-bit start and (exclusive) end, as the map line will say.
fn range48(img: &Image) -> (u64, u64) {
    map::range48(img.start, img.end)
}

/// The map path for an image file: absolute when the file exists (so `uftrace info` and
/// `--srcline` show where it came from), without white space (uftrace reads one word).
fn base_map_path(path: &Path) -> String {
    let p = if path.exists() {
        std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
    } else {
        path.to_path_buf()
    };
    let s = word(p.as_os_str());
    if s.is_empty() || s.ends_with('/') {
        format!("{s}image")
    } else {
        s
    }
}

/// A file name as one word: white space as `_`; a name that is not UTF-8 with its other
/// bytes escaped (a lossy conversion would give two such files one name).
pub fn word(name: &std::ffi::OsStr) -> String {
    use std::os::unix::ffi::OsStrExt;
    match name.to_str() {
        Some(s) => s.replace(char::is_whitespace, "_"),
        None => qemu_uftrace_format::text::escape_bytes(name.as_bytes())
            .replace(char::is_whitespace, "_"),
    }
}

/// Gives `path` a basename not in `used` by appending `#2`, `#3`, … and records it.
fn unique_map_path(path: String, used: &mut HashSet<String>) -> String {
    let base_name = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let mut candidate = path.clone();
    let mut n = 2;
    while used.contains(&base_name(&candidate)) {
        candidate = format!("{path}#{n}");
        n += 1;
    }
    used.insert(base_name(&candidate));
    candidate
}

/// What `place` left out, and why (one line each).
pub type Skipped = Vec<String>;

/// Places images in priority order: kernel-module images found inside an image follow it;
/// an empty image, or one overlapping an image already placed or one of `keep` (map lines
/// that stay), is skipped with a note; module names are made unique against `keep` too.
pub fn place(images: Vec<Image>, keep: &[MapEntry]) -> (Vec<PlacedImage>, Skipped) {
    let mut used: HashSet<String> = keep.iter().map(|e| e.module_name().to_string()).collect();
    let mut taken: Vec<((u64, u64), String)> = keep
        .iter()
        .map(|e| (e.range48(), e.path.to_string()))
        .collect();
    let mut placed = Vec::new();
    let mut skipped = Vec::new();
    let mut queue: Vec<Image> = Vec::new();
    for mut img in images {
        let modules = std::mem::take(&mut img.modules);
        queue.push(img);
        queue.extend(modules);
    }
    for img in queue {
        let r = range48(&img);
        if r.1 <= r.0 || (img.functions.is_empty() && img.by_address.is_empty()) {
            skipped.push(format!("{}: no functions in range", img.path.display()));
            continue;
        }
        if let Some((_, other)) = taken.iter().find(|(t, _)| map::overlaps(*t, r)) {
            skipped.push(format!(
                "{} overlaps {other} in the guest address space; keeping {other}'s symbols",
                img.path.display()
            ));
            continue;
        }
        let path = unique_map_path(base_map_path(&img.path), &mut used);
        taken.push((r, path.clone()));
        placed.push(PlacedImage {
            map: MapEntry {
                start: img.start,
                end: img.end,
                path: path.into(),
            },
            image: img,
        });
    }
    (placed, skipped)
}

/// The `.sym` lines of an image, its functions named by address among them: offsets from
/// the map start, in 48 bits, sorted; and for its `.dbg`, their source lines and `-a` values.
pub fn sym_lines(p: &PlacedImage, prefix: bool) -> (Vec<SymLine>, Vec<DbgLine>, Vec<DbgSpec>) {
    let (start, end) = range48(&p.image);
    let module = p.module_name();
    let mut specs = Vec::new();
    if let Some(values) = auto_values(&p.image.path) {
        for f in &p.image.functions {
            let a = addr48(f.addr);
            if let (Some((args, retval)), true) = (
                values.get(&f.addr.wrapping_sub(p.image.start)),
                (start..end).contains(&a),
            ) {
                specs.push(DbgSpec {
                    offset: a - start,
                    args: args.clone(),
                    retval: retval.clone(),
                });
            }
        }
    }
    let mut funcs: Vec<&Function> = p.image.functions.iter().collect();
    if !p.image.by_address.is_empty() {
        funcs.extend(&p.image.by_address);
        funcs.sort_by_key(|f| addr48(f.addr));
    }
    let mut syms = Vec::with_capacity(funcs.len());
    let mut dbg = Vec::new();
    for f in funcs {
        let a = addr48(f.addr);
        if a < start || a >= end {
            continue;
        }
        let offset = a - start;
        let name = if prefix {
            format!("{module}:{}", f.name)
        } else {
            f.name.clone()
        };
        let size = f.size.min(end - a) & ADDR_MASK;
        if let Some(line) = &f.line {
            dbg.push(DbgLine {
                offset,
                name: name.clone(),
                file: line.file.clone(),
                line: line.line,
            });
        }
        syms.push(SymLine {
            offset,
            size,
            name,
            global: f.global,
        });
    }
    (syms, dbg, specs)
}

fn sym_path(dir: &Path, module: &str, ext: &str) -> PathBuf {
    dir.join(format!("{module}.{ext}"))
}

/// Writes `<module>.sym`, and `<module>.dbg` when there are source lines or `-a` values
/// (removing a stale one otherwise). Returns whether a `.dbg` was written.
pub fn write_files(dir: &Path, p: &PlacedImage, prefix: bool) -> Result<bool> {
    let (syms, dbg, specs) = sym_lines(p, prefix);
    let (start, end) = range48(&p.image);
    let module = p.module_name();
    let path = sym_path(dir, module, "sym");
    write_with(&path, |w| symfile::write_sym(w, &syms, end - start))?;
    let dbg_path = sym_path(dir, module, "dbg");
    if dbg.is_empty() && specs.is_empty() {
        match std::fs::remove_file(&dbg_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot remove {}", dbg_path.display()))
            }
            _ => return Ok(false),
        }
    }
    write_with(&dbg_path, |w| symfile::write_dbg(w, &syms, &dbg, &specs))?;
    Ok(true)
}

/// Creates `path` and fills it through a buffered writer.
pub fn write_with(
    path: &Path,
    f: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = BufWriter::new(file);
    f(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use qemu_uftrace_symbols::SourceLine;

    pub fn image(path: &str, start: u64, funcs: &[(u64, u64, &str)]) -> Image {
        let end = funcs
            .iter()
            .map(|f| f.0 + f.1.max(1))
            .max()
            .unwrap_or(start);
        Image {
            path: path.into(),
            start,
            end,
            functions: funcs
                .iter()
                .map(|&(addr, size, name)| Function {
                    addr,
                    size,
                    name: name.into(),
                    global: true,
                    line: Some(SourceLine {
                        file: "src/x.c".into(),
                        line: 10,
                    }),
                })
                .collect(),
            arch: None,
            modules: Vec::new(),
            by_address: Vec::new(),
        }
    }

    #[test]
    fn same_file_names_get_distinct_modules() {
        let (placed, skipped) = place(
            vec![
                image("/a/vmlinux", 0x1000, &[(0x1000, 0x10, "a")]),
                image("/b/vmlinux", 0x2000, &[(0x2000, 0x10, "b")]),
                image("/c/vmlinux", 0x3000, &[(0x3000, 0x10, "c")]),
            ],
            &[],
        );
        assert!(skipped.is_empty());
        let names: Vec<&str> = placed.iter().map(|p| p.module_name()).collect();
        assert_eq!(names, ["vmlinux", "vmlinux#2", "vmlinux#3"]);
    }

    #[test]
    fn overlapping_images_keep_the_first() {
        let (placed, skipped) = place(
            vec![
                image(
                    "vmlinux",
                    0xffff_8000_8000_0000,
                    &[(0xffff_8000_8000_0000, 0x100, "k")],
                ),
                image(
                    "vmlinuz",
                    0xffff_8000_8000_0080,
                    &[(0xffff_8000_8000_0080, 0x100, "z")],
                ),
            ],
            &[],
        );
        assert_eq!(placed.len(), 1);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].contains("overlaps"), "{skipped:?}");
    }

    #[test]
    fn modules_follow_their_image() {
        let mut k = image("kallsyms", 0x8000, &[(0x8000, 0x10, "start_kernel")]);
        k.modules
            .push(image("ext4", 0x9000, &[(0x9000, 0x10, "ext4_fill_super")]));
        let (placed, _) = place(vec![k], &[]);
        let names: Vec<&str> = placed.iter().map(|p| p.module_name()).collect();
        assert_eq!(names, ["kallsyms", "ext4"]);
    }

    #[test]
    fn sym_offsets_are_48_bit_and_prefixed() {
        let (placed, _) = place(
            vec![image(
                "/k/vmlinux",
                0xffff_8000_8000_0000,
                &[
                    (0xffff_8000_8000_0000, 0x10, "a"),
                    (0xffff_8000_8000_0040, 0x10, "b"),
                ],
            )],
            &[],
        );
        let (syms, dbg, _) = sym_lines(&placed[0], true);
        assert_eq!(syms[1].offset, 0x40);
        assert_eq!(syms[1].name, "vmlinux:b");
        assert_eq!(dbg.len(), 2);
    }
}
