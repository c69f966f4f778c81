//! `-A/--argument SPEC` and `-R/--retval SPEC` (uftrace's): each SPEC parsed as uftrace
//! parses it (`format::args`), its FUNC resolved as `-F`'s is (a whole name, or a regular
//! expression matched anywhere), the values of each function merged as uftrace's replay
//! merges them, so that the payload the plugin writes is the one replay reads back by the
//! same specs (kept as typed in `info`). The plugin gets the list in a file
//! (`args_file=`, `state::args`); after the run its carrier records are folded into the
//! records they belong to (`fold_all`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_format::args::{self as fargs, Folded, InfoSpec, Value};
use qemu_uftrace_format::Arch;
use regex::Regex;

use crate::errors::usage;
use crate::stop_at::{Addr, Names};

/// One function's values to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncValues {
    pub addr: Addr,
    /// Its size (0: unknown, so no return value can be read).
    pub size: u64,
    pub values: Vec<Value>,
    /// A kernel syscall wrapper's (it takes only `struct pt_regs *`): where in that struct
    /// each of the syscall's arguments is, read there instead of from registers.
    pub pt_regs: Option<[u64; 6]>,
}

/// Every `-A`/`-R` of a recording, resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArgSpecs {
    pub info: InfoSpec,
    pub funcs: Vec<FuncValues>,
}

/// The last argument a register holds in `arch`'s calling convention.
pub fn max_register_arg(arch: Arch) -> u8 {
    match arch {
        Arch::X86_64 => 6,
        Arch::Aarch64 | Arch::Riscv64 => 8,
    }
}

impl ArgSpecs {
    /// Parses and resolves `argument` (`-A`) and `retval` (`-R`) in `names`, with each
    /// function's size from `sizes`; a bad spec, an unknown function or a return value of
    /// a function of unknown size is one line.
    pub fn resolve(
        argument: &[String],
        retval: &[String],
        names: &Names,
        sizes: &HashMap<Addr, u64>,
        arch: Arch,
    ) -> Result<Self> {
        let mut specs = ArgSpecs {
            info: InfoSpec {
                argspec: argument.to_vec(),
                retspec: retval.to_vec(),
                enums: Vec::new(),
            },
            funcs: Vec::new(),
        };
        if argument.is_empty() && retval.is_empty() {
            return Ok(specs);
        }
        let mut exacts: HashMap<Addr, Vec<bool>> = HashMap::new();
        let given = (argument.iter().map(|s| ("-A", s))).chain(retval.iter().map(|s| ("-R", s)));
        for (option, text) in given {
            let spec = fargs::parse(text, max_register_arg(arch)).map_err(|e| {
                usage(
                    format!("{option} {e}"),
                    "write it as uftrace does: FUNC@arg1/s,arg2/x32 or FUNC@retval/d",
                )
            })?;
            let exact = !spec.pattern.contains(crate::filter::REGEX_CHARS);
            let addrs = crate::filter::matching(option, &spec.pattern, names)?;
            for addr in addrs {
                let size = sizes.get(&addr).copied().unwrap_or(0);
                if size == 0 && spec.values.iter().any(Value::is_retval) && exact {
                    return Err(usage(
                        format!(
                            "{option} {text}: the symbols do not say where {} ends, so its \
                             return instructions are not known",
                            spec.pattern
                        ),
                        "give a symbol source with sizes (the ELF file) with --symbols",
                    ));
                }
                let i = match specs.funcs.iter().position(|f| f.addr == addr) {
                    Some(i) => i,
                    None => {
                        specs.funcs.push(FuncValues {
                            addr,
                            size,
                            values: Vec::new(),
                            pt_regs: None,
                        });
                        specs.funcs.len() - 1
                    }
                };
                let ex = exacts.entry(addr).or_default();
                for v in &spec.values {
                    fargs::merge_exact(&mut specs.funcs[i].values, ex, *v, exact);
                }
            }
        }
        specs.funcs.sort_by_key(|f| f.addr);
        Ok(specs)
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// The plugin's list (`state::args`): one line a function.
    pub fn plugin_list(&self) -> String {
        let mut out = String::new();
        for f in &self.funcs {
            let (place, addr) = match f.addr {
                Addr::At(a) => ("A", a),
                Addr::Pie(a) => ("P", a),
            };
            let args: Vec<String> = (f.values.iter())
                .filter(|v| !v.is_retval())
                .map(|v| match f.pt_regs {
                    // Read from memory at the first argument (the pt_regs) plus the offset.
                    Some(at) => {
                        let off = at.get(usize::from(v.idx) - 1).copied().unwrap_or(0);
                        format!("{}:{}:{off:x}", v.idx, v.plugin_word())
                    }
                    None => format!("{}:{}", v.idx, v.plugin_word()),
                })
                .collect();
            let args = if args.is_empty() {
                "-".to_string()
            } else {
                args.join(",")
            };
            let ret = (f.values.iter().find(|v| v.is_retval()))
                .filter(|_| f.size > 0)
                .map_or_else(|| "-".to_string(), Value::plugin_word);
            let end = if f.size > 0 { addr + f.size } else { 0 };
            out.push_str(&format!("{place} {addr:x} {end:x} {args} {ret}\n"));
        }
        out
    }

    /// Writes the plugin's list into the staging directory (`args_file=`); its path.
    pub fn write_plugin_file(&self, staging: &Path) -> Result<Option<PathBuf>> {
        if self.is_empty() {
            return Ok(None);
        }
        let path = staging.join("plugin.args");
        std::fs::write(&path, self.plugin_list())
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Some(path))
    }

    /// Marks the kernel's syscall wrappers among the functions (`names` has a name of
    /// `arch`'s [`syscall_prefix`] for them): their arguments are their syscall's, read
    /// from the `struct pt_regs` they take, at `pt_regs` (`None`: its layout is not known,
    /// which is one line when a wrapper has arguments to read).
    pub fn read_syscalls(
        &mut self,
        names: &Names,
        arch: Arch,
        pt_regs: Option<[u64; 6]>,
    ) -> Result<()> {
        let prefix = syscall_prefix(arch);
        for f in &mut self.funcs {
            let Some((name, _)) = (names.functions.iter())
                .find(|(n, a)| *a == f.addr && n.starts_with(prefix) && n.len() > prefix.len())
            else {
                continue;
            };
            let args: Vec<u8> = (f.values.iter().filter(|v| !v.is_retval()))
                .map(|v| v.idx)
                .collect();
            if args.is_empty() {
                continue;
            }
            let Some(at) = pt_regs else {
                return Err(usage(
                    format!(
                        "-A {name}: the kernel's struct pt_regs is not known (no DWARF or BTF \
                         says its layout), so the syscall's arguments cannot be read"
                    ),
                    "give the kernel's -dbg vmlinux with --symbols",
                ));
            };
            if let Some(n) = args.iter().find(|&&n| n > 6) {
                return Err(usage(
                    format!("-A {name}@arg{n}: a syscall has at most 6 arguments"),
                    "name arg1 to arg6",
                ));
            }
            f.pt_regs = Some(at);
        }
        Ok(())
    }
}

/// The prefix of the kernel's syscall wrappers on `arch` (`__arm64_sys_openat` for
/// `openat`): each takes the `struct pt_regs *` the syscall entered with.
pub fn syscall_prefix(arch: Arch) -> &'static str {
    match arch {
        Arch::Aarch64 => "__arm64_sys_",
        Arch::X86_64 => "__x64_sys_",
        Arch::Riscv64 => "__riscv_sys_",
    }
}

/// Where `struct pt_regs` keeps a syscall's six arguments, in the order the wrappers pass
/// them on (`SC_ARM64_REGS_TO_ARGS`: `regs[0..6]`; `SC_X86_64_REGS_TO_ARGS`: di, si, dx,
/// r10, r8, r9; `SC_RISCV_REGS_TO_ARGS`: orig_a0, a1..a5), from the kernel's DWARF or BTF.
pub fn pt_regs_offsets(
    types: &qemu_uftrace_symbols::KernelTypes,
    arch: Arch,
) -> std::result::Result<[u64; 6], String> {
    let at = |member: &str| {
        types
            .member_offset("pt_regs", member)
            .map_err(|e| format!("struct pt_regs: {e}"))
    };
    let mut out = [0u64; 6];
    match arch {
        Arch::Aarch64 => {
            // `regs[31]`, in an anonymous struct of a union with `user_regs`, which
            // starts with the same array.
            let base = at("regs").or_else(|_| at("user_regs"))?;
            for (i, o) in out.iter_mut().enumerate() {
                *o = base + 8 * i as u64;
            }
        }
        Arch::X86_64 => {
            for (o, m) in out.iter_mut().zip(["di", "si", "dx", "r10", "r8", "r9"]) {
                *o = at(m)?;
            }
        }
        Arch::Riscv64 => {
            for (o, m) in out
                .iter_mut()
                .zip(["orig_a0", "a1", "a2", "a3", "a4", "a5"])
            {
                *o = at(m)?;
            }
        }
    }
    Ok(out)
}

/// `-A FUNC` with no `@VALUE`s, where FUNC names the kernel's syscall wrappers: each
/// syscall's own arguments by their types, as ftrace's syscall events show them, from the
/// DWARF of its `__do_sys_NAME` in `files` (the kernel's ELF files: its `-dbg` vmlinux).
/// Gives `argument` with each such spec written out (`__arm64_sys_openat@arg1/i32,arg2/s,…`:
/// `info` must hold what replay can read), and the enums they name. A bare FUNC that names
/// another function is left for [`ArgSpecs::resolve`] to refuse.
pub fn expand_syscalls(
    argument: &[String],
    names: &Names,
    arch: Arch,
    files: &[PathBuf],
) -> Result<(Vec<String>, Vec<String>)> {
    let prefix = syscall_prefix(arch);
    let mut out = Vec::new();
    let mut enums: std::collections::BTreeMap<String, Vec<(String, i64)>> = Default::default();
    for text in argument {
        if text.contains('@') {
            out.push(text.clone());
            continue;
        }
        let addrs = crate::filter::matching("-A", text, names)?;
        let mut wrappers: Vec<(u64, String)> = Vec::new();
        for (name, addr) in &names.functions {
            if let (Addr::At(a), Some(syscall)) = (addr, name.strip_prefix(prefix)) {
                if addrs.contains(addr) && !syscall.is_empty() {
                    wrappers.push((*a, syscall.to_string()));
                }
            }
        }
        if wrappers.is_empty() {
            // Not a syscall wrapper: `resolve` says what a spec needs.
            out.push(text.clone());
            continue;
        }
        wrappers.sort();
        wrappers.dedup_by_key(|w| w.0);
        let mut found = Vec::new();
        for path in files {
            let left: Vec<(u64, String)> = (wrappers.iter())
                .filter(|w| {
                    !found
                        .iter()
                        .any(|s: &qemu_uftrace_symbols::AutoSpec| s.addr == w.0)
                })
                .cloned()
                .collect();
            if left.is_empty() {
                break;
            }
            found.extend(
                qemu_uftrace_symbols::syscall_specs(path, &left).map_err(|e| {
                    usage(
                        format!("-A {text}: {e}"),
                        "give the kernel's -dbg vmlinux with --symbols",
                    )
                })?,
            );
        }
        if let Some((_, missing)) = wrappers
            .iter()
            .find(|w| !found.iter().any(|s| s.addr == w.0))
        {
            return Err(usage(
                format!(
                    "-A {text}: the symbols hold no DWARF types of __do_sys_{missing} (the \
                     syscall {prefix}{missing} passes on)"
                ),
                format!(
                    "give the kernel's -dbg vmlinux with --symbols, or name the formats: \
                     {prefix}{missing}@arg1/d,arg2/s"
                ),
            ));
        }
        for s in found {
            for (name, vals) in s.enums {
                enums.entry(name).or_insert(vals);
            }
            if s.args.is_empty() {
                continue;
            }
            let args: Vec<String> = (s.args.iter().take(6))
                .enumerate()
                .map(|(i, w)| format!("arg{}/{w}", i + 1))
                .collect();
            out.push(format!("{prefix}{}@{}", s.name, args.join(",")));
        }
    }
    let enums = (enums.into_iter())
        .map(|(name, vals)| {
            let vals: Vec<String> = vals.iter().map(|(n, v)| format!("{n} = {v}")).collect();
            format!("enum {name} {{ {} }}", vals.join(", "))
        })
        .collect();
    Ok((out, enums))
}

/// A finished trace's `-A`/`-R` (its `info`), matched against function names as uftrace's
/// readers match them: which values a record with the `more` bit carries (`export`).
#[derive(Debug, Default)]
pub struct Lookup {
    /// Each spec's name matcher (a regular expression, or a whole name), its values, and
    /// whether it names functions whole.
    specs: Vec<(Option<Regex>, String, Vec<Value>)>,
}

impl Lookup {
    /// The trace's specs; `None` when it has none. A spec uftrace could not read either
    /// is left out (its records' payloads cannot be told apart then: the export says so).
    pub fn read(dir: &Path) -> Option<Lookup> {
        let info = std::fs::read(dir.join("info")).ok()?;
        let spec = fargs::read_info_spec(&info)?;
        let mut specs = Vec::new();
        for text in spec.argspec.iter().chain(&spec.retspec) {
            let Ok(s) = fargs::parse(text, u8::MAX) else {
                continue;
            };
            let re = if s.pattern.contains(crate::filter::REGEX_CHARS) {
                match Regex::new(&s.pattern) {
                    Ok(re) => Some(re),
                    Err(_) => continue,
                }
            } else {
                None
            };
            specs.push((re, s.pattern, s.values));
        }
        Some(Lookup { specs })
    }

    /// The values function `name` carries, merged as uftrace merges them.
    pub fn values_for(&self, name: &str) -> Vec<Value> {
        let (mut values, mut exacts) = (Vec::new(), Vec::new());
        for (re, pattern, vals) in &self.specs {
            let (hit, exact) = match re {
                Some(re) => (re.is_match(name), false),
                None => (pattern == name, true),
            };
            if hit {
                for v in vals {
                    fargs::merge_exact(&mut values, &mut exacts, *v, exact);
                }
            }
        }
        values
    }
}

/// The most functions `-a` gives specs: uftrace's replay matches each against every symbol.
pub const MAX_AUTO: usize = 4000;

/// `-a/--auto-args`: a spec for each function of `files` whose DWARF says its types and
/// whose symbol has its DWARF name (replay finds specs by symbol name), but for those an
/// explicit `-A`/`-R` (`explicit`) names (uftrace ignores auto-args there). Gives the
/// `-A` and `-R` specs, as if typed. `files`: ELF files at their link addresses, each
/// `true` when its functions are a PIE's (`Addr::Pie`).
pub fn auto_specs(
    files: &[(PathBuf, bool)],
    names: &Names,
    explicit: &[String],
    arch: Arch,
) -> Result<(Vec<String>, Vec<String>, Vec<String>)> {
    let named: HashMap<Addr, Vec<&str>> =
        names
            .functions
            .iter()
            .fold(HashMap::new(), |mut m, (n, a)| {
                m.entry(*a).or_default().push(n.as_str());
                m
            });
    let taken = |name: &str| {
        explicit.iter().any(|s| {
            let pattern = s.split_once('@').map_or(s.as_str(), |(p, _)| p);
            if pattern.contains(crate::filter::REGEX_CHARS) {
                Regex::new(pattern).is_ok_and(|re| re.is_match(name))
            } else {
                pattern == name
            }
        })
    };
    // By name: one spec a name (two functions of one name and other types: neither).
    let mut by_name: std::collections::BTreeMap<String, Option<(String, Option<String>)>> =
        Default::default();
    // Each enum's first definition (by name), as uftrace keeps one a name.
    let mut enums: std::collections::BTreeMap<String, Vec<(String, i64)>> = Default::default();
    for (path, pie) in files {
        let specs = qemu_uftrace_symbols::auto_specs(path)
            .map_err(|e| usage(format!("-a: {e}"), "give ELF files with DWARF (-g builds)"))?;
        for s in specs {
            for (name, vals) in &s.enums {
                enums.entry(name.clone()).or_insert_with(|| vals.clone());
            }
            let addr = if *pie {
                Addr::Pie(s.addr)
            } else {
                Addr::At(s.addr)
            };
            if !named
                .get(&addr)
                .is_some_and(|n| n.contains(&s.name.as_str()))
                || taken(&s.name)
            {
                continue;
            }
            let args: Vec<String> = (s.args.iter().take(max_register_arg(arch) as usize))
                .enumerate()
                .map(|(i, w)| format!("arg{}/{w}", i + 1))
                .collect();
            let spec = (
                args.join(","),
                s.ret.as_ref().map(|w| format!("retval/{w}")),
            );
            by_name
                .entry(s.name)
                .and_modify(|e| {
                    if e.as_ref() != Some(&spec) {
                        *e = None;
                    }
                })
                .or_insert(Some(spec));
        }
    }
    let (mut a, mut r) = (Vec::new(), Vec::new());
    for (name, spec) in by_name {
        let Some((args, ret)) = spec else { continue };
        // A name with regex characters (`f.part.0`) is matched whole as a regex.
        let pattern = if name.contains(crate::filter::REGEX_CHARS) {
            format!("^{}$", regex::escape(&name))
        } else {
            name
        };
        if !args.is_empty() {
            a.push(format!("{pattern}@{args}"));
        }
        if let Some(ret) = ret {
            r.push(format!("{pattern}@{ret}"));
        }
    }
    let functions = a.len().max(r.len());
    if functions > MAX_AUTO {
        return Err(usage(
            format!(
                "-a: {functions} functions have DWARF types (at most {MAX_AUTO}: uftrace's \
                 replay matches each spec against every symbol)"
            ),
            "name the functions with -A FUNC@arg1,… and -R FUNC@retval (regular expressions \
             as -F)",
        ));
    }
    let enums = (enums.into_iter())
        .map(|(name, vals)| {
            let vals: Vec<String> = vals.iter().map(|(n, v)| format!("{n} = {v}")).collect();
            format!("enum {name} {{ {} }}", vals.join(", "))
        })
        .collect();
    Ok((a, r, enums))
}

/// Each function's size, by the address `Names` gives it (the same sources, read once).
pub fn sizes(
    read: &crate::symbol_source::ReadOnce,
    program: Option<(&qemu_uftrace_symbols::Image, Option<u64>)>,
) -> HashMap<Addr, u64> {
    let mut sizes = HashMap::new();
    for image in read.images() {
        for f in &image.functions {
            // Another source of the same function may know its size where this one does
            // not (the kernel image's kallsyms beside its -dbg vmlinux).
            let size = sizes.entry(Addr::At(f.addr)).or_insert(0);
            if *size == 0 {
                *size = f.size;
            }
        }
    }
    if let Some((image, pie_entry)) = program {
        for f in &image.functions {
            let a = match pie_entry {
                Some(_) => Addr::Pie(f.addr),
                None => Addr::At(f.addr),
            };
            sizes.insert(a, f.size);
        }
    }
    sizes
}

/// Folds the carrier records of every task file in `dir` into their records (the `more`
/// bit and the payload after), each file rewritten in place.
pub fn fold_all(dir: &Path) -> Result<Folded> {
    let mut total = Folded::default();
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "dat"))
        .collect();
    for path in files {
        use std::io::Seek;
        let mut input = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // Only from the first carrier on (a file without any stays as it is): a boot's
        // files hold hundreds of MB.
        let Some(first) =
            first_carrier(&mut input).with_context(|| format!("cannot read {}", path.display()))?
        else {
            continue;
        };
        // From the record before it: the arguments attach to their ENTRY.
        let first = first.saturating_sub(qemu_uftrace_format::record::RECORD_SIZE as u64);
        // In place: the folded records never take more room than the carriers they read
        // (a payload is smaller than its carriers), so writing behind the reader overwrites
        // nothing unread, and no new pages are taken (this VM's balloon made a fresh copy
        // of a boot's 245 MB cost a third of a second).
        input.seek(std::io::SeekFrom::Start(first))?;
        let writer = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut out = std::io::BufWriter::with_capacity(
            1 << 20,
            At {
                file: &writer,
                at: first,
            },
        );
        let done = fargs::fold(input, &mut out)
            .and_then(|d| std::io::Write::flush(&mut out).map(|_| d))
            .with_context(|| format!("cannot fold the arguments of {}", path.display()))?;
        let end = out.get_ref().at;
        drop(out);
        writer
            .set_len(end)
            .with_context(|| format!("cannot cut {}", path.display()))?;
        total.args += done.args;
        total.retvals += done.retvals;
        total.dropped += done.dropped;
    }
    Ok(total)
}

/// Writes at a moving offset of a file (`pwrite`), apart from any reader's.
struct At<'f> {
    file: &'f std::fs::File,
    at: u64,
}

impl std::io::Write for At<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let n = self.file.write_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The offset of the first carrier record in a task file, if any.
fn first_carrier(f: &mut std::fs::File) -> std::io::Result<Option<u64>> {
    use std::io::Read;
    let rec = qemu_uftrace_format::record::RECORD_SIZE;
    let mut buf = vec![0u8; 8 << 20];
    let (mut have, mut base) = (0usize, 0u64);
    loop {
        let n = f.read(&mut buf[have..])?;
        if n == 0 {
            return Ok(None);
        }
        have += n;
        let whole = have - have % rec;
        for (i, r) in buf[..whole].chunks_exact(rec).enumerate() {
            let word = u64::from_le_bytes(r[8..16].try_into().unwrap_or_default());
            if word & 3 == 3 && fargs::is_carrier(word >> 16) {
                return Ok(Some(base + (i * rec) as u64));
            }
        }
        buf.copy_within(whole..have, 0);
        have -= whole;
        base += whole as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> (Names, HashMap<Addr, u64>) {
        let names = Names {
            functions: [("add", 0x10), ("greet", 0x20), ("add_all", 0x30)]
                .iter()
                .map(|&(n, a)| (n.to_string(), Addr::At(a)))
                .collect(),
            sources: 1,
            pie_entry: None,
        };
        let sizes = [
            (Addr::At(0x10), 8),
            (Addr::At(0x20), 0),
            (Addr::At(0x30), 16),
        ]
        .into_iter()
        .collect();
        (names, sizes)
    }

    /// In place, over several MiB (the reader's and the writer's buffers apart): the same
    /// bytes as a fold into a fresh buffer.
    #[test]
    fn folding_in_place_equals_folding_into_a_copy() {
        use qemu_uftrace_format::record::{encode, RecordType};
        let mut data = Vec::new();
        for i in 0..400_000u64 {
            data.extend(encode(i, RecordType::Entry, 0, 0x1000 + i % 7));
            if i % 3 == 0 {
                let payload = (i as u32).to_le_bytes().repeat(1 + (i % 5) as usize);
                for id in fargs::carriers(false, 0x1000 + i % 7, &payload) {
                    data.extend(fargs::carrier_record(i, id));
                }
            }
            data.extend(encode(i, RecordType::Exit, 0, 0x1000 + i % 7));
        }
        let mut want = Vec::new();
        let folded = fargs::fold(&data[..], &mut want).unwrap();
        assert_eq!(folded.dropped, 0);
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("1.dat"), &data).unwrap();
        let done = fold_all(tmp.path()).unwrap();
        assert_eq!(done, folded);
        assert!(std::fs::read(tmp.path().join("1.dat")).unwrap() == want);
    }

    /// A syscall wrapper's arguments are read from its `struct pt_regs`; without its
    /// layout, one line.
    #[test]
    fn syscall_wrappers_read_their_pt_regs() {
        let (mut n, s) = names();
        n.functions
            .push(("__arm64_sys_openat".to_string(), Addr::At(0x50)));
        let a = ["__arm64_sys_openat@arg1/i32,arg2/s".to_string()];
        let mut specs = ArgSpecs::resolve(&a, &[], &n, &s, Arch::Aarch64).unwrap();
        let mut without = specs.clone();
        specs
            .read_syscalls(&n, Arch::Aarch64, Some([0, 8, 16, 24, 32, 40]))
            .unwrap();
        assert_eq!(specs.plugin_list(), "A 50 0 1:4:0,2:s:8 -\n");
        let e = without
            .read_syscalls(&n, Arch::Aarch64, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("struct pt_regs is not known"), "{e}");
        // Another architecture's wrapper name is a function like any other.
        let mut other = ArgSpecs::resolve(&a, &[], &n, &s, Arch::X86_64).unwrap();
        other.read_syscalls(&n, Arch::X86_64, None).unwrap();
        assert_eq!(other.plugin_list(), "A 50 0 1:4,2:s -\n");
    }

    #[test]
    fn specs_resolve_and_merge_as_uftrace_replays_them() {
        let (n, s) = names();
        let a = ["^add@arg1/x".to_string(), "add@arg1/i32,arg2".to_string()];
        let r = ["add@retval".to_string()];
        let specs = ArgSpecs::resolve(&a, &r, &n, &s, Arch::X86_64).unwrap();
        assert_eq!(specs.plugin_list(), "A 10 18 1:4,2:8 8\nA 30 40 1:8 -\n");
        let e = ArgSpecs::resolve(&[], &["greet@retval".into()], &n, &s, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("do not say where greet ends"), "{e}");
        let e = ArgSpecs::resolve(&["gret@arg1".into()], &[], &n, &s, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean greet"), "{e}");
        let e = ArgSpecs::resolve(&["add@arg7".into()], &[], &n, &s, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("stack"), "{e}");
        assert!(ArgSpecs::resolve(&["add@arg7".into()], &[], &n, &s, Arch::Aarch64).is_ok());
    }
}
