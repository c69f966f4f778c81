//! Reading a system-mode command line the way QEMU does: its options and their values
//! (`options`), QEMU's `key=value,…` strings (`keyval`, `escape_keyval`) and JSON objects
//! (`json_fields`), and what a given option says (`last_option_key`, `memory`).

use std::ffi::OsString;

/// Options of qemu-system-* that take no argument (QEMU 9.2–10, plus a few older spellings);
/// every other option takes exactly one. Found by running each option of `-help` alone.
const FLAG_OPTIONS: &[&str] = &[
    "S",
    "alt-grab",
    "async-teardown",
    "ctrl-grab",
    "curses",
    "daemonize",
    "enable-kvm",
    "enable-sync-profile",
    "full-screen",
    "h",
    "help",
    "jitdump",
    "mem-prealloc",
    "no-acpi",
    "no-fd-bootchk",
    "no-frame",
    "no-hpet",
    "no-quit",
    "no-reboot",
    "no-shutdown",
    "no-user-config",
    "nodefaults",
    "nographic",
    "old-param",
    "one-insn-per-tb",
    "only-migratable",
    "perfmap",
    "portrait",
    "preconfig",
    "s",
    "sdl",
    "semihosting",
    "singlestep",
    "snapshot",
    "usb",
    "version",
    "win2k-hack",
    "xen-attach",
    "xen-domid-restrict",
];

/// One option of a system-mode command line, with QEMU's `--opt` spelling folded into `opt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuOption {
    pub name: String,
    pub value: Option<OsString>,
}

/// Splits a system-mode command line (without argv[0]) into options the way QEMU's
/// `lookup_opt` does: `-opt` or `--opt`, the value in the next word (QEMU has no
/// `-opt=value` form); a bare word is a disk image (`-hda`).
pub fn options(args: &[OsString]) -> Vec<QemuOption> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(word) = it.next() {
        let text = word.to_string_lossy();
        let Some(name) = text.strip_prefix('-').filter(|n| !n.is_empty()) else {
            out.push(QemuOption {
                name: "hda".into(),
                value: Some(word.clone()),
            });
            continue;
        };
        let name = name.strip_prefix('-').unwrap_or(name).to_string();
        let value = if FLAG_OPTIONS.contains(&name.as_str()) {
            None
        } else {
            it.next().cloned()
        };
        out.push(QemuOption { name, value });
    }
    out
}

/// Splits a QEMU `key=value,key=value` option string; `,,` is a literal comma. A first
/// element without `=` is returned under `implied_key` (`driver` for -device, `accel` for
/// -accel, `type` for -machine).
pub fn keyval(value: &str, implied_key: &str) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        if c == ',' {
            if chars.peek() == Some(&',') {
                chars.next();
                cur.push(',');
            } else {
                parts.push(std::mem::take(&mut cur));
            }
        } else {
            cur.push(c);
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .enumerate()
        .filter(|(_, p)| !p.is_empty())
        .map(|(i, p)| match p.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None if i == 0 => (implied_key.to_string(), p),
            // A bare flag (`,foo`) means `foo=on`.
            None => (p, "on".to_string()),
        })
        .collect()
}

/// Escapes a value for a QEMU option string: a comma is written twice.
pub fn escape_keyval(value: &str) -> String {
    value.replace(',', ",,")
}

/// The string and scalar fields of a flat JSON object (`-device {"driver":"loader",…}`),
/// enough for the generic loader's options; anything unparsable ends the scan.
pub fn json_fields(text: &str) -> Vec<(String, String)> {
    fn string(chars: &mut std::iter::Peekable<std::str::Chars>) -> Option<String> {
        let mut out = String::new();
        loop {
            match chars.next()? {
                '"' => return Some(out),
                '\\' => match chars.next()? {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'u' => {
                        let hex: String = chars.by_ref().take(4).collect();
                        out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => out.push(c),
                },
                c => out.push(c),
            }
        }
    }
    let mut out = Vec::new();
    let mut chars = text
        .trim()
        .strip_prefix('{')
        .unwrap_or("")
        .chars()
        .peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        if chars.next() != Some('"') {
            break;
        }
        let Some(key) = string(&mut chars) else { break };
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ':') {
            chars.next();
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            match string(&mut chars) {
                Some(v) => v,
                None => break,
            }
        } else {
            let mut v = String::new();
            while let Some(&c) = chars.peek() {
                if c == ',' || c == '}' || c.is_whitespace() {
                    break;
                }
                v.push(c);
                chars.next();
            }
            v
        };
        out.push((key, value));
    }
    out
}
/// The value of `key` in the last of the options named in `names` (QEMU keeps the last),
/// reading a bare first value as `implied` (`-m 1G` is `size=1G`, `-M virt` is `type=virt`).
pub fn last_option_key(
    opts: &[QemuOption],
    names: &[&str],
    implied: &str,
    key: &str,
) -> Option<String> {
    let value = opts
        .iter()
        .rev()
        .find(|o| names.contains(&o.name.as_str()))?
        .value
        .as_ref()?;
    keyval(&value.to_string_lossy(), implied)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// The guest memory size (`-m`), for the info file.
pub fn memory(opts: &[QemuOption]) -> Option<String> {
    last_option_key(opts, &["m"], "size", "size")
}
#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn options_skip_values_and_fold_double_dash() {
        let opts = options(&os(&[
            "-M",
            "virt",
            "-nographic",
            "--kernel",
            "Image",
            "-append",
            "-kernel not-this",
            "disk.img",
            "-S",
        ]));
        let names: Vec<&str> = opts.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["M", "nographic", "kernel", "append", "hda", "S"]);
        assert_eq!(opts[2].value.as_deref(), Some(OsStr::new("Image")));
        assert_eq!(opts[1].value, None);
    }

    #[test]
    fn option_missing_its_value_is_kept() {
        let opts = options(&os(&["-kernel"]));
        assert_eq!(
            opts,
            [QemuOption {
                name: "kernel".into(),
                value: None
            }]
        );
    }

    #[test]
    fn keyval_handles_implied_key_escapes_and_flags() {
        assert_eq!(
            keyval("loader,file=a,,b.elf,cpu-num=0,force-raw", "driver"),
            [
                ("driver".to_string(), "loader".to_string()),
                ("file".into(), "a,b.elf".into()),
                ("cpu-num".into(), "0".into()),
                ("force-raw".into(), "on".into()),
            ]
        );
        assert_eq!(escape_keyval("a,b"), "a,,b");
    }

    #[test]
    fn json_device_fields() {
        assert_eq!(
            json_fields(r#"{"driver":"loader", "file":"a\"b.elf", "addr":4096,"x":true}"#),
            [
                ("driver".to_string(), "loader".to_string()),
                ("file".into(), "a\"b.elf".into()),
                ("addr".into(), "4096".into()),
                ("x".into(), "true".into()),
            ]
        );
        assert!(json_fields("{broken").is_empty());
    }

    #[test]
    fn reads_memory_size() {
        assert_eq!(
            memory(&options(&os(&["-m", "512M"]))).as_deref(),
            Some("512M")
        );
        assert_eq!(
            memory(&options(&os(&["-m", "size=2G,maxmem=4G"]))).as_deref(),
            Some("2G")
        );
        assert_eq!(memory(&options(&os(&["-M", "virt"]))), None);
    }
}
