//! Reading a system-mode command line the way QEMU does: its options and their values
//! (`options`), QEMU's `key=value,…` strings (`keyval`, `escape_keyval`) and JSON objects
//! (`json_fields`), and what a given option says (`last_option_key`, `memory`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

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

/// Splits a QEMU `key=value,key=value` option string the way QEMU's option parser
/// (`QemuOpts`) does, byte by byte, since a value may be a file name that is not UTF-8. A
/// first element with no `=` before its first comma is the value of `implied_key` (`driver`
/// for -device, `accel` for -accel, `type` for -machine); a later one is a flag (`foo` is
/// `foo=on`, `nofoo` is `foo=off`). In values `,,` is a literal comma; names end at the
/// first `=` or `,`.
pub fn keyval(value: &OsStr, implied_key: &str) -> Vec<(String, OsString)> {
    /// A value up to the first single comma, and what follows it.
    fn opt_value(p: &[u8]) -> (Vec<u8>, &[u8]) {
        let mut value = Vec::new();
        let mut i = 0;
        while i < p.len() {
            if p[i] == b',' {
                if p.get(i + 1) != Some(&b',') {
                    return (value, &p[i + 1..]);
                }
                i += 1;
            }
            value.push(p[i]);
            i += 1;
        }
        (value, &[])
    }
    let os = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
    let mut out = Vec::new();
    let mut p = value.as_bytes();
    let mut first = true;
    while !p.is_empty() {
        let len = p
            .iter()
            .position(|&b| b == b'=' || b == b',')
            .unwrap_or(p.len());
        let name = String::from_utf8_lossy(&p[..len]).into_owned();
        if p.get(len) == Some(&b'=') {
            let (v, rest) = opt_value(&p[len + 1..]);
            out.push((name, os(&v)));
            p = rest;
        } else if first {
            let (v, rest) = opt_value(p);
            out.push((implied_key.to_string(), os(&v)));
            p = rest;
        } else {
            match name.strip_prefix("no") {
                Some(flag) => out.push((flag.to_string(), "off".into())),
                None => out.push((name, "on".into())),
            }
            p = p.get(len + 1..).unwrap_or_default();
        }
        first = false;
    }
    out
}

/// Escapes a value for a QEMU option string: a comma is written twice.
pub fn escape_keyval(value: &OsStr) -> OsString {
    let mut out = Vec::with_capacity(value.len());
    for &b in value.as_bytes() {
        out.push(b);
        if b == b',' {
            out.push(b',');
        }
    }
    OsString::from_vec(out)
}

/// The fields of a JSON object (`-device {"driver":"loader",…}`): strings as they are,
/// numbers and booleans as JSON writes them; nested values are left out. Text that is no
/// JSON object has no fields (QEMU refuses it anyway).
pub fn json_fields(text: &str) -> Vec<(String, OsString)> {
    let Ok(fields) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
    else {
        return Vec::new();
    };
    fields
        .into_iter()
        .filter_map(|(k, v)| {
            let v = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((k, v.into()))
        })
        .collect()
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
    keyval(value, implied)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.to_string_lossy().into_owned())
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

    /// `keyval` with its values as text.
    fn kv(value: &str, implied: &str) -> Vec<(String, String)> {
        keyval(OsStr::new(value), implied)
            .into_iter()
            .map(|(k, v)| (k, v.to_string_lossy().into_owned()))
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keyval_handles_implied_key_escapes_and_flags() {
        assert_eq!(
            kv("loader,file=a,,b.elf,cpu-num=0,force-raw,noquiet", "driver"),
            pairs(&[
                ("driver", "loader"),
                ("file", "a,b.elf"),
                ("cpu-num", "0"),
                ("force-raw", "on"),
                ("quiet", "off"),
            ])
        );
        // As QEMU: the implied value runs to the first single comma, `=` included.
        assert_eq!(
            kv("a,,b=c,x=1", "driver"),
            pairs(&[("driver", "a,b=c"), ("x", "1")])
        );
        assert_eq!(
            kv("file=/p=q/r.so,out=a=b", "file"),
            pairs(&[("file", "/p=q/r.so"), ("out", "a=b")])
        );
        assert_eq!(kv("virt,", "type"), pairs(&[("type", "virt")]));
        assert_eq!(kv("", "type"), pairs(&[]));
    }

    #[test]
    fn keyval_keeps_bytes_and_escape_undoes_it() {
        let raw = OsStr::from_bytes(b"/t\xffr,a,,b=c");
        let escaped = escape_keyval(raw);
        assert_eq!(escaped.as_bytes(), b"/t\xffr,,a,,,,b=c");
        let mut option = OsString::from("p.so,out=");
        option.push(&escaped);
        option.push(",clock=insn");
        let kv = keyval(&option, "file");
        assert_eq!(kv[1], ("out".to_string(), raw.to_os_string()));
        assert_eq!(kv[2], ("clock".to_string(), "insn".into()));
    }

    #[test]
    fn json_device_fields() {
        let mut fields = json_fields(
            r#"{"driver":"loader", "file":"a\"b\r.elf", "addr":4096,"x":true,"n":{"y":1}}"#,
        );
        fields.sort();
        let want: Vec<(String, OsString)> = [
            ("addr", "4096"),
            ("driver", "loader"),
            ("file", "a\"b\r.elf"),
            ("x", "true"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.into()))
        .collect();
        assert_eq!(fields, want);
        assert!(json_fields("{broken").is_empty());
        assert!(json_fields("[1]").is_empty());
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
