//! The command QEMU runs: the user's, with our `-plugin` option added.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use super::options::escape_keyval;
use crate::args::Clock;

/// A `-plugin` value: `file=PLUGIN,key=value,…`, every path escaped and carried byte for
/// byte (QEMU's option parser and the plugin both take bytes, so a directory name that is
/// not UTF-8 arrives intact). `file=` is spelled out: as an implied first value, a path
/// with `=` in it would be read as `name=value`.
pub fn plugin_value(plugin: &Path, args: &[(&str, &OsStr)]) -> OsString {
    let mut v = OsString::from("file=");
    v.push(escape_keyval(plugin.as_os_str()));
    for (key, value) in args {
        v.push(format!(",{key}="));
        v.push(escape_keyval(value));
    }
    v
}

/// The `-plugin` value that loads our plugin and points it at the staging directory.
pub fn plugin_option(
    plugin: &Path,
    out_dir: &Path,
    clock: Clock,
    max_depth: Option<u16>,
) -> OsString {
    let depth = max_depth.map(|d| d.to_string());
    let mut args = vec![
        ("out", out_dir.as_os_str()),
        ("clock", OsStr::new(clock.as_str())),
    ];
    if let Some(d) = &depth {
        args.push(("max_depth", OsStr::new(d)));
    }
    plugin_value(plugin, &args)
}

/// The command with `-plugin <value>` inserted right after argv[0], so that it comes before
/// anything (like `-readconfig`) that could stop option processing.
pub fn with_plugin(argv: &[OsString], plugin_value: OsString) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len() + 2);
    out.extend(argv.first().cloned());
    out.push("-plugin".into());
    out.push(plugin_value);
    out.extend(argv.iter().skip(1).cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn plugin_goes_right_after_argv0() {
        let v = plugin_option(
            Path::new("/c/p,1.so"),
            Path::new("/t/uftrace.data.partial"),
            Clock::Insn,
            Some(64),
        );
        assert_eq!(
            v,
            OsString::from("file=/c/p,,1.so,out=/t/uftrace.data.partial,clock=insn,max_depth=64")
        );
        let argv = with_plugin(
            &os(&["qemu-system-aarch64", "-M", "virt"]),
            "p.so,out=d,clock=wall".into(),
        );
        assert_eq!(
            argv,
            os(&[
                "qemu-system-aarch64",
                "-plugin",
                "p.so,out=d,clock=wall",
                "-M",
                "virt"
            ])
        );
    }
}
