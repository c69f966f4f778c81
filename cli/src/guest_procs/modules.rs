//! System mode, Linux guest: kernel modules named (issue 34). The plugin reads each module's
//! own symbol table in guest memory when it is loaded (`handlers::modules`, riding on the
//! process watch), so every module is named as the kernel itself names it in kallsyms,
//! whatever file it came from and with no `.ko` at hand; its core and init text ranges come
//! with it. Here, after the run:
//! - each load gets a `.sym` file (offsets from its lowest text address) named after the
//!   module (`dummy.ko`, `dummy.ko#2` for a later load that differs);
//! - uftrace is told by `DLOP` lines in `task.txt`: from the load's time on, addresses no map
//!   line covers are looked up in the latest module loaded at or before the record's time
//!   that has a symbol there (`session_find_dlsym`). So a range reused by a later module is
//!   named by the later one from its load on, and by the earlier one before: names over time,
//!   with no session split. A `DLOP` goes to one session only (the first with its id), so
//!   every `SESS` line gets an id of its own (its map copied), and each gets every load;
//! - a module whose text has no symbol (none read) names each address its records enter
//!   `[name]+offset`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use anyhow::{Context, Result};
use qemu_uftrace_format::map::{self, MapEntry};
use qemu_uftrace_format::symfile::{self, DbgLine, SymLine};
use qemu_uftrace_symbols::ModuleFunction;

use super::module_debug::ModuleDebug;

use crate::symbol_source::KernelLayouts;
use crate::symfiles;

/// The kernel functions watched: a module placed, its init not yet run; a module freed.
const WATCHED: [&str; 2] = ["do_init_module", "free_module"];

/// `(what, member path)` of the fields read, in the order `mod_offsets=` takes them; the
/// text ranges follow ([`text_offsets`]).
const FIELDS: [(&str, &[(&str, &str)]); 5] = [
    ("module.name", &[("module", "name")]),
    ("module.kallsyms", &[("module", "kallsyms")]),
    ("mod_kallsyms.symtab", &[("mod_kallsyms", "symtab")]),
    ("mod_kallsyms.num_symtab", &[("mod_kallsyms", "num_symtab")]),
    ("mod_kallsyms.strtab", &[("mod_kallsyms", "strtab")]),
];

/// `enum mod_mem_type`'s `MOD_INIT_TEXT` (6.4 on; `MOD_TEXT` is 0).
const MOD_INIT_TEXT: u64 = 4;

/// Where the base and text size of a module's core and init code are: up to 6.3 in
/// `module.core_layout`/`init_layout` (`module_layout.base`, `.text_size`); from 6.4 in
/// `module.mem[MOD_TEXT]`/`mem[MOD_INIT_TEXT]` (`module_memory.base`, `.size`, all of it
/// code). An element of `mem` is `base`, `size` and, with CONFIG_MODULES_TREE_LOOKUP, the
/// `mod_tree_node` `mtn` (a pointer and a latch tree node of two `rb_node`s): 72 bytes on
/// Debian's 6.12 (riscv64's DWARF), 16 without the tree.
fn text_offsets(kernel: &KernelLayouts) -> Result<[u64; 4], String> {
    let t = &kernel.types;
    let off = |s: &str, m: &str| t.member_offset(s, m).map_err(|e| e.to_string());
    if let (Ok(core), Ok(init)) = (off("module", "core_layout"), off("module", "init_layout")) {
        let base = off("module_layout", "base")?;
        let text = off("module_layout", "text_size")?;
        return Ok([core + base, core + text, init + base, init + text]);
    }
    let mem = off("module", "mem")?;
    let base = off("module_memory", "base")?;
    let size = off("module_memory", "size")?;
    let element = match off("module_memory", "mtn") {
        Ok(mtn) => mtn + off("mod_tree_node", "node")? + 2 * 24,
        Err(_) => 16,
    };
    let init = mem + MOD_INIT_TEXT * element;
    Ok([mem + base, mem + size, init + base, init + size])
}

/// The plugin's `,mod_watch=…,mod_offsets=…` (given with the process watch's), or why
/// modules cannot be named (one line).
pub fn watch_options(kernel: &KernelLayouts) -> Result<String, String> {
    let source = &kernel.source;
    let why = |e: String| format!("kernel modules' functions are not named: {e}");
    let mut offsets: Vec<String> = (kernel.field_offsets(&FIELDS).map_err(why)?.iter())
        .map(u64::to_string)
        .collect();
    let text = text_offsets(kernel).map_err(|e| {
        why(format!(
            "{} has neither module.core_layout nor module.mem ({e})",
            source.path.display()
        ))
    })?;
    offsets.extend(text.iter().map(u64::to_string));
    let names: Vec<&str> = WATCHED.iter().copied().chain(["modules"]).collect();
    let mut found = qemu_uftrace_symbols::kernel_symbol_addresses(&source.path, &names)
        .map_err(|e| why(e.to_string()))?;
    // The list of loaded modules (a data symbol: not in arm64 Debian's kallsyms) and where
    // a module is on it, for the walk at a switch on (modules loaded while off); 0: none.
    let list = (found.pop().flatten())
        .zip(kernel.types.member_offset("module", "list").ok())
        .map_or([0, 0], |(head, at)| [head.wrapping_add(source.offset), at]);
    let mut addresses = Vec::new();
    for (name, a) in WATCHED.iter().zip(found) {
        let a = a.ok_or_else(|| {
            why(format!(
                "{} has no function {name} to watch",
                source.path.display()
            ))
        })?;
        addresses.push(a.wrapping_add(source.offset).to_string());
    }
    addresses.extend(list.iter().map(u64::to_string));
    Ok(format!(
        ",mod_watch={},mod_offsets={}",
        addresses.join(":"),
        offsets.join(":")
    ))
}

/// One module as the plugin read it at its load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Load {
    pub time: u64,
    pub name: String,
    pub core: u64,
    pub core_text: u64,
    pub init: u64,
    pub init_text: u64,
    /// `(address, size, name)` of its functions.
    pub symbols: Vec<(u64, u64, String)>,
}

impl Load {
    /// Its text ranges (48-bit, end exclusive), the empty ones left out.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        [(self.core, self.core_text), (self.init, self.init_text)]
            .into_iter()
            .filter(|&(b, l)| b != 0 && l != 0)
            .map(|(b, l)| map::range48(b, b.wrapping_add(l)))
            .collect()
    }

    /// Where its `.sym` offsets count from: its lowest text address (48-bit).
    fn base(&self) -> u64 {
        let ranges = self.ranges();
        let from_ranges = ranges.iter().map(|r| r.0).min();
        let from_symbols = self
            .symbols
            .iter()
            .map(|s| qemu_uftrace_format::addr48(s.0))
            .min();
        from_ranges
            .into_iter()
            .chain(from_symbols)
            .min()
            .unwrap_or(0)
    }
}

/// An unload: the module's ranges are free from `time` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unload {
    pub time: u64,
    pub name: String,
    pub core: u64,
}

/// What the plugin saw of the guest's modules.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Modules {
    pub loads: Vec<Load>,
    pub unloads: Vec<Unload>,
}

/// Parses the module lines of `plugin.procs` (the process lines are passed over).
pub fn parse(text: &str) -> Modules {
    let mut out = Modules::default();
    for line in text.lines() {
        let mut fields = line.split('\t');
        let kind = fields.next().unwrap_or("");
        let get: HashMap<&str, &str> = fields.filter_map(|f| f.split_once('=')).collect();
        let hex = |k: &str| get.get(k).and_then(|v| u64::from_str_radix(v, 16).ok());
        let dec = |k: &str| get.get(k).and_then(|v| v.parse::<u64>().ok());
        let name = || get.get("name").map(|n| n.to_string());
        match kind {
            "module" => {
                let (Some(time), Some(name), Some(core), Some(core_text)) =
                    (dec("time"), name(), hex("core"), hex("core_text"))
                else {
                    continue;
                };
                out.loads.push(Load {
                    time,
                    name,
                    core,
                    core_text,
                    init: hex("init").unwrap_or(0),
                    init_text: hex("init_text").unwrap_or(0),
                    symbols: Vec::new(),
                });
            }
            "msym" => {
                let (Some(load), Some(addr), Some(size), Some(name)) =
                    (out.loads.last_mut(), hex("addr"), hex("size"), name())
                else {
                    continue;
                };
                load.symbols.push((addr, size, name));
            }
            "unload" => {
                let (Some(time), Some(name), Some(core)) = (dec("time"), name(), hex("core"))
                else {
                    continue;
                };
                out.unloads.push(Unload { time, name, core });
            }
            _ => {}
        }
    }
    out
}

/// What naming the modules did.
#[derive(Debug, Default)]
pub struct Named {
    pub loads: usize,
    pub unloads: usize,
    pub functions: usize,
    /// Modules (by name) whose records were named `[name]+offset`: no symbol read.
    pub by_offset: Vec<String>,
    /// Modules (by name) given source lines by their debug files (`--symbols`).
    pub with_lines: Vec<String>,
    /// Why a module's debug file given was not used, one line each.
    pub problems: Vec<String>,
    /// The names of the modules loaded.
    pub loaded: Vec<String>,
}

/// Names the modules of a trace directory whose `task.txt` and maps are written (see the
/// module's comment), with source lines from the debug files in `debug`. `None`: the
/// plugin saw no module load.
pub fn write(dir: &Path, debug: &ModuleDebug) -> Result<Option<Named>> {
    let Some(modules) = loads(dir) else {
        return Ok(None);
    };
    let all_ranges: Vec<(u64, u64)> = modules.loads.iter().flat_map(Load::ranges).collect();
    // Module code must not be covered by a map line (those win over DLOP): the regions
    // `unnamed` made of its addresses before go.
    drop_unnamed_over(dir, &all_ranges)?;
    let plan = Plan::of(dir, &modules)?;
    let limit = |syms: &[SymLine]| syms.last().map_or(1, |s| s.offset + s.size.max(1));
    for (stem, syms) in &plan.written {
        symfiles::write_with(&dir.join(format!("{stem}.sym")), |w| {
            symfile::write_sym(w, syms, limit(syms))
        })?;
    }
    let mut named = plan.named(&modules);
    plan.write_lines(dir, debug, &mut named)?;
    write_task_lines(dir, &plan.dlops)?;
    Ok(Some(named))
}

/// `qemu-uftrace symbols` given modules' debug files: their source lines added to a trace
/// [`write`] named the modules of (the same `.sym` files, from the same `plugin.procs`).
/// `None`: the recording saw no module load.
pub fn add_lines(dir: &Path, debug: &ModuleDebug) -> Result<Option<Named>> {
    let Some(modules) = loads(dir) else {
        return Ok(None);
    };
    let plan = Plan::of(dir, &modules)?;
    let mut named = plan.named(&modules);
    plan.write_lines(dir, debug, &mut named)?;
    Ok(Some(named))
}

/// The module loads and unloads the plugin saw, where it saw a load.
fn loads(dir: &Path) -> Option<Modules> {
    let text = std::fs::read_to_string(dir.join("plugin.procs")).ok()?;
    let modules = parse(&text);
    (!modules.loads.is_empty()).then_some(modules)
}

/// What the loads of a trace are named by: a `.sym` file's symbols by its stem, each stem's
/// first load, and each load's `DLOP` (time, base, stem).
struct Plan<'a> {
    written: BTreeMap<String, Vec<SymLine>>,
    loads_of: BTreeMap<String, &'a Load>,
    dlops: Vec<(u64, u64, String)>,
    /// Modules named `[name]+offset` (no symbol read), and how many functions were named.
    by_offset: Vec<String>,
    functions: usize,
}

impl<'a> Plan<'a> {
    fn of(dir: &Path, modules: &'a Modules) -> Result<Plan<'a>> {
        // Addresses entered in modules that have no symbol there: named by offset.
        let bare: Vec<&Load> = modules
            .loads
            .iter()
            .filter(|l| l.symbols.is_empty())
            .collect();
        let entered = if bare.is_empty() {
            BTreeSet::new()
        } else {
            let ranges: Vec<(u64, u64)> = bare.iter().flat_map(|l| l.ranges()).collect();
            crate::unnamed::entries_within(dir, &ranges)?
        };
        let mut plan = Plan {
            written: BTreeMap::new(),
            loads_of: BTreeMap::new(),
            dlops: Vec::new(),
            by_offset: Vec::new(),
            functions: 0,
        };
        for load in &modules.loads {
            let base = load.base();
            let mut syms: Vec<SymLine> = load
                .symbols
                .iter()
                .map(|(a, size, name)| SymLine {
                    offset: qemu_uftrace_format::addr48(*a).wrapping_sub(base),
                    size: *size,
                    name: name.clone(),
                    global: false,
                })
                .collect();
            if syms.is_empty() {
                for &(start, end) in &load.ranges() {
                    syms.extend(entered.range(start..end).map(|&a| SymLine {
                        offset: a - base,
                        size: 1,
                        name: format!("[{}]+{:#x}", load.name, a - base),
                        global: false,
                    }));
                }
                if !syms.is_empty() {
                    plan.by_offset.push(load.name.clone());
                }
            }
            let syms = symfile::normalize(prefer_own_names(syms));
            plan.functions += syms.len();
            // One `.sym` a load, shared by loads with the same name and content.
            let stem = file_stem(&load.name, &syms, &mut plan.written);
            plan.loads_of.entry(stem.clone()).or_insert(load);
            plan.dlops.push((load.time, base, stem));
        }
        plan.by_offset.sort();
        plan.by_offset.dedup();
        Ok(plan)
    }

    /// What it names, before any source line.
    fn named(&self, modules: &Modules) -> Named {
        Named {
            loads: modules.loads.len(),
            unloads: modules.unloads.len(),
            loaded: modules.loads.iter().map(|l| l.name.clone()).collect(),
            functions: self.functions,
            by_offset: self.by_offset.clone(),
            ..Default::default()
        }
    }

    /// Writes the `.dbg` of each `.sym` whose module has a debug file in `debug` that fits
    /// it; says which in `named` (`with_lines`, `problems`).
    fn write_lines(&self, dir: &Path, debug: &ModuleDebug, named: &mut Named) -> Result<()> {
        let mut unused = BTreeSet::new();
        for (stem, syms) in &self.written {
            let Some(load) = self.loads_of.get(stem) else {
                continue;
            };
            match debug.functions(&load.name, &load.symbols) {
                None => {}
                // Once a module (its later loads' files share the file given).
                Some(Err(why)) => named
                    .problems
                    .extend(unused.insert(load.name.clone()).then_some(why)),
                Some(Ok(funcs)) => {
                    let lines = source_lines(syms, &funcs);
                    symfiles::write_with(&dir.join(format!("{stem}.dbg")), |w| {
                        symfile::write_dbg(w, syms, &lines, &[])
                    })?;
                    if !lines.is_empty() {
                        named.with_lines.push(load.name.clone());
                    }
                }
            }
        }
        named.with_lines.sort();
        named.with_lines.dedup();
        Ok(())
    }
}

/// The source line of each of `syms` that the module's debug file (`funcs`) has.
fn source_lines(syms: &[SymLine], funcs: &HashMap<String, ModuleFunction>) -> Vec<DbgLine> {
    (syms.iter())
        .filter_map(|s| {
            let line = funcs.get(&s.name)?.line.as_ref()?;
            Some(DbgLine {
                offset: s.offset,
                name: s.name.clone(),
                file: line.file.clone(),
                line: line.line,
            })
        })
        .collect()
}

/// Every module's init and exit functions are also `init_module` and `cleanup_module`
/// (aliases the module macros make): of several names at one address, those go last, so
/// that the module's own name (`dummy_init_module`) is the one kept.
fn prefer_own_names(mut syms: Vec<SymLine>) -> Vec<SymLine> {
    const ALIASES: [&str; 2] = ["init_module", "cleanup_module"];
    let aliased: BTreeSet<u64> = syms
        .iter()
        .filter(|s| !ALIASES.contains(&s.name.as_str()))
        .map(|s| s.offset)
        .collect();
    syms.retain(|s| !(ALIASES.contains(&s.name.as_str()) && aliased.contains(&s.offset)));
    syms
}

/// The `.sym` stem of a load: `NAME.ko`, or `NAME.ko#N` where an earlier load of that name
/// had other symbols (a `#` keeps it apart from every file name a module has).
fn file_stem(name: &str, syms: &[SymLine], written: &mut BTreeMap<String, Vec<SymLine>>) -> String {
    let name = name.replace('/', "_");
    for n in 1.. {
        let stem = match n {
            1 => format!("{name}.ko"),
            n => format!("{name}.ko#{n}"),
        };
        match written.get(&stem) {
            Some(s) if s == syms => return stem,
            Some(_) => continue,
            None => {
                written.insert(stem.clone(), syms.to_vec());
                return stem;
            }
        }
    }
    unreachable!("the loop returns")
}

/// Removes the map lines `unnamed` wrote over module code (it names what no map line covers,
/// and module addresses were among them).
fn drop_unnamed_over(dir: &Path, ranges: &[(u64, u64)]) -> Result<()> {
    for path in crate::unnamed::map_files(dir)? {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let entries = map::parse_map(&text);
        let keep: Vec<MapEntry> = entries
            .iter()
            .filter(|e| {
                !(e.module_name().starts_with(crate::unnamed::PREFIX)
                    && ranges.iter().any(|&r| map::overlaps(e.range48(), r)))
            })
            .cloned()
            .collect();
        if keep.len() != entries.len() {
            symfiles::write_with(&path, |w| map::write_map(w, keep))?;
        }
    }
    Ok(())
}

/// Gives every `SESS` line of `task.txt` a session id of its own (a copy of its map; the
/// first session's without the kernel's physical-address copy), then appends a `DLOP` line
/// per load (`(time, base, stem)`) for every session.
fn write_task_lines(dir: &Path, dlops: &[(u64, u64, String)]) -> Result<()> {
    let path = dir.join("task.txt");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut seen: HashMap<String, u32> = HashMap::new();
    // The boot's session: its map is the only one whose images the CLI placed alone (the
    // kernel, its copy, firmware), never a guest's file.
    let mut boot: Option<String> = None;
    // Its map less that copy: read once for the many sessions copied from it.
    let mut boot_copy: Option<Vec<MapEntry>> = None;
    let mut sessions: Vec<(String, String)> = Vec::new();
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let Some((sid, pid)) = sess_fields(line) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let boot: &str = boot.get_or_insert_with(|| sid.to_string());
        let n = seen.entry(sid.to_string()).or_insert(0);
        *n += 1;
        let own = if *n == 1 {
            sid.to_string()
        } else {
            let seed = u64::from_str_radix(sid, 16).unwrap_or(0);
            // Apart from every id `guest_procs` derives (seq << 32 | tgid).
            let new = qemu_uftrace_format::task::session_id(
                seed ^ 0x8000_0000_0000_0000 ^ (u64::from(*n) << 40) ^ u64::from(pid),
            );
            let from = dir.join(format!("sid-{sid}.map"));
            let to = dir.join(format!("sid-{new}.map"));
            if sid == boot {
                // A kernel thread's or a process's before it execs: the kernel's
                // physical-address copy stays the boot's alone
                // (`kernel_alias::without_physical_copy`).
                let entries = match &boot_copy {
                    Some(e) => e.clone(),
                    None => {
                        let text = std::fs::read_to_string(&from)
                            .with_context(|| format!("cannot read {}", from.display()))?;
                        let e = crate::kernel_alias::without_physical_copy(map::parse_map(&text));
                        boot_copy.insert(e).clone()
                    }
                };
                symfiles::write_with(&to, |w| map::write_map(w, entries))?;
            } else {
                std::fs::copy(&from, &to).with_context(|| {
                    format!("cannot copy {} to {}", from.display(), to.display())
                })?;
            }
            new
        };
        out.push_str(&line.replacen(&format!("sid={sid}"), &format!("sid={own}"), 1));
        out.push('\n');
        sessions.push((own, pid.to_string()));
    }
    for (time, base, stem) in dlops {
        for (sid, pid) in &sessions {
            out.push_str(&format!(
                "DLOP timestamp={}.{:09} tid={pid} sid={sid} base={base:x} libname=\"{stem}\"\n",
                time / 1_000_000_000,
                time % 1_000_000_000
            ));
        }
    }
    symfiles::write_with(&path, |w| std::io::Write::write_all(w, out.as_bytes()))
}

/// A `SESS` line's session id and pid.
fn sess_fields(line: &str) -> Option<(&str, u32)> {
    let rest = line.strip_prefix("SESS ")?;
    let field = |key: &str| {
        rest.split(' ')
            .find_map(|w| w.strip_prefix(key))
            .filter(|v| !v.is_empty())
    };
    let sid = field("sid=")?;
    let pid = field("pid=")?.parse().ok()?;
    Some((sid, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_loads_symbols_and_unloads() {
        let text = "task\ttime=1\ttid=1\ttgid=1\tparent=0\n\
                    module\ttime=5\tname=dummy\tcore=ffff800000be0000\tcore_text=400\tinit=ffff800000be5000\tinit_text=100\tsymbols=2\n\
                    msym\taddr=ffff800000be5000\tsize=80\tname=dummy_init_module\n\
                    msym\taddr=ffff800000be0000\tsize=60\tname=dummy_cleanup_module\n\
                    unload\ttime=9\tname=dummy\tcore=ffff800000be0000\tinit=0\n\
                    module\ttime=12\tname=ifb\tcore=ffff800000be0000\tcore_text=800\tinit=0\tinit_text=0\tsymbols=0\n";
        let m = parse(text);
        assert_eq!(m.loads.len(), 2);
        assert_eq!(m.loads[0].symbols.len(), 2);
        assert_eq!(m.loads[0].base(), 0x8000_00be_0000);
        assert_eq!(
            m.loads[0].ranges(),
            vec![
                (0x8000_00be_0000, 0x8000_00be_0400),
                (0x8000_00be_5000, 0x8000_00be_5100)
            ]
        );
        assert_eq!(
            m.loads[1].ranges(),
            vec![(0x8000_00be_0000, 0x8000_00be_0800)]
        );
        assert_eq!(
            m.unloads,
            vec![Unload {
                time: 9,
                name: "dummy".into(),
                core: 0xffff_8000_00be_0000
            }]
        );
    }

    #[test]
    fn own_names_win_over_the_module_aliases() {
        let s = |offset, name: &str| SymLine {
            offset,
            size: 4,
            name: name.into(),
            global: false,
        };
        let kept = prefer_own_names(vec![
            s(0, "cleanup_module"),
            s(0, "dummy_cleanup_module"),
            s(8, "init_module"),
        ]);
        assert_eq!(
            kept,
            vec![s(0, "dummy_cleanup_module"), s(8, "init_module")]
        );
    }

    #[test]
    fn stems_part_loads_that_differ() {
        let mut written = BTreeMap::new();
        let a = vec![SymLine {
            offset: 0,
            size: 4,
            name: "f".into(),
            global: false,
        }];
        let b = vec![SymLine {
            offset: 8,
            size: 4,
            name: "f".into(),
            global: false,
        }];
        assert_eq!(file_stem("m", &a, &mut written), "m.ko");
        assert_eq!(file_stem("m", &a, &mut written), "m.ko");
        assert_eq!(file_stem("m", &b, &mut written), "m.ko#2");
        assert_eq!(file_stem("a/b", &b, &mut written), "a_b.ko");
    }

    /// A module whose symbols were not read: each address its records enter is
    /// `[name]+offset`; the `unnamed` region over it goes, and the load reaches uftrace.
    #[test]
    fn a_module_without_symbols_is_named_by_offset() {
        use qemu_uftrace_format::record::{encode, RecordType};
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let sid = "00000000000000aa";
        std::fs::write(
            d.join(format!("sid-{sid}.map")),
            "800000be0000-800000bf0000 r-xp 00000000 00:00 0 unnamed-800000be0000\n\
             ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]\n",
        )
        .unwrap();
        std::fs::write(
            d.join("task.txt"),
            format!(
                "SESS timestamp=0.000000000 pid=1 sid={sid} exename=\"a\"\n\
                 TASK timestamp=0.000000000 tid=1 pid=1\n"
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("plugin.procs"),
            "module\ttime=5\tname=m\tcore=ffff800000be0000\tcore_text=1000\tinit=0\t\
             init_text=0\tsymbols=0\n",
        )
        .unwrap();
        let mut dat = Vec::new();
        for (t, kind, addr) in [
            (6, RecordType::Entry, 0x8000_00be_0040u64),
            (7, RecordType::Exit, 0x8000_00be_0040),
            (8, RecordType::Entry, 0x8000_00be_0010),
            (9, RecordType::Exit, 0x8000_00be_0010),
            // Not the module's: named elsewhere.
            (10, RecordType::Entry, 0x8000_0800_0000),
            (11, RecordType::Exit, 0x8000_0800_0000),
        ] {
            dat.extend(encode(t, kind, 0, addr));
        }
        std::fs::write(d.join("1.dat"), dat).unwrap();
        let named = write(d, &ModuleDebug::default()).unwrap().expect("a load");
        assert_eq!((named.loads, named.functions), (1, 2));
        assert_eq!(named.by_offset, vec!["m".to_string()]);
        let sym = std::fs::read_to_string(d.join("m.ko.sym")).unwrap();
        assert!(
            sym.contains("10 t [m]+0x10\n") && sym.contains("40 t [m]+0x40\n"),
            "{sym}"
        );
        let map = std::fs::read_to_string(d.join(format!("sid-{sid}.map"))).unwrap();
        assert!(!map.contains("unnamed-"), "{map}");
        let task = std::fs::read_to_string(d.join("task.txt")).unwrap();
        assert!(
            task.contains(&format!(
                "DLOP timestamp=0.000000005 tid=1 sid={sid} base=800000be0000 libname=\"m.ko\""
            )),
            "{task}"
        );
    }

    #[test]
    fn every_session_gets_its_own_id_and_every_load() {
        let dir = tempfile::tempdir().unwrap();
        let sid = "00000000000000aa";
        std::fs::write(dir.path().join(format!("sid-{sid}.map")), "map\n").unwrap();
        std::fs::write(
            dir.path().join("task.txt"),
            format!(
                "SESS timestamp=0.000000000 pid=1 sid={sid} exename=\"a\"\n\
                 SESS timestamp=0.000000000 pid=2 sid={sid} exename=\"b\"\n\
                 TASK timestamp=0.000000000 tid=1 pid=1\n"
            ),
        )
        .unwrap();
        write_task_lines(
            dir.path(),
            &[(1_500_000_000, 0x8000_00be_0000, "dummy.ko".into())],
        )
        .unwrap();
        let text = std::fs::read_to_string(dir.path().join("task.txt")).unwrap();
        let sids: Vec<&str> = text
            .lines()
            .filter_map(|l| sess_fields(l).map(|s| s.0))
            .collect();
        assert_eq!(sids.len(), 2);
        assert_ne!(sids[0], sids[1]);
        for s in &sids {
            assert!(dir.path().join(format!("sid-{s}.map")).is_file());
            assert!(text.contains(&format!(
                "DLOP timestamp=1.500000000 tid={} sid={s} base=800000be0000 libname=\"dummy.ko\"",
                if *s == sid { 1 } else { 2 }
            )));
        }
    }

    /// The boot's session keeps the kernel's physical-address copy; the copies of its map
    /// for other tasks leave it out, and a process's map is copied whole (a guest file whose
    /// name ends in `.phys` stays).
    #[test]
    fn the_physical_copy_stays_the_boot_s_alone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (boot, proc_sid) = ("00000000000000aa", "00000000000000bb");
        std::fs::write(
            d.join(format!("sid-{boot}.map")),
            "1000000-2000000 r-xp 00000000 00:00 0 /k/vmlinuz.phys
             ffff81000000-ffff82000000 r-xp 00000000 00:00 0 /k/vmlinuz
             ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]
",
        )
        .unwrap();
        let process = "400000-500000 r-xp 00000000 00:00 0 /usr/bin/tool.phys
                       ffff81000000-ffff82000000 r-xp 00000000 00:00 0 /k/vmlinuz
                       ffffffffffff-ffffffffffff rw-p 00000000 00:00 0 [stack]
";
        std::fs::write(d.join(format!("sid-{proc_sid}.map")), process).unwrap();
        std::fs::write(
            d.join("task.txt"),
            format!(
                "SESS timestamp=0.000000000 pid=2 sid={boot} exename=\"kthreadd\"\n\
                 SESS timestamp=0.000000000 pid=3 sid={boot} exename=\"rcu_gp\"\n\
                 SESS timestamp=1.000000000 pid=9 sid={proc_sid} exename=\"tool\"\n\
                 SESS timestamp=2.000000000 pid=9 sid={proc_sid} exename=\"tool\"\n"
            ),
        )
        .unwrap();
        write_task_lines(d, &[]).unwrap();
        let text = std::fs::read_to_string(d.join("task.txt")).unwrap();
        let sids: Vec<&str> = text
            .lines()
            .filter_map(|l| sess_fields(l).map(|s| s.0))
            .collect();
        let map = |sid: &str| std::fs::read_to_string(d.join(format!("sid-{sid}.map"))).unwrap();
        assert_eq!(sids[0], boot);
        assert!(map(sids[0]).contains("/k/vmlinuz.phys"));
        let kthread = map(sids[1]);
        assert!(
            !kthread.contains(".phys") && kthread.contains("/k/vmlinuz\n"),
            "{kthread}"
        );
        assert_eq!(map(sids[3]), process);
    }
}
