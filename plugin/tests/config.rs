//! The plugin's argument parser, compiled in directly as `engine.rs` does (the cdylib cannot
//! link a test harness). Its one dependency in the plugin, the clock kind, is stood in for.

#[allow(dead_code)] // only the parser is under test
#[path = "../src/config.rs"]
mod config;

/// The plugin's `clock::ClockKind`, which `config.rs` names (the real module needs QEMU).
mod clock {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum ClockKind {
        Insn,
        Wall,
    }
}

use config::{parse, Mode};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn args(v: &[&[u8]]) -> Vec<OsString> {
    v.iter().map(|a| OsStr::from_bytes(a).to_owned()).collect()
}

#[test]
fn out_keeps_every_byte() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[b"out=/t/a=b\xff,c.partial", b"clock=wall"])) else {
        panic!("refused");
    };
    assert_eq!(
        cfg.out,
        Path::new(OsStr::from_bytes(b"/t/a=b\xff,c.partial"))
    );
    assert_eq!(
        cfg.clock,
        config::ClockChoice::Fixed(clock::ClockKind::Wall)
    );
    assert_eq!(cfg.max_depth, qemu_uftrace_format::MAX_STACK as usize);
}

#[test]
fn bad_arguments_are_one_line() {
    for (bad, msg) in [
        (
            &[b"clock=\xff".as_slice()][..],
            "clock=\u{fffd}: expected auto, insn or wall",
        ),
        (
            &[b"out=/x", b"max_depth=0"],
            "max_depth=0: expected 1..=1024",
        ),
        (&[b"out"], "argument \"out\" is not key=value"),
        (&[b"clock=insn"], "missing out=DIR"),
        (&[b"\xffx=1"], "unknown argument \"\u{fffd}x\""),
    ] {
        match parse(&args(bad)) {
            Err(e) => assert_eq!(e, msg),
            Ok(m) => panic!("{bad:?} accepted: {m:?}"),
        }
    }
    assert!(matches!(parse(&args(&[b"probe=on"])), Ok(Mode::Probe)));
}

#[test]
fn function_entries_come_now_or_later_and_an_empty_list_is_none() {
    let cfg = |a: &[&[u8]]| match parse(&args(a)) {
        Ok(Mode::Record(cfg)) => (cfg.entries, cfg.entries_later),
        _ => panic!("refused {a:?}"),
    };
    let p = |s: &str| Some(Path::new(s).to_path_buf());
    assert_eq!(cfg(&[b"out=/t", b"entries=/t/.e"]), (p("/t/.e"), false));
    assert_eq!(cfg(&[b"out=/t", b"entries_file=/t/.e"]), (p("/t/.e"), true));
    // An exec'd program's QEMU drops the first program's list.
    assert_eq!(
        cfg(&[b"out=/t", b"entries=/t/.e", b"entries="]),
        (None, false)
    );
}
