//! The plugin's argument parser (`plugin/src/state/config.rs`, compiled in as the plugin's own
//! tests do: the plugin is a cdylib that needs QEMU's symbols). Two properties: any argument
//! list (NUL-separated bytes, as QEMU's argv) gets a result, never a panic; and the round trip
//! `record` relies on: an `-o` directory of any bytes, written into `-plugin` by the CLI and
//! split into arguments as QEMU splits them, reaches the parser unchanged.
#![no_main]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::args::Clock;
use qemu_uftrace::qemu::{options::keyval, rewrite::plugin_option};

#[allow(dead_code)] // the parser's types of PIE addresses (`config` uses them)
#[path = "../../plugin/src/state/aims.rs"]
mod aims;
#[allow(dead_code)] // only the parser is fuzzed
#[path = "../../plugin/src/state/config.rs"]
mod config;

fuzz_target!(|data: &[u8]| {
    let args: Vec<OsString> = data
        .split(|&b| b == 0)
        .map(|a| OsStr::from_bytes(a).to_os_string())
        .collect();
    let _ = config::parse(&args);

    // The first argument as the directory (a C string holds no NUL).
    let dir = Path::new(&args[0]);
    let value = plugin_option(Path::new("/c/p,=.so"), dir, Clock::Wall, Some(64));
    // QEMU keeps `file=` for itself and hands the plugin every other `key=value`.
    let mut plugin_file = None;
    let passed: Vec<OsString> = keyval(&value, "file")
        .into_iter()
        .filter_map(|(k, v)| {
            if k == "file" {
                plugin_file = Some(v);
                return None;
            }
            let mut arg = OsString::from(k);
            arg.push("=");
            arg.push(v);
            Some(arg)
        })
        .collect();
    assert_eq!(plugin_file.as_deref(), Some(OsStr::new("/c/p,=.so")));
    match config::parse(&passed) {
        Ok(config::Mode::Record(cfg)) => {
            assert_eq!(cfg.out, dir, "{value:?}");
            assert_eq!(cfg.clock, config::ClockChoice::Fixed(config::ClockKind::Wall));
            assert_eq!(cfg.max_depth, 64);
        }
        other => panic!("{value:?} gave {other:?}"),
    }
});
