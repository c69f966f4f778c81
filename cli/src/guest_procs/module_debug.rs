//! Kernel modules' debug files (issue 34): `--symbols` given a module (`dummy.ko`, a
//! relocatable ELF file with its DWARF, as a distribution's `-dbg` package has it under
//! `/usr/lib/debug/lib/modules/RELEASE/`) or a directory of them. A module's functions are
//! named from guest memory whatever is given ([`super::modules`]); its debug file adds
//! their source lines. Taken by the module's name (the file's, `-` read as `_` as the
//! kernel does), and used only where it has the loaded module's functions, each the same
//! size: another build's lines would be wrong lines shown as right.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_symbols::ModuleFunction;

use crate::symbol_source::SourceArg;

/// How deep a directory given is searched (`/usr/lib/debug/lib/modules/RELEASE/` holds
/// `kernel/drivers/net/dummy.ko`: five levels).
const MAX_DEPTH: usize = 12;

/// The modules' debug files given, by module name.
#[derive(Debug, Default)]
pub struct ModuleDebug {
    files: BTreeMap<String, PathBuf>,
    /// Named one by one (not found in a directory): said when no such module was loaded.
    named: Vec<String>,
}

/// A module's name as the kernel has it: its file name less `.ko`, `-` as `_`.
fn module_name(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".ko")?;
    (!stem.is_empty()).then(|| stem.replace('-', "_"))
}

impl ModuleDebug {
    /// Takes the modules and directories out of `--symbols`' sources; the rest are
    /// returned. A directory is searched for `*.ko` files (symbolic links not followed).
    pub fn take(sources: Vec<SourceArg>) -> Result<(Vec<SourceArg>, ModuleDebug)> {
        let mut debug = ModuleDebug::default();
        let mut rest = Vec::new();
        for s in sources {
            if s.path.is_dir() {
                let before = debug.files.len();
                debug.search(&s.path, 0).with_context(|| {
                    format!("{} {}: cannot search it", s.origin, s.path.display())
                })?;
                if debug.files.len() == before {
                    return Err(crate::errors::usage(
                        format!(
                            "{} {}: a directory, and no kernel module's debug file (NAME.ko) \
                             is in it",
                            s.origin,
                            s.path.display()
                        ),
                        "give a directory of modules' debug files (a -dbg package's \
                         /usr/lib/debug/lib/modules/RELEASE), or a symbol file",
                    ));
                }
            } else if s.path.extension().is_some_and(|e| e == "ko")
                && qemu_uftrace_symbols::is_relocatable(&s.path)
            {
                let name = module_name(&s.path).unwrap_or_default();
                debug.named.push(name.clone());
                debug.files.insert(name, s.path);
            } else {
                rest.push(s);
            }
        }
        Ok((rest, debug))
    }

    fn search(&mut self, dir: &Path, depth: usize) -> std::io::Result<()> {
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<std::io::Result<_>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let kind = e.file_type()?;
            let path = e.path();
            if kind.is_dir() {
                self.search(&path, depth + 1)?;
            } else if let (true, Some(name)) = (kind.is_file(), module_name(&path)) {
                self.files.entry(name).or_insert(path);
            }
        }
        Ok(())
    }

    /// The modules named one by one that `loaded` (module names) does not hold.
    pub fn never_loaded<'a>(&'a self, loaded: &[&str]) -> Vec<&'a Path> {
        (self.named.iter())
            .filter(|n| !loaded.contains(&n.as_str()))
            .filter_map(|n| self.files.get(n).map(PathBuf::as_path))
            .collect()
    }

    /// The functions of module `name`'s debug file, where one was given; `Err`: one line
    /// saying why it is not used.
    pub fn functions(
        &self,
        name: &str,
        loaded: &[(u64, u64, String)],
    ) -> Option<Result<HashMap<String, ModuleFunction>, String>> {
        let path = self.files.get(name)?;
        let funcs = match qemu_uftrace_symbols::module_functions(path) {
            Ok(f) => f,
            Err(e) => return Some(Err(format!("{e}: no source lines for module {name}"))),
        };
        // Every module has these two (the module macros' aliases): they tell none apart.
        let own = |f: &String| !["init_module", "cleanup_module"].contains(&f.as_str());
        if !loaded
            .iter()
            .any(|(_, _, f)| own(f) && funcs.contains_key(f))
        {
            return Some(Err(format!(
                "{} is not the debug file of the module {name} the guest loaded (it has none \
                 of its functions): its lines are not used",
                path.display()
            )));
        }
        for (_, size, fname) in loaded {
            match funcs.get(fname) {
                Some(f) if f.size != *size && *size != 0 => {
                    return Some(Err(format!(
                        "{} is not the debug file of the module {name} the guest loaded \
                         ({fname} is {} bytes there, {size} in the guest): its lines are not \
                         used",
                        path.display(),
                        f.size
                    )))
                }
                _ => {}
            }
        }
        Some(Ok(funcs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_the_kernel_has_them() {
        assert_eq!(
            module_name(Path::new("a/snd-hda-intel.ko")).as_deref(),
            Some("snd_hda_intel")
        );
        assert_eq!(module_name(Path::new("dummy.ko.xz")), None);
        assert_eq!(module_name(Path::new(".ko")), None);
    }
}
