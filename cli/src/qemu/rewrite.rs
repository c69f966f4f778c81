//! The command QEMU runs: the user's, with our `-plugin` option added.

use std::ffi::OsString;
use std::path::Path;

use super::options::escape_keyval;
use crate::args::Clock;

/// The `-plugin` value that loads our plugin and points it at the staging directory.
pub fn plugin_option(
    plugin: &Path,
    out_dir: &Path,
    clock: Clock,
    max_depth: Option<u16>,
) -> OsString {
    let mut v = format!(
        "{},out={},clock={}",
        escape_keyval(&plugin.to_string_lossy()),
        escape_keyval(&out_dir.to_string_lossy()),
        clock.as_str()
    );
    if let Some(d) = max_depth {
        v.push_str(&format!(",max_depth={d}"));
    }
    v.into()
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
            OsString::from("/c/p,,1.so,out=/t/uftrace.data.partial,clock=insn,max_depth=64")
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
