//! System mode, Linux: the kernel points where modules load and go, and where the fields read
//! there are (`mod_watch=LOAD:FREE,mod_offsets=…`, given with `proc_watch=`), for
//! `handlers::modules`.

/// `do_init_module` and `free_module`'s entry addresses, and the struct offsets read there:
/// `module.name`, `module.kallsyms`, `mod_kallsyms.{symtab,num_symtab,strtab}`, and the text
/// of the module's core and init layouts (`module.core_layout.base`, `.text_size`, and the
/// same for `init_layout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModWatch {
    pub load: u64,
    pub free: u64,
    pub name: u64,
    pub kallsyms: u64,
    pub symtab: u64,
    pub num_symtab: u64,
    pub strtab: u64,
    pub core_base: u64,
    pub core_text: u64,
    pub init_base: u64,
    pub init_text: u64,
}

fn numbers<const N: usize>(key: &str, value: &str) -> Result<[u64; N], String> {
    let parts: Vec<u64> = value
        .split(':')
        .map(str::parse::<u64>)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{key}={value}: expected {N} numbers separated by ':'"))?;
    parts
        .try_into()
        .map_err(|_| format!("{key}={value}: expected {N} numbers separated by ':'"))
}

impl ModWatch {
    /// `watch` is `mod_watch=`'s value, `offsets` `mod_offsets=`'s.
    pub fn parse(watch: &str, offsets: &str) -> Result<ModWatch, String> {
        let [load, free] = numbers("mod_watch", watch)?;
        let o: [u64; 9] = numbers("mod_offsets", offsets)?;
        // Bounded like the other structure offsets: a wild one would read far off.
        if o.iter()
            .any(|&o| o >= qemu_uftrace_engine::tasks::MAX_TASK_NAME_OFFSET)
        {
            return Err(format!("mod_offsets={offsets}: expected byte offsets"));
        }
        let [name, kallsyms, symtab, num_symtab, strtab, core_base, core_text, init_base, init_text] =
            o;
        Ok(ModWatch {
            load,
            free,
            name,
            kallsyms,
            symtab,
            num_symtab,
            strtab,
            core_base,
            core_text,
            init_base,
            init_text,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_bounds() {
        let w = ModWatch::parse("10:20", "1:2:3:4:5:6:7:8:9").unwrap();
        assert_eq!((w.load, w.free, w.name, w.init_text), (10, 20, 1, 9));
        assert!(ModWatch::parse("10", "1:2:3:4:5:6:7:8:9").is_err());
        assert!(ModWatch::parse("10:20", "1:2:3").is_err());
        assert!(ModWatch::parse("10:20", "1:2:3:4:5:6:7:8:99999999999").is_err());
    }
}
