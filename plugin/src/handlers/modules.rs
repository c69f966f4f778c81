//! System mode, Linux guest: which kernel module's code is where, for the CLI to name its
//! functions (issue 34). Rides on the process watch (`procmaps`): two more kernel functions
//! watched at their first instruction, their lines kept in the same `plugin.procs`.
//! - `do_init_module(mod)`: the module is placed and relocated, its init function not yet
//!   called. Its symbol table is then whole in guest memory (`mod->kallsyms`: every symbol,
//!   values already relocated; after init the kernel keeps only the core ones) and read once:
//!   the functions in its core and init text.
//! - `free_module(mod)`: its ranges go (a later module may be placed there).
//! - At a switch on (`proc_walk`), the `modules` list where its head is known: those loaded
//!   while tracing was off, read as at their load (after init `mod->kallsyms` keeps the
//!   core symbols: its functions).
//!
//! Lines (tab-separated, addresses in hex):
//! `module time=T name=N core=A core_text=L init=A init_text=L symbols=K`, then K lines
//! `msym addr=A size=S name=NAME`; `unload time=T name=N core=A init=A`.
//! They carry no `tid=`, so the process reader passes them over.

use std::collections::HashSet;
use std::ffi::{c_uint, c_void};
use std::sync::Mutex;

use crate::state::config::ModWatch;
use crate::state::guest::ByteBuf;

/// `struct module.name`'s length (`MODULE_NAME_LEN`, 64 − sizeof(unsigned long)).
const NAME_LEN: usize = 56;
/// Symbols read at most from one module (Debian's largest have a few thousand).
const MAX_SYMBOLS: u64 = 1 << 17;
/// `sizeof(Elf64_Sym)`.
const SYM_SIZE: usize = 24;
/// Bytes of a symbol's name read at most.
const MAX_NAME: usize = 255;
/// Modules read at most by one walk of the list (Debian's boot loads ~100).
const MAX_MODULES: usize = 1 << 12;

/// Modules told to `plugin.procs`, by [`key`] (a load adds, a free takes away): a walk at a
/// switch on tells only the others. At most [`MAX_MODULES`] after a walk.
static TOLD: Mutex<Option<HashSet<u64>>> = Mutex::new(None);

fn told(f: impl FnOnce(&mut HashSet<u64>) -> bool) -> bool {
    f(TOLD
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new))
}

/// Borrowed, not copied: the translator asks for every instruction it translates.
fn watch() -> Option<&'static ModWatch> {
    crate::state::config()?.mod_watch.as_deref()
}

#[derive(Clone, Copy)]
enum Point {
    Load = 1,
    Free = 2,
}

/// Called by the process watch's translator hook for each instruction: registers the
/// callback on a watched one.
///
/// # Safety
/// `insn` is a live instruction handle of the block being translated.
pub unsafe fn instrument(insn: *mut crate::ffi::qemu_plugin_insn, pc: u64) {
    let Some(w) = watch() else {
        return;
    };
    let point = if pc == w.load {
        Point::Load
    } else if pc == w.free {
        Point::Free
    } else {
        return;
    };
    unsafe {
        crate::ffi::qemu_plugin_register_vcpu_insn_exec_cb(
            insn,
            on_module,
            crate::ffi::CB_R_REGS,
            point as usize as *mut c_void,
        )
    };
}

/// # Safety
/// Registered with R_REGS by [`instrument`]; `data` is the [`Point`].
unsafe extern "C" fn on_module(vcpu_index: c_uint, data: *mut c_void) {
    let point = data as usize;
    crate::state::guard("the kernel-module watch", || {
        let Some(w) = watch() else {
            return;
        };
        crate::vcpu::with(vcpu_index, |v| {
            let time = v.now();
            let regs = &mut v.regs;
            let Some(module) = super::procmaps::first_argument(regs) else {
                return;
            };
            let text = if point == Point::Load as usize {
                loaded(regs, module, w, time)
            } else {
                freed(regs, module, w, time)
            };
            if let Some(k) = key(regs, module, w) {
                let load = point == Point::Load as usize;
                told(|t| if load { t.insert(k) } else { t.remove(&k) });
            }
            if let Some(text) = text {
                super::procmaps::keep(text);
            }
        });
    });
}

/// At a switch on: the modules on the kernel's list not told yet (loaded while tracing was
/// off), each as at its load, at `time`. Returns false where the list could not be read
/// whole (past [`MAX_MODULES`], or a link unreadable); true where read, or not known.
pub fn walk_loaded(regs: &mut ByteBuf, time: u64) -> bool {
    let Some(w) = watch().filter(|w| w.modules != 0) else {
        return true;
    };
    let head = crate::state::kaslr::SHIFT.to_guest(w.modules);
    let (nodes, whole) = qemu_uftrace_engine::linux_walk::ring(regs, head, MAX_MODULES + 1);
    let mut text = String::new();
    let mut current = HashSet::new();
    // The head is the list's, no module's.
    for at in nodes.into_iter().skip(1) {
        let module = at.wrapping_sub(w.list);
        let Some(k) = key(regs, module, w) else {
            continue;
        };
        current.insert(k);
        if !told(|t| t.contains(&k)) {
            if let Some(lines) = loaded(regs, module, w, time) {
                text += &lines;
            }
        }
    }
    // Those on the list now are the ones told: a module freed while off leaves the set.
    if whole {
        *TOLD.lock().unwrap_or_else(|e| e.into_inner()) = Some(current);
    }
    if !text.is_empty() {
        super::procmaps::keep(text);
    }
    whole
}

/// What tells a module from another: its core base and its name (a module loaded while off
/// where one unloaded then was is another).
fn key(regs: &mut ByteBuf, module: u64, w: &ModWatch) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let core = regs.read_le(module.wrapping_add(w.core_base), 8)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    regs.read_memory(module.wrapping_add(w.name), NAME_LEN)?
        .hash(&mut h);
    core.hash(&mut h);
    Some(h.finish())
}

/// A module's name and the base and text size of its core and init layouts.
struct Layout {
    name: String,
    core: u64,
    core_text: u64,
    init: u64,
    init_text: u64,
}

fn layout(regs: &mut ByteBuf, module: u64, w: &ModWatch) -> Option<Layout> {
    let name = regs.read_memory(module.wrapping_add(w.name), NAME_LEN)?;
    let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(NAME_LEN)];
    let name = qemu_uftrace_format::text::escape_bytes(name);
    Some(Layout {
        name,
        core: regs.read_le(module.wrapping_add(w.core_base), 8)?,
        core_text: regs.read_le(module.wrapping_add(w.core_text), 4)?,
        init: regs
            .read_le(module.wrapping_add(w.init_base), 8)
            .unwrap_or(0),
        init_text: regs
            .read_le(module.wrapping_add(w.init_text), 4)
            .unwrap_or(0),
    })
}

fn loaded(regs: &mut ByteBuf, module: u64, w: &ModWatch, time: u64) -> Option<String> {
    let l = layout(regs, module, w)?;
    let in_text = |a: u64| {
        (a >= l.core && a - l.core < l.core_text) || (a >= l.init && a - l.init < l.init_text)
    };
    let mut symbols = String::new();
    let mut count = 0usize;
    if let Some(kallsyms) = regs.read_le(module.wrapping_add(w.kallsyms), 8) {
        let table = (|| {
            Some((
                regs.read_le(kallsyms.wrapping_add(w.symtab), 8)?,
                regs.read_le(kallsyms.wrapping_add(w.num_symtab), 4)?,
                regs.read_le(kallsyms.wrapping_add(w.strtab), 8)?,
            ))
        })();
        if let Some((symtab, num, strtab)) = table.filter(|t| t.0 != 0 && t.2 != 0) {
            for i in 0..num.min(MAX_SYMBOLS) {
                let Some(sym) =
                    regs.read_memory(symtab.wrapping_add(i * SYM_SIZE as u64), SYM_SIZE)
                else {
                    break;
                };
                let word = |at: usize, n: usize| {
                    let mut b = [0u8; 8];
                    b[..n].copy_from_slice(&sym[at..at + n]);
                    u64::from_le_bytes(b)
                };
                let (st_name, info, shndx) = (word(0, 4), sym[4], word(6, 2));
                let (value, size) = (word(8, 8), word(16, 8));
                // Defined code (FUNC or NOTYPE: assembly), not a section or file name.
                if shndx == 0 || !matches!(info & 0xf, 0 | 2) || !in_text(value) {
                    continue;
                }
                let Some(name) = regs.read_c_string(strtab.wrapping_add(st_name), MAX_NAME) else {
                    continue;
                };
                // Mapping symbols (`$x`, `$d`) and local labels name no function.
                if name.is_empty() || name[0] == b'$' || name.starts_with(b".L") {
                    continue;
                }
                let name = qemu_uftrace_format::text::escape_bytes(&name);
                symbols.push_str(&format!(
                    "msym\taddr={value:x}\tsize={size:x}\tname={name}\n"
                ));
                count += 1;
            }
        }
    }
    Some(format!(
        "module\ttime={time}\tname={}\tcore={:x}\tcore_text={:x}\tinit={:x}\tinit_text={:x}\
         \tsymbols={count}\n{symbols}",
        l.name, l.core, l.core_text, l.init, l.init_text
    ))
}

fn freed(regs: &mut ByteBuf, module: u64, w: &ModWatch, time: u64) -> Option<String> {
    let l = layout(regs, module, w)?;
    Some(format!(
        "unload\ttime={time}\tname={}\tcore={:x}\tinit={:x}\n",
        l.name, l.core, l.init
    ))
}
