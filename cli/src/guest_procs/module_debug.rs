//! Kernel modules' debug files (issue 34): `--symbols` given a module (`dummy.ko`, a
//! relocatable ELF file with its DWARF, as a distribution's `-dbg` package has it under
//! `/usr/lib/debug/lib/modules/RELEASE/`) or a directory of them. A module's functions are
//! named from guest memory whatever is given ([`super::modules`]); its debug file adds
//! their source lines. Taken by the module's name (the file's, `-` read as `_` as the
//! kernel does), and used only where it has the loaded module's functions, each the same
//! size: another build's lines would be wrong lines shown as right. With `--sysroot`, the
//! root's own debug tree (`usr/lib/debug/lib/modules`, every release in it) is searched
//! too, after what `--symbols` gives: the first file of a module's name that fits it is used.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use qemu_uftrace_symbols::ModuleFunction;

use crate::symbol_source::SourceArg;

/// How deep a directory given is searched (`/usr/lib/debug/lib/modules/RELEASE/` holds
/// `kernel/drivers/net/dummy.ko`: five levels).
const MAX_DEPTH: usize = 12;

/// Where a guest root keeps its modules' debug files (a `-dbg` package's), one directory per
/// kernel release.
const ROOT_TREE: &str = "/usr/lib/debug/lib/modules";

/// The modules' debug files given, by module name: each name's candidates, in the order
/// they were given (named, then directories, then the sysroot's tree).
#[derive(Debug, Default)]
pub struct ModuleDebug {
    files: BTreeMap<String, Vec<PathBuf>>,
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
    /// returned. A directory is searched for `*.ko` files (symbolic links not followed), and
    /// so is `sysroot`'s debug tree where it has one.
    pub fn take(
        sources: Vec<SourceArg>,
        sysroot: Option<&Path>,
    ) -> Result<(Vec<SourceArg>, ModuleDebug)> {
        let mut debug = ModuleDebug::default();
        let mut rest = Vec::new();
        for s in sources {
            if s.path.is_dir() {
                let before = debug.count();
                debug.search(&s.path, 0).with_context(|| {
                    format!("{} {}: cannot search it", s.origin, s.path.display())
                })?;
                if debug.count() == before {
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
                debug.files.entry(name).or_default().push(s.path);
            } else {
                rest.push(s);
            }
        }
        // Inside the root, as the guest sees it: a root's absolute symlink (`usr/lib/debug`
        // → `/usr/lib/debug`) must not lead to the host's own tree.
        let tree = sysroot.and_then(|r| crate::contained::path(r, ROOT_TREE.as_bytes()).ok());
        if let Some(tree) = tree.filter(|t| t.is_dir()) {
            debug
                .search(&tree, 0)
                .with_context(|| format!("--sysroot's {}: cannot search it", tree.display()))?;
        }
        Ok((rest, debug))
    }

    /// Whether no module's debug file was given.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// How many files were found.
    fn count(&self) -> usize {
        self.files.values().map(Vec::len).sum()
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
                self.files.entry(name).or_default().push(path);
            }
        }
        Ok(())
    }

    /// One line for each module named one by one that `loaded` (the names of the modules
    /// the recording saw loaded) does not hold.
    pub fn never_loaded(&self, loaded: &[String]) -> Vec<String> {
        (self.named.iter())
            .filter(|n| !loaded.contains(n))
            .filter_map(|n| self.files.get(n)?.first())
            .map(|path| {
                format!(
                    "{}: the guest loaded no module of that name (the file's, `-` read as `_`) \
                     while it was watched: its lines are not used",
                    path.display()
                )
            })
            .collect()
    }

    /// The functions of module `name`'s debug file, where one was given: the first of its
    /// candidates that fits the module `loaded` (its functions: address, size, name).
    /// `Err`: one line saying why none is used (the first one's reason).
    pub fn functions(
        &self,
        name: &str,
        loaded: &[(u64, u64, String)],
    ) -> Option<Result<HashMap<String, ModuleFunction>, String>> {
        let mut first_why = None;
        for path in self.files.get(name)? {
            match fitting(path, name, loaded) {
                Ok(funcs) => return Some(Ok(funcs)),
                Err(why) => {
                    first_why.get_or_insert(why);
                }
            }
        }
        first_why.map(Err)
    }
}

/// The functions of `path`, a debug file of module `name`'s name, where it is the loaded
/// module's: it has some of its own functions, each the same size.
fn fitting(
    path: &Path,
    name: &str,
    loaded: &[(u64, u64, String)],
) -> Result<HashMap<String, ModuleFunction>, String> {
    let funcs = qemu_uftrace_symbols::module_functions(path)
        .map_err(|e| format!("{e}: no source lines for module {name}"))?;
    // Every module has these two (the module macros' aliases): they tell none apart.
    let own = |f: &String| !["init_module", "cleanup_module"].contains(&f.as_str());
    if !loaded
        .iter()
        .any(|(_, _, f)| own(f) && funcs.contains_key(f))
    {
        return Err(format!(
            "{} is not the debug file of the module {name} the guest loaded (it has none of \
             its functions): its lines are not used",
            path.display()
        ));
    }
    for (_, size, fname) in loaded {
        match funcs.get(fname) {
            Some(f) if f.size != *size && *size != 0 => {
                return Err(format!(
                    "{} is not the debug file of the module {name} the guest loaded ({fname} is \
                     {} bytes there, {size} in the guest): its lines are not used",
                    path.display(),
                    f.size
                ))
            }
            _ => {}
        }
    }
    Ok(funcs)
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

    /// A root's debug tree is searched inside the root: its absolute symlink to a host
    /// directory leads nowhere outside.
    #[test]
    fn a_sysroot_s_tree_is_searched_inside_it() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let host = tmp.path().join("host");
        let tree = host.join("usr/lib/debug/lib/modules/6.1/kernel");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("dummy.ko"), b"").unwrap();
        // The same tree as a root's own: found.
        let (_, debug) = ModuleDebug::take(Vec::new(), Some(&host)).unwrap();
        assert_eq!(debug.count(), 1);
        assert!(debug.files.contains_key("dummy"));
        // A root whose usr is an absolute link to the host's: nothing.
        let root = tmp.path().join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(host.join("usr"), root.join("usr")).unwrap();
        let (_, debug) = ModuleDebug::take(Vec::new(), Some(&root)).unwrap();
        assert_eq!(debug.count(), 0, "{debug:?}");
    }
}
