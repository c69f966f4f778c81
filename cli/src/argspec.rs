//! `-A/--argument SPEC` and `-R/--retval SPEC` (uftrace's): each SPEC parsed as uftrace
//! parses it (`format::args`), its FUNC resolved as `-F`'s is (a whole name, or a regular
//! expression matched anywhere), the values of each function merged as uftrace's replay
//! merges them, so that the payload the plugin writes is the one replay reads back by the
//! same specs (kept as typed in `info`). The plugin gets the list in a file
//! (`args_file=`, `state::args`); after the run its carrier records are folded into the
//! records they belong to (`fold_all`).

use std::collections::{HashMap, HashSet};
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
    /// User mode: the shared libraries `Addr::Lib` functions are in.
    pub libraries: Vec<crate::stop_at::Library>,
    /// System mode: the guest files `Addr::File` functions are in (`Names::guest_files`).
    pub guest_files: Vec<String>,
    /// Whose calling convention the values are read by.
    pub arch: Option<Arch>,
}

/// The index of `addr`'s entry in `funcs` (found through `at`), a new one of `size` where it
/// has none: one entry a function, whichever of `-A`, `-R` and `-a` names it first.
fn slot(
    funcs: &mut Vec<FuncValues>,
    at: &mut HashMap<Addr, usize>,
    addr: Addr,
    size: u64,
) -> usize {
    *at.entry(addr).or_insert_with(|| {
        funcs.push(FuncValues {
            addr,
            size,
            values: Vec::new(),
            pt_regs: None,
        });
        funcs.len() - 1
    })
}

/// A spec as uftrace's replay reads it from `info`: a guest file's `PATH:FUNC@…` as
/// `FUNC@…`, by the name its functions have in the trace.
fn for_replay(spec: &str) -> String {
    match crate::stop_at::guest_function(spec) {
        Some((_, func)) => func.to_string(),
        None => spec.to_string(),
    }
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
                argspec: argument.iter().map(|s| for_replay(s)).collect(),
                retspec: retval.iter().map(|s| for_replay(s)).collect(),
                ..InfoSpec::default()
            },
            funcs: Vec::new(),
            libraries: names.libraries.clone(),
            guest_files: names.guest_files.clone(),
            arch: Some(arch),
        };
        if argument.is_empty() && retval.is_empty() {
            return Ok(specs);
        }
        let mut exacts: HashMap<Addr, Vec<bool>> = HashMap::new();
        let mut at: HashMap<Addr, usize> = HashMap::new();
        let given = (argument.iter().map(|s| ("-A", s))).chain(retval.iter().map(|s| ("-R", s)));
        for (option, text) in given {
            let spec = fargs::parse(text, fargs::MAX_ARG).map_err(|e| {
                usage(
                    format!("{option} {e}"),
                    "write it as uftrace does: FUNC@arg1/s,arg2/x32 or FUNC@retval/d",
                )
            })?;
            // A guest file's FUNC alone may be a regular expression (a path has dots).
            let func =
                crate::stop_at::guest_function(&spec.pattern).map_or(&*spec.pattern, |g| g.1);
            let exact = !func.contains(crate::filter::REGEX_CHARS);
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
                let i = slot(&mut specs.funcs, &mut at, addr, size);
                let ex = exacts.entry(addr).or_default();
                for v in &spec.values {
                    fargs::merge_exact(&mut specs.funcs[i].values, ex, *v, exact);
                }
                // uftrace keeps an integer and a floating-point return value side by
                // side and shows both; one return has one value.
                let values = &specs.funcs[i].values;
                let kinds = values.iter().filter(|v| v.is_retval());
                if kinds.map(Value::is_float).collect::<HashSet<_>>().len() > 1 {
                    return Err(usage(
                        format!(
                            "{option} {text}: a function given both an integer and a \
                             floating-point return value"
                        ),
                        "keep one of retval/f and retval/d for it",
                    ));
                }
            }
        }
        specs.funcs.sort_by_key(|f| f.addr);
        Ok(specs)
    }

    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// Adds `-a`'s values (`auto`), merged with the explicit ones as uftrace's replay merges
    /// them ([`merge_auto`]), with each function's size from `sizes` (a return value needs
    /// it: without one it is left out). Returns the functions that keep values of `-a`'s,
    /// as the `.dbg` files must give them (replay's values are those the records carry).
    pub fn add_auto(&mut self, auto: Auto, sizes: &HashMap<Addr, u64>) -> Vec<AutoFunc> {
        let mut at: HashMap<Addr, usize> = (self.funcs.iter().enumerate())
            .map(|(i, f)| (f.addr, i))
            .collect();
        let mut kept = Vec::new();
        for mut f in auto.funcs {
            let size = sizes.get(&f.addr).copied().unwrap_or(0);
            if size == 0 {
                f.values.1 = None;
            }
            // A list replay could not parse gives nothing (it would not describe the records).
            let parsed = parse_auto(&f.values);
            if parsed.0.is_none() {
                f.values.0 = None;
            }
            if parsed.1.is_none() {
                f.values.1 = None;
            }
            if f.values.0.is_none() && f.values.1.is_none() {
                continue;
            }
            let i = slot(&mut self.funcs, &mut at, f.addr, size);
            let func = &mut self.funcs[i];
            func.values = merge_auto(std::mem::take(&mut func.values), parsed);
            if func.size == 0 {
                func.size = size;
            }
            kept.push(f);
        }
        self.funcs.sort_by_key(|f| f.addr);
        self.info.auto |= !kept.is_empty();
        for e in auto.enums {
            if !self.info.enums.contains(&e) {
                self.info.enums.push(e);
            }
        }
        kept
    }

    /// Where argument `idx` is at the function's first instruction when the registers do
    /// not hold it: its stack slot's offset from the stack pointer (x86_64: past the return
    /// address the call pushed; aarch64 and riscv64: the first slot at sp). One 8-byte
    /// slot an argument, as for every integer class argument of the three conventions.
    fn stack_offset(&self, idx: u8) -> Option<u64> {
        let arch = self.arch?;
        let past = idx.checked_sub(max_register_arg(arch)).filter(|&n| n > 0)?;
        let slot = 8 * u64::from(past - 1);
        Some(match arch {
            Arch::X86_64 => 8 + slot,
            Arch::Aarch64 | Arch::Riscv64 => slot,
        })
    }

    /// The plugin's list (`state::args`): one line a function.
    pub fn plugin_list(&self) -> String {
        let mut out = String::new();
        for f in &self.funcs {
            let (place, addr) = match f.addr {
                Addr::At(a) => ("A".to_string(), a),
                Addr::Pie(a) => ("P".to_string(), a),
                Addr::Lib(i, a) => match self.libraries.get(i as usize) {
                    Some(l) => (format!("L {:x} {:x}", l.dev, l.ino), a),
                    None => continue,
                },
                // A guest file's: its path (hex, as `file_aims`' options) and offset.
                Addr::File(i, a) => match self.guest_files.get(i as usize) {
                    Some(path) => (format!("F {}", crate::stop_at::hex_path(path)), a),
                    None => continue,
                },
            };
            let args: Vec<String> = (f.values.iter())
                .filter(|v| !v.is_retval())
                .filter_map(|v| match f.pt_regs {
                    // Floating-point registers hold the first eight (the most a spec
                    // names); no syscall takes one.
                    _ if v.is_float() => Some(format!("{}:{}", v.idx, v.plugin_word())),
                    // Read from memory at the first argument (the pt_regs) plus the offset
                    // (a syscall has six at most).
                    Some(at) => {
                        let off = at.get(usize::from(v.idx) - 1)?;
                        Some(format!("{}:{}:{off:x}", v.idx, v.plugin_word()))
                    }
                    None => match self.stack_offset(v.idx) {
                        Some(off) => Some(format!("{}:{}:sp+{off:x}", v.idx, v.plugin_word())),
                        None => Some(format!("{}:{}", v.idx, v.plugin_word())),
                    },
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
        let wrappers: HashMap<Addr, &str> = (names.functions.iter())
            .filter(|(n, _)| n.starts_with(prefix) && n.len() > prefix.len())
            .map(|(n, a)| (*a, n.as_str()))
            .collect();
        for f in &mut self.funcs {
            let Some(name) = wrappers.get(&f.addr) else {
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
        let found = syscall_types(&mut wrappers, files).map_err(|e| {
            usage(
                format!("-A {text}: {e}"),
                "give the kernel's -dbg vmlinux with --symbols",
            )
        })?;
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
            for (name, vals) in &s.enums {
                enums.entry(name.clone()).or_insert_with(|| vals.clone());
            }
            if let Some(values) = syscall_values(&s) {
                out.push(format!("{prefix}{}@{values}", s.name));
            }
        }
    }
    Ok((out, enum_lines(enums)))
}

/// The syscalls' own argument types for the kernel's syscall wrappers `wrappers` (each
/// `(entry address, syscall name)`, sorted and deduplicated here), from the DWARF of their
/// `__do_sys_NAME` in `files` (the kernel's ELF files); a syscall none of them types is
/// left out. Shared by a bare `-A WRAPPER` and `-a`: one way to type a wrapper.
fn syscall_types(
    wrappers: &mut Vec<(u64, String)>,
    files: &[PathBuf],
) -> std::result::Result<Vec<qemu_uftrace_symbols::AutoSpec>, String> {
    wrappers.sort();
    wrappers.dedup_by_key(|w| w.0);
    let mut found: Vec<qemu_uftrace_symbols::AutoSpec> = Vec::new();
    for path in files {
        let left: Vec<(u64, String)> = (wrappers.iter())
            .filter(|w| !found.iter().any(|s| s.addr == w.0))
            .cloned()
            .collect();
        if left.is_empty() {
            break;
        }
        found.extend(qemu_uftrace_symbols::syscall_specs(path, &left)?);
    }
    Ok(found)
}

/// A syscall's arguments as a spec's values (`arg1/i32,arg2/s`: at most six); `None` for
/// a syscall without arguments.
fn syscall_values(s: &qemu_uftrace_symbols::AutoSpec) -> Option<String> {
    let args: Vec<String> = (s.args.iter().take(6))
        .enumerate()
        .map(|(i, w)| format!("arg{}/{w}", i + 1))
        .collect();
    (!args.is_empty()).then(|| args.join(","))
}

/// A finished trace's `-A`/`-R` (its `info`), matched against function names as uftrace's
/// readers match them: which values a record with the `more` bit carries (`export`).
#[derive(Debug, Default)]
pub struct Lookup {
    /// Each spec's name matcher (a regular expression, or a whole name), its values, and
    /// whether it names functions whole.
    specs: Vec<(Option<Regex>, String, Vec<Value>)>,
    /// The enums `e:NAME` values are shown by (`info`'s `enumauto:`).
    pub enums: fargs::Enums,
    /// `-a` (`auto-args:1`): each function's values in its `.dbg` file too ([`merge_auto`]).
    pub auto: bool,
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
        Some(Lookup {
            specs,
            enums: fargs::Enums::parse(&spec.enums),
            auto: spec.auto,
        })
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

/// The most bytes a function's symbol may lie before its DWARF `low_pc`: the kernel's
/// patchable entries (arm64's `-fpatchable-function-entry=4,2`, riscv64's 2-byte NOPs) put
/// 8 bytes of NOPs after the symbol, and GCC's DWARF begins after them (Debian's arm64
/// vmlinux: 32 k of 37.6 k typed functions).
const ENTRY_PAD: u64 = 16;

/// Which functions `-a` takes: every typed one but those `-N` names (never recorded: `-N`
/// wins over `-F` in the recording too). `-F`'s callees are recorded, so they are taken too,
/// as `uftrace record -a -F` takes them.
#[derive(Debug, Clone, Default)]
pub struct Aim {
    notrace: HashSet<Addr>,
}

impl Aim {
    pub fn new(filters: &crate::filter::Filters) -> Aim {
        let mut aim = Aim::default();
        for p in filters.patterns.iter().filter(|p| p.option != "-F") {
            aim.notrace.extend(p.addrs.iter().copied());
        }
        aim
    }

    fn takes(&self, addr: Addr) -> bool {
        !self.notrace.contains(&addr)
    }
}

/// `enum NAME { A = 0, B = 5 }` for `info`, each enum once.
fn enum_lines(enums: std::collections::BTreeMap<String, Vec<(String, i64)>>) -> Vec<String> {
    (enums.into_iter())
        .map(|(name, vals)| {
            let vals: Vec<String> = vals.iter().map(|(n, v)| format!("{n} = {v}")).collect();
            format!("enum {name} {{ {} }}", vals.join(", "))
        })
        .collect()
}

/// `-a`'s values of one typed function, at its symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoFunc {
    pub addr: Addr,
    /// Its file (an index into [`auto_specs`]' `files`) and its offset from that file's
    /// image start (the key of the `.dbg` files' values: `symfiles::set_auto_values`).
    pub file: usize,
    pub offset: u64,
    /// Its arguments' values (`arg1/i32,arg2/s`) and its return value's (`retval/i64`).
    pub values: crate::symfiles::AutoValues,
}

/// `-a`: each typed function's values, and the enums they are shown by (`info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Auto {
    pub funcs: Vec<AutoFunc>,
    pub enums: Vec<String>,
}

/// Where a file's functions run: at their link addresses (a kernel, firmware), as a
/// user-mode program's (`pie`: moved with its bias), or where the guest maps a shared
/// library (its index in `Names::libraries`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Fixed,
    Program { pie: bool },
    Lib(u32),
}

impl Placed {
    /// The function at link address `at` of a file placed so.
    fn addr(self, at: u64) -> Addr {
        match self {
            Placed::Fixed | Placed::Program { pie: false } => Addr::At(at),
            Placed::Program { pie: true } => Addr::Pie(at),
            Placed::Lib(i) => Addr::Lib(i, at),
        }
    }
}

/// `-a/--auto-args`: the values of each function of `files` whose DWARF says its types, at
/// its symbol, that `aim` takes. The kernel's syscall wrappers get their syscall's arguments
/// (as a bare `-A WRAPPER` does), not the `struct pt_regs *` they take. `files`: ELF files
/// at their link addresses, each with where its functions run and the start of its image
/// at offset 0; a stripped one's types come from its debug file. uftrace reads them from
/// the `.dbg` files (`auto-args:1`), by address: every typed function, however many. A
/// shared library whose DWARF cannot be read is one line, and gets no values; those with
/// none (no debug file found) are named together in one line.
pub fn auto_specs(
    files: &[(PathBuf, Placed, u64)],
    names: &Names,
    aim: &Aim,
    arch: Arch,
) -> Result<Auto> {
    let mut typed = Vec::new();
    // Shared libraries without DWARF (no debug file found): said in one line.
    let mut untyped = Vec::new();
    for (path, placed, start) in files {
        let specs = match (qemu_uftrace_symbols::auto_specs(path), placed) {
            (Ok(specs), Placed::Lib(_)) if specs.is_empty() => {
                let name = path.file_name().unwrap_or(path.as_os_str());
                untyped.push(name.to_string_lossy().into_owned());
                specs
            }
            (Ok(specs), _) => specs,
            // Kept in place (a function's `file` is its index in `files`).
            (Err(e), Placed::Lib(_)) => {
                crate::errors::warn_early(format!("-a: {e}: its functions get no values"));
                Vec::new()
            }
            (Err(e), _) => {
                return Err(usage(
                    format!("-a: {e}"),
                    "give ELF files with DWARF (-g builds)",
                ))
            }
        };
        typed.push((specs, *placed, *start));
    }
    if !untyped.is_empty() {
        crate::errors::warn_early(format!(
            "-a: no DWARF types for {} (neither in the file nor in a debug file found by \
             its build ID; glibc's are in libc6-dbg): their functions get no values",
            untyped.join(", ")
        ));
    }
    let kernel: Vec<PathBuf> = (files
        .iter()
        .filter(|(_, placed, _)| *placed == Placed::Fixed))
    .map(|(p, _, _)| p.clone())
    .collect();
    auto_from(typed, names, aim, arch, |w| syscall_types(w, &kernel))
}

/// [`auto_specs`] of each file's typed functions (`typed`: with where they run and its
/// image start), the syscall wrappers typed by `syscall_types`.
fn auto_from(
    typed: Vec<(Vec<qemu_uftrace_symbols::AutoSpec>, Placed, u64)>,
    names: &Names,
    aim: &Aim,
    arch: Arch,
    syscall_types: impl FnOnce(
        &mut Vec<(u64, String)>,
    ) -> std::result::Result<Vec<qemu_uftrace_symbols::AutoSpec>, String>,
) -> Result<Auto> {
    let mut symbols: HashMap<&str, Vec<Addr>> = HashMap::new();
    for (n, a) in &names.functions {
        symbols.entry(n.as_str()).or_default().push(*a);
    }
    // Addresses with a symbol of a name of the source's own: an alias (`printf` of
    // `__printf`), never a compiler's clone (`foo.isra.0`, `foo.constprop.0`), whose
    // arguments are not the ones its DWARF origin declares.
    let aliased: HashSet<Addr> = (names.functions.iter())
        .filter(|(n, _)| !n.contains('.'))
        .map(|&(_, a)| a)
        .collect();
    // An address as (its image, where in it).
    let split = |a: Addr| match a {
        Addr::At(v) => ((0, 0), v),
        Addr::Pie(v) => ((1, 0), v),
        Addr::Lib(i, v) => ((2, i), v),
        Addr::File(i, v) => ((3, i), v),
    };
    // A DWARF function's symbol: of its name, at its low_pc or up to ENTRY_PAD before it.
    let symbol = |name: &str, low: Addr| -> Option<Addr> {
        let (image, low) = split(low);
        (symbols.get(name)?.iter().copied())
            .filter(|&a| {
                let (i, at) = split(a);
                i == image && at <= low && low - at <= ENTRY_PAD
            })
            .max_by_key(|&a| split(a).1)
    };
    let prefix = syscall_prefix(arch);
    let mut funcs: Vec<AutoFunc> = Vec::new();
    let mut taken: HashSet<Addr> = HashSet::new();
    // Each enum's first definition (by name), as uftrace keeps one a name.
    let mut enums: std::collections::BTreeMap<String, Vec<(String, i64)>> = Default::default();
    // Syscall wrappers: (address, syscall), and their places in `funcs`.
    let mut wrappers: Vec<(u64, String)> = Vec::new();
    let mut wrapper_at: HashMap<u64, usize> = HashMap::new();
    // The program's file and where it runs, and the libraries' typed functions by name.
    let program = (typed.iter().enumerate()).find_map(|(i, (_, placed, start))| {
        matches!(placed, Placed::Program { .. }).then_some((i, *placed, *start))
    });
    let mut in_libraries: Vec<(Addr, crate::symfiles::AutoValues)> = Vec::new();
    for (file, (specs, placed, start)) in typed.into_iter().enumerate() {
        for s in specs {
            let low = placed.addr(s.addr);
            // Else the symbol at its very address, of another name: a symbol table keeps
            // one name an address, and glibc's DWARF names `__printf` where it keeps `printf`.
            let at = symbol(&s.name, low).or_else(|| aliased.contains(&low).then_some(low));
            // The first DWARF description of a function wins (an alias, a second file).
            let Some(at) = at.filter(|&a| aim.takes(a) && taken.insert(a)) else {
                continue;
            };
            let syscall =
                (s.name.strip_prefix(prefix)).filter(|n| !n.is_empty() && placed == Placed::Fixed);
            let args = match (syscall, at) {
                // Its syscall's own, filled in below.
                (Some(syscall), Addr::At(a)) => {
                    wrappers.push((a, syscall.to_string()));
                    wrapper_at.insert(a, funcs.len());
                    None
                }
                _ => match auto_args(&s.args) {
                    Some(args) => {
                        for (name, vals) in &s.enums {
                            enums.entry(name.clone()).or_insert_with(|| vals.clone());
                        }
                        Some(args).filter(|a| !a.is_empty())
                    }
                    // More floating-point arguments than registers: no values.
                    None => continue,
                },
            };
            let values = (args, s.ret.as_ref().map(|w| format!("retval/{w}")));
            if matches!(placed, Placed::Lib(_)) {
                in_libraries.push((at, values.clone()));
            }
            funcs.push(AutoFunc {
                addr: at,
                file,
                offset: split(at).1.wrapping_sub(start),
                values,
            });
        }
    }
    // A program's call into a library is written at its PLT entry, named for the function
    // it jumps to (the function's own first instruction comes by that jump, in the same
    // frame): the entry gets the function's values, as uftrace's PLT hooks show them. A
    // symbol of the program's own of that name without types of its own is taken for one.
    // By each name of the function's address: glibc's DWARF names `__strtol`, the PLT
    // entry its alias `strtol`.
    if let Some((file, placed, start)) = program {
        let mut names_at: HashMap<Addr, Vec<&str>> = HashMap::new();
        for (n, a) in &names.functions {
            if matches!(a, Addr::Lib(..)) {
                names_at.entry(*a).or_default().push(n);
            }
        }
        let stubs_of = |name: &str| symbols.get(name).into_iter().flatten().copied();
        for (at, values) in in_libraries {
            let aliases = names_at.get(&at).into_iter().flatten();
            for stub in aliases.flat_map(|n| stubs_of(n)) {
                let (image, at) = split(stub);
                if image != split(placed.addr(0)).0 || !aim.takes(stub) || !taken.insert(stub) {
                    continue;
                }
                funcs.push(AutoFunc {
                    addr: stub,
                    file,
                    offset: at.wrapping_sub(start),
                    values: values.clone(),
                });
            }
        }
    }
    if !wrappers.is_empty() {
        let found = syscall_types(&mut wrappers)
            .map_err(|e| usage(format!("-a: {e}"), "give ELF files with DWARF (-g builds)"))?;
        // A wrapper whose syscall is not typed (or takes nothing) keeps no arguments: its
        // own is the pt_regs pointer, which the syscall's arg1 would be shown as.
        for s in found {
            if let (Some(&i), Some(values)) = (wrapper_at.get(&s.addr), syscall_values(&s)) {
                funcs[i].values.0 = Some(values);
                for (name, vals) in s.enums {
                    enums.entry(name).or_insert(vals);
                }
            }
        }
    }
    funcs.retain(|f| f.values.0.is_some() || f.values.1.is_some());
    Ok(Auto {
        funcs,
        enums: enum_lines(enums),
    })
}

/// A typed function's argument words (`i32`, `f64`, …) as spec values: the integer class
/// ones `argN` in their order (past the registers, from the stack: one slot each), the
/// floating-point ones `fpargN` in theirs, as each convention passes them. `None` past the
/// floating-point registers ([`fargs::MAX_FLOAT_ARG`]; those are on the stack, not read).
fn auto_args(words: &[String]) -> Option<String> {
    let (mut ints, mut floats) = (0u8, 0u8);
    let mut out = Vec::new();
    for w in words {
        if let Some(bits) = w.strip_prefix('f') {
            floats += 1;
            if floats > fargs::MAX_FLOAT_ARG {
                return None;
            }
            out.push(format!("fparg{floats}/f{bits}"));
        } else {
            ints += 1;
            if ints > fargs::MAX_ARG {
                break;
            }
            out.push(format!("arg{ints}/{w}"));
        }
    }
    Some(out.join(","))
}

/// One `-a` value list (`arg1/i32,arg2/s`) parsed as uftrace's replay parses it; `None` when
/// it does not parse (the function then gets none: its records must carry only what a spec
/// describes).
pub fn auto_values(values: &str) -> Option<Vec<Value>> {
    fargs::parse(&format!("f@{values}"), fargs::MAX_ARG)
        .ok()
        .map(|s| s.values)
}

/// One function's `-a` values (its arguments', its return value's), each parsed as replay
/// parses it ([`auto_values`]); `None` where there is none or it does not parse.
pub type ParsedAuto = (Option<Vec<Value>>, Option<Vec<Value>>);

/// [`ParsedAuto`] of `auto`.
pub fn parse_auto(auto: &crate::symfiles::AutoValues) -> ParsedAuto {
    (
        auto.0.as_deref().and_then(auto_values),
        auto.1.as_deref().and_then(auto_values),
    )
}

/// A function's values as uftrace's replay merges an explicit `-A`/`-R` (`explicit`, by
/// name) with `-a`'s (`auto`, from `.dbg`): explicit arguments take the place of all of
/// `-a`'s, an explicit return value of its return value (`filter.c`'s "ignore auto-args if
/// it already has argspec").
pub fn merge_auto(mut explicit: Vec<Value>, auto: ParsedAuto) -> Vec<Value> {
    let has_args = explicit.iter().any(|v| !v.is_retval());
    let has_ret = explicit.iter().any(Value::is_retval);
    if let (false, Some(a)) = (has_args, auto.0) {
        explicit.extend(a);
    }
    if let (false, Some(r)) = (has_ret, auto.1) {
        explicit.extend(r);
    }
    explicit
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
/// bit and the payload after), each file rewritten in place, the files over the cores
/// (largest first: a boot's boot-context file is a third of its trace).
pub fn fold_all(dir: &Path) -> Result<Folded> {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "dat"))
        .map(|e| (e.metadata().map_or(0, |m| m.len()), e.path()))
        .collect();
    files.sort_unstable_by(|a, b| b.cmp(a));
    let results = crate::cores::share(&files, |files| -> Result<Folded> {
        let mut total = Folded::default();
        for (len, path) in files {
            total += fold_file(path, *len)?;
        }
        Ok(total)
    });
    let mut total = Folded::default();
    for r in results {
        total +=
            r.unwrap_or_else(|_| Err(anyhow::anyhow!("a folder of the task files crashed")))?;
    }
    Ok(total)
}

/// [`fold_all`]'s work on one task file, `len` bytes long (as `fold_all` listed it: the
/// recording is over, nothing writes to it).
fn fold_file(path: &Path, len: u64) -> Result<Folded> {
    use std::io::Seek;
    let mut input =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // Only from the first carrier on (a file without any stays as it is): a boot's files
    // hold hundreds of MB.
    let Some(first) = first_carrier(&mut input, len)
        .with_context(|| format!("cannot read {}", path.display()))?
    else {
        return Ok(Folded::default());
    };
    // From the record before it: the arguments attach to their ENTRY.
    let first = first.saturating_sub(qemu_uftrace_format::record::RECORD_SIZE as u64);
    // In place: the folded records never take more room than the carriers they read (a
    // payload is smaller than its carriers), so writing behind the reader overwrites nothing
    // unread, and no new pages are taken (this VM's balloon made a fresh copy of a boot's
    // 245 MB cost a third of a second).
    input.seek(std::io::SeekFrom::Start(first))?;
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(
        1 << 20,
        At {
            file: &writer,
            at: first,
        },
    );
    let left = len.saturating_sub(first);
    let done = fargs::fold_sized(input, &mut out, left.min(4 << 20) as usize)
        .and_then(|d| std::io::Write::flush(&mut out).map(|_| d))
        .with_context(|| format!("cannot fold the arguments of {}", path.display()))?;
    let end = out.get_ref().at;
    drop(out);
    writer
        .set_len(end)
        .with_context(|| format!("cannot cut {}", path.display()))?;
    Ok(done)
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
fn first_carrier(f: &mut std::fs::File, len: u64) -> std::io::Result<Option<u64>> {
    use std::io::Read;
    let rec = qemu_uftrace_format::record::RECORD_SIZE;
    // As long as the file, up to 8 MiB: zeroing 8 MiB for each of a boot's ~80 task files
    // (most of a few KB) cost more than the fold.
    let size = (len.min(8 << 20) as usize).div_ceil(rec).max(1) * rec;
    let mut buf = vec![0u8; size];
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
    use qemu_uftrace_symbols::AutoSpec;

    fn names() -> (Names, HashMap<Addr, u64>) {
        let names = Names {
            functions: [("add", 0x10), ("greet", 0x20), ("add_all", 0x30)]
                .iter()
                .map(|&(n, a)| (n.to_string(), Addr::At(a)))
                .collect(),
            sources: 1,
            pie_entry: None,
            libraries: Vec::new(),
            ..Default::default()
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

    fn typed(name: &str, addr: u64, args: &[&str], ret: Option<&str>) -> AutoSpec {
        AutoSpec {
            addr,
            name: name.to_string(),
            args: args.iter().map(|a| a.to_string()).collect(),
            ret: ret.map(str::to_string),
            enums: Vec::new(),
        }
    }

    fn kernel_names() -> Names {
        Names {
            functions: [
                ("ext4_read", 0x100),
                ("ext4_write", 0x200),
                ("ext4_sync", 0x300),
                ("vfs_read", 0x400),
                ("__arm64_sys_openat", 0x500),
                ("__arm64_sys_getpid", 0x600),
            ]
            .iter()
            .map(|&(n, a)| (n.to_string(), Addr::At(a)))
            .collect(),
            sources: 1,
            pie_entry: None,
            libraries: Vec::new(),
            ..Default::default()
        }
    }

    /// User mode: a program's PLT entries take the values of the library functions they
    /// are named for, by any name of the function's address (glibc's DWARF says `__strtol`
    /// where its symbols say `strtol`); a function of the program's own with types keeps
    /// its own, and `-N` still leaves a PLT entry out.
    #[test]
    fn plt_entries_take_their_library_functions_values() {
        let lib = |n: &str, a: u64| (n.to_string(), Addr::Lib(0, a));
        let pie = |n: &str, a: u64| (n.to_string(), Addr::Pie(a));
        let names = Names {
            functions: vec![
                pie("main", 0x900),
                pie("getenv", 0x7a0),
                pie("strtol", 0x7b0),
                pie("free", 0x7c0),
                lib("getenv", 0x3db50),
                lib("strtol", 0x41000),
                lib("free", 0x42000),
                lib("helper.isra.0", 0x43000),
            ],
            sources: 1,
            pie_entry: None,
            libraries: Vec::new(),
            ..Default::default()
        };
        let typed = vec![
            (
                vec![typed("main", 0x900, &[], Some("i32"))],
                Placed::Program { pie: true },
                0x0,
            ),
            (
                vec![
                    typed("getenv", 0x3db50, &["s"], Some("s")),
                    typed("__strtol", 0x41000, &["s", "p", "i32"], Some("i64")),
                    typed("free", 0x42000, &["p"], None),
                    // A clone of `helper` (IPA-SRA may have changed its arguments).
                    typed("helper", 0x43000, &["p", "i32"], None),
                ],
                Placed::Lib(0),
                0x1000,
            ),
        ];
        let filters = crate::filter::Filters::resolve(&[], &["free".to_string()], &names).unwrap();
        let auto = auto_from(typed, &names, &Aim::new(&filters), Arch::Aarch64, |_| {
            Ok(Vec::new())
        })
        .unwrap();
        let got: Vec<(Addr, usize, u64, Option<&str>)> = (auto.funcs.iter())
            .map(|f| (f.addr, f.file, f.offset, f.values.0.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (Addr::Pie(0x900), 0, 0x900, None),
                (Addr::Lib(0, 0x3db50), 1, 0x3cb50, Some("arg1/s")),
                (
                    Addr::Lib(0, 0x41000),
                    1,
                    0x40000,
                    Some("arg1/s,arg2/p,arg3/i32")
                ),
                (Addr::Pie(0x7a0), 0, 0x7a0, Some("arg1/s")),
                (Addr::Pie(0x7b0), 0, 0x7b0, Some("arg1/s,arg2/p,arg3/i32")),
            ]
        );
    }

    /// The kernel's DWARF: each function's low_pc past its patchable entry (8 bytes after
    /// the symbol, as arm64's), `ext4_sync`'s too far past to be its symbol's.
    fn kernel_typed() -> Vec<(Vec<AutoSpec>, Placed, u64)> {
        let specs = vec![
            typed("ext4_read", 0x108, &["p", "u32"], Some("i64")),
            typed("ext4_write", 0x208, &["p", "s"], Some("i32")),
            typed("ext4_sync", 0x320, &["i32"], None),
            typed("vfs_read", 0x400, &["p"], Some("i64")),
            typed("__arm64_sys_openat", 0x508, &["p"], Some("i64")),
            typed("__arm64_sys_getpid", 0x608, &["p"], Some("i64")),
        ];
        vec![(specs, Placed::Fixed, 0x100)]
    }

    /// `-a` with the syscalls' own types: openat's, at its wrapper's symbol; none of getpid.
    fn auto(filter: &[&str], notrace: &[&str]) -> Result<Auto> {
        let n = kernel_names();
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let filters = crate::filter::Filters::resolve(&strings(filter), &strings(notrace), &n)?;
        auto_from(
            kernel_typed(),
            &n,
            &Aim::new(&filters),
            Arch::Aarch64,
            |wrappers| {
                assert!(wrappers.iter().all(|(a, _)| [0x500, 0x600].contains(a)));
                Ok((wrappers.iter().filter(|(_, s)| s == "openat"))
                    .map(|&(a, _)| typed("openat", a, &["i32", "s", "i32", "u16"], None))
                    .collect())
            },
        )
    }

    /// (address, arguments, return value) of each function `-a` gives values.
    fn listed(auto: &Auto) -> Vec<(u64, Option<&str>, Option<&str>)> {
        (auto.funcs.iter())
            .map(|f| match f.addr {
                Addr::At(a) => (a, f.values.0.as_deref(), f.values.1.as_deref()),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Every typed function, `-F`'s callees too (as `uftrace record -a -F`), less those `-N`
    /// leaves out; a DWARF function is its symbol's up to a patchable entry's NOPs past it;
    /// a syscall wrapper gets its syscall's arguments, not its `struct pt_regs *`, and one
    /// whose syscall is not typed only its return value.
    #[test]
    fn auto_args_take_every_typed_function_less_n() {
        let all = auto(&[], &[]).unwrap();
        assert_eq!(
            listed(&all),
            [
                (0x100, Some("arg1/p,arg2/u32"), Some("retval/i64")),
                (0x200, Some("arg1/p,arg2/s"), Some("retval/i32")),
                (0x400, Some("arg1/p"), Some("retval/i64")),
                (
                    0x500,
                    Some("arg1/i32,arg2/s,arg3/i32,arg4/u16"),
                    Some("retval/i64")
                ),
                (0x600, None, Some("retval/i64")),
            ]
        );
        // Each at its offset from its file's image start, for its `.dbg` file.
        assert_eq!(all.funcs[1].offset, 0x100);
        assert_eq!(auto(&["^ext4_read$"], &[]).unwrap(), all);
        let less = auto(&["ext4_.*"], &["ext4_write", "^__arm64"]).unwrap();
        assert_eq!(
            listed(&less),
            [
                (0x100, Some("arg1/p,arg2/u32"), Some("retval/i64")),
                (0x400, Some("arg1/p"), Some("retval/i64")),
            ]
        );
    }

    #[test]
    fn auto_args_number_floating_point_values_apart() {
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            auto_args(&w(&["f64", "f32", "i32", "s"])).as_deref(),
            Some("fparg1/f64,fparg2/f32,arg1/i32,arg2/s")
        );
        assert_eq!(auto_args(&w(&["f64"; 9])), None, "past the registers");
    }

    /// As uftrace's replay: an explicit -A takes a function's arguments from -a, an explicit
    /// -R its return value (a regular expression as well as a whole name); a function of
    /// unknown size keeps no return value of -a's; syscall wrappers read their pt_regs.
    #[test]
    fn explicit_specs_win_over_auto_args() {
        let n = kernel_names();
        let sizes = HashMap::from([
            (Addr::At(0x100), 0x40),
            (Addr::At(0x200), 0x40),
            (Addr::At(0x500), 0x40),
            (Addr::At(0x600), 0x20),
        ]);
        let given_a = ["ext4_read@arg1/x".to_string()];
        let given_r = ["^ext4_w@retval/d".to_string()];
        let mut specs = ArgSpecs::resolve(&given_a, &given_r, &n, &sizes, Arch::Aarch64).unwrap();
        let kept = specs.add_auto(auto(&[], &[]).unwrap(), &sizes);
        // vfs_read's size is not known: its arguments only, in the .dbg as in the records.
        let vfs = kept.iter().find(|f| f.addr == Addr::At(0x400)).unwrap();
        assert_eq!(vfs.values, (Some("arg1/p".into()), None));
        assert!(specs.info.auto);
        specs
            .read_syscalls(&n, Arch::Aarch64, Some([0, 8, 16, 24, 32, 40]))
            .unwrap();
        assert_eq!(
            specs.plugin_list(),
            "A 100 140 1:8 8\n\
             A 200 240 1:8,2:s 8\n\
             A 400 0 1:8 -\n\
             A 500 540 1:4:0,2:s:8,3:4:10,4:2:18 8\n\
             A 600 620 - 8\n"
        );
        // Replay's merge, as the export makes it from the `.dbg` values.
        let explicit = fargs::parse("ext4_read@arg1/x", 8).unwrap().values;
        let merged = merge_auto(
            explicit.clone(),
            parse_auto(&(Some("arg1/p,arg2/u32".into()), Some("retval/i64".into()))),
        );
        let mut want = explicit;
        want.extend(auto_values("retval/i64").unwrap());
        assert_eq!(merged, want);
    }

    /// No cap on how many functions -a takes: uftrace finds each one's values by its
    /// address in its `.dbg` file, not by matching one spec a function against every symbol.
    #[test]
    fn auto_args_take_any_number_of_functions() {
        let count = 40_000u64;
        let many: Vec<(String, u64)> = (0..count)
            .map(|i| (format!("f{i}"), 0x1000 + 0x10 * i))
            .collect();
        let names = Names {
            functions: (many.iter())
                .map(|(n, a)| (n.clone(), Addr::At(*a)))
                .collect(),
            sources: 1,
            pie_entry: None,
            libraries: Vec::new(),
            ..Default::default()
        };
        let typed = vec![(
            (many.iter())
                .map(|(n, a)| typed(n, *a, &["i32"], Some("i64")))
                .collect(),
            Placed::Fixed,
            0x1000,
        )];
        let auto = auto_from(typed, &names, &Aim::default(), Arch::X86_64, |_| {
            Ok(Vec::new())
        })
        .unwrap();
        let sizes: HashMap<Addr, u64> = (many.iter()).map(|(_, a)| (Addr::At(*a), 8)).collect();
        let mut specs = ArgSpecs::resolve(&[], &[], &names, &sizes, Arch::X86_64).unwrap();
        let kept = specs.add_auto(auto, &sizes);
        assert_eq!(kept.len() as u64, count);
        assert_eq!(specs.plugin_list().lines().count() as u64, count);
        assert_eq!(kept[7].offset, 0x70);
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
        // Past the registers: from the stack, x86_64's past the return address.
        let stack = |arch| {
            (ArgSpecs::resolve(&["add@arg7,arg9".into()], &[], &n, &s, arch).unwrap()).plugin_list()
        };
        assert_eq!(stack(Arch::X86_64), "A 10 18 7:8:sp+8,9:8:sp+18 -\n");
        assert_eq!(stack(Arch::Aarch64), "A 10 18 7:8,9:8:sp+0 -\n");
        let e = ArgSpecs::resolve(&["add@arg33".into()], &[], &n, &s, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most arg32"), "{e}");
        // Floating-point values: their own registers, never the stack's integer slots.
        let a = ["add@fparg1,arg7,fparg2/f32".to_string()];
        let r = ["add@retval/f".to_string()];
        let specs = ArgSpecs::resolve(&a, &r, &n, &s, Arch::X86_64).unwrap();
        assert_eq!(specs.plugin_list(), "A 10 18 1:f8,7:8:sp+8,2:f4 f8\n");
        let r = ["add@retval/f".to_string(), "add@retval/i".to_string()];
        let e = ArgSpecs::resolve(&[], &r, &n, &s, Arch::X86_64)
            .unwrap_err()
            .to_string();
        assert!(e.contains("both an integer and a floating-point"), "{e}");
    }
}
