//! `qemu-uftrace symbols`: add or replace the symbols of a trace directory after the fact
//! (or prepare a directory of `.sym` files for `uftrace --with-syms`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};

use crate::args::SymbolsArgs;
use crate::errors::{fail, note, warn};
use crate::symbol_source::{self, Loaded};
use crate::symfiles;

use crate::guest_procs::module_debug::ModuleDebug;

/// The guest architecture of an existing trace (its `info`), so that an image built for
/// another one is refused as such.
fn guest_arch(dir: &Path) -> Option<qemu_uftrace_symbols::Arch> {
    let desc = qemu_uftrace_format::info::read_cpu_desc(&std::fs::read(dir.join("info")).ok()?)?;
    qemu_uftrace_symbols::Arch::from_uftrace_cpu_desc(&desc)
}

/// Adds the source lines of `debug`'s modules to the trace in `dir`, whose recording named
/// the modules the guest loaded; says which modules got them and why others did not.
fn add_module_lines(dir: &Path, debug: &ModuleDebug, syms_only: bool) -> Result<()> {
    let way_out = "give the module's debug file to record --symbols when recording a Linux \
                   guest that loads it";
    if syms_only {
        return Err(fail(
            "a kernel module's debug file adds source lines to the modules a recording \
             named, and --syms-only writes symbol files alone",
            way_out,
        ));
    }
    let Some(named) = crate::guest_procs::modules::add_lines(dir, debug)? else {
        return Err(fail(
            format!(
                "{}'s recording saw no kernel module loaded: a module's debug file has no \
                 function to give source lines to",
                dir.display()
            ),
            way_out,
        ));
    };
    for line in debug
        .never_loaded(&named.loaded)
        .iter()
        .chain(&named.problems)
    {
        warn(line.clone());
    }
    if named.with_lines.is_empty() {
        return Err(fail(
            "no kernel module's source lines were added (said above why)",
            "give the debug files of the modules this recording named, from the very build \
             the guest loaded",
        ));
    }
    note(format!(
        "kernel modules: source lines of {}",
        named.with_lines.join(", ")
    ));
    Ok(())
}

pub fn run(args: SymbolsArgs) -> Result<i32> {
    let dir = &args.dir;
    // Before any source is read. A directory of symbol files alone is no trace: `replay`
    // would meet uftrace's bare "cannot open record data" there.
    if !args.syms_only && !holds_trace(dir) {
        return Err(fail(
            format!("{} holds no trace", dir.display()),
            "give the directory record wrote with -d DIR, or record one first; to write \
             symbol files for uftrace --with-syms, add --syms-only",
        ));
    }
    let sources = args
        .sources
        .iter()
        .map(|s| symbol_source::parse_source_arg(s, "SOURCE"))
        .collect::<Result<Vec<_>>>()?;
    // Kernel modules' debug files add source lines to the modules record named.
    let (sources, module_debug) = ModuleDebug::take(sources, None)?;
    if !module_debug.is_empty() {
        add_module_lines(dir, &module_debug, args.syms_only)?;
        if sources.is_empty() {
            return Ok(0);
        }
    }
    let mut images = Vec::new();
    // Those given with an OFFSET are where the user put them: never moved by KASLR's too.
    let mut placed_by_user = Vec::new();
    let mut failures = Vec::new();
    for l in symbol_source::load_all(&sources, guest_arch(&args.dir), args.demangle) {
        match l {
            Loaded::Ok(src, img) if src.offset != 0 => placed_by_user.push(img),
            Loaded::Ok(_, img) => images.push(img),
            Loaded::Failed(src, why) => failures.push((src, why)),
        }
    }
    let failed = failures.len();
    if images.is_empty() && placed_by_user.is_empty() && failed == 1 {
        // One source, one problem: say it once, as the error.
        return Err(anyhow::anyhow!("{}", failures[0].1));
    }
    for (src, why) in &failures {
        warn(format!("no symbols from {}: {why}", src.path.display()));
    }
    if images.is_empty() && placed_by_user.is_empty() {
        return Err(fail(
            "no symbols could be loaded",
            "give an ELF with symbols, a System.map, a kallsyms dump or a kernel image",
        ));
    }
    // A kernel that ran at a random base (KASLR): its symbols go where it ran, as `record`
    // put the ones it had (the offset it found is in `plugin.stats`); at their link
    // addresses they would name nothing the trace holds.
    let recorded = crate::stats::Stats::read(dir).ok().flatten();
    if let Some(moves) = (recorded.as_ref()).and_then(|s| crate::record::kaslr::moves(s, &images)) {
        let moved = if moves.virt != 0 {
            format!("{:#x} above its link address", moves.virt)
        } else {
            format!(
                "at a physical base {:#x} from its link address's",
                moves.phys
            )
        };
        note(format!(
            "the guest kernel ran {moved} (KASLR, as recorded): its symbols were moved to match"
        ));
        images = crate::record::kaslr::moved_images(images, moves);
    }
    images.append(&mut placed_by_user);

    std::fs::create_dir_all(dir).map_err(|e| {
        fail(
            format!("cannot create {}: {e}", dir.display()),
            "choose a writable -d DIR",
        )
    })?;
    let mut maps = map_files(dir)?;
    if maps.is_empty() {
        let sid = session_of(dir).unwrap_or_else(crate::datadir::new_session_id);
        maps.push(dir.join(format!("sid-{sid}.map")));
    }

    // Placed the way they will be, kernel modules included; the same for every map file.
    let (new_placed, _) = symfiles::place(images.clone(), &[]);
    let mut written = std::collections::BTreeMap::new();
    for map_path in &maps {
        let old = match std::fs::read_to_string(map_path) {
            // Lines naming code by its address are derived again below.
            Ok(t) => map::parse_map(&t)
                .into_iter()
                .filter(|e| !e.module_name().starts_with(crate::unnamed::PREFIX))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", map_path.display())),
        };
        let keep = kept_entries(&old, &new_placed);
        for gone in old.iter().filter(|e| !keep.contains(e)) {
            note(format!(
                "replacing {} in {}",
                gone.path,
                file_name(map_path)
            ));
        }
        let (placed, skipped) = symfiles::place(images.clone(), &keep);
        for s in skipped {
            note(format!("skipped: {s}"));
        }
        for p in &placed {
            if !written.contains_key(p.module_name()) {
                let dbg = symfiles::write_files(dir, p, args.prefix)?;
                let summary = Written {
                    functions: p.image.functions.len(),
                    start: p.image.start,
                    end: p.image.end,
                    source_lines: dbg,
                };
                written.insert(p.module_name().to_string(), summary);
            }
        }
        let mut entries = keep;
        entries.extend(placed.iter().map(|p| p.map.clone()));
        crate::atomic_file::replace(map_path, |mut w| map::write_map(&mut w, entries))?;
    }

    for (name, w) in &written {
        note(format!(
            "{}: {} functions{} at {:x}-{:x} -> {}",
            name,
            w.functions,
            if w.source_lines {
                " with source lines"
            } else {
                ""
            },
            w.start,
            w.end,
            dir.join(format!("{name}.sym")).display()
        ));
    }
    if let Some(line) = unnamed_tasks_note(dir, &sources) {
        note(line);
    }
    // The images given may cover code that was named by its address.
    let mut said = Vec::new();
    crate::unnamed::after_recording(dir, recorded.as_ref(), &mut said);
    for s in said {
        note(s);
    }
    if !holds_trace(dir) {
        note(format!(
            "{} holds symbol files only: use it with uftrace --with-syms {}",
            dir.display(),
            dir.display()
        ));
    }
    Ok(if failed > 0 { 1 } else { 0 })
}

/// Whether `dir` holds a trace `record` wrote (its `info` is written last but one).
fn holds_trace(dir: &Path) -> bool {
    dir.join("info").is_file()
}

/// What the closing summary says of a module whose files were written.
struct Written {
    functions: usize,
    start: u64,
    end: u64,
    source_lines: bool,
}

/// Old map lines that stay: those of other modules that do not overlap a new image
/// (`new_placed`, placed against no kept line).
fn kept_entries(old: &[MapEntry], new_placed: &[symfiles::PlacedImage]) -> Vec<MapEntry> {
    old.iter()
        .filter(|e| {
            !new_placed.iter().any(|p| {
                p.module_name() == e.module_name() || map::overlaps(p.map.range48(), e.range48())
            })
        })
        .cloned()
        .collect()
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `sid-*.map` files of a directory.
fn map_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let e = e?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("sid-") && name.ends_with(".map") {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// The session id named in `task.txt`, for a directory that lost its map.
fn session_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("task.txt")).ok()?;
    text.lines()
        .filter(|l| l.starts_with("SESS "))
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix("sid="))
        .map(str::to_string)
}

/// A DWARF vmlinux given after recording names functions, not the `pid-N`/`task-N` tasks:
/// a task's name is `task_struct.comm` in the guest's memory, gone with QEMU; the DWARF
/// gives only where it sits, and the plugin reads it at each switch when `record` has it.
fn unnamed_tasks_note(dir: &Path, sources: &[symbol_source::SourceArg]) -> Option<String> {
    let tasks = std::fs::read_to_string(dir.join("task.txt")).ok()?;
    let unnamed = tasks
        .lines()
        .filter(|l| l.starts_with("SESS "))
        .filter_map(|l| l.split("exename=\"").nth(1))
        .filter(|n| {
            n.strip_prefix("pid-")
                .or_else(|| n.strip_prefix("task-"))
                .is_some_and(|d| {
                    d.split([' ', '"'])
                        .next()
                        .is_some_and(|d| d.parse::<u32>().is_ok())
                })
        })
        .count();
    if unnamed == 0 {
        return None;
    }
    let kernel = symbol_source::kernel_layouts(sources).ok().flatten()?;
    symbol_source::task_comm_offset(&kernel)?;
    Some(format!(
        "{unnamed} task(s) keep their pid-N/task-N names: a task's name is in the guest's \
         memory (task_struct.comm), which is gone once QEMU has exited, and the kernel only \
         says where it was; record again with --symbols {} to have tasks named",
        kernel.source.path.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symfiles::tests::image;

    fn e(start: u64, end: u64, path: &str) -> MapEntry {
        MapEntry {
            start,
            end,
            path: path.into(),
        }
    }

    #[test]
    fn same_name_and_overlapping_lines_are_replaced() {
        let old = vec![
            e(0x1000, 0x2000, "/old/vmlinux"),
            e(0x8000, 0x9000, "/fw/bios.elf"),
            e(0x20000, 0x30000, "/x/other.elf"),
        ];
        let new = [
            image("/new/vmlinux", 0x4000, &[(0x4000, 0x10, "a")]),
            image("/y/fw2.elf", 0x8800, &[(0x8800, 0x10, "b")]),
        ];
        let (new_placed, _) = symfiles::place(new.to_vec(), &[]);
        let keep = kept_entries(&old, &new_placed);
        assert_eq!(keep, [e(0x20000, 0x30000, "/x/other.elf")]);
    }

    #[test]
    fn session_comes_from_task_txt() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("task.txt"),
            "SESS timestamp=0.000000000 pid=1 sid=00000000deadbeef exename=\"cpu0\"\n",
        )
        .unwrap();
        assert_eq!(session_of(d.path()).as_deref(), Some("00000000deadbeef"));
    }
}
