//! The plugin's argument parser, compiled in directly (the cdylib cannot link a test harness).

#[allow(dead_code)] // the configuration's type for a PIE's aims
#[path = "../src/state/aims.rs"]
mod aims;
#[allow(dead_code)] // only the parser is under test
#[path = "../src/state/config.rs"]
mod config;

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
        config::ClockChoice::Fixed(config::ClockKind::Wall)
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
fn max_size_and_its_exit() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[b"out=/t", b"max_size=4096", b"max_size_exit=on"]))
    else {
        panic!("refused");
    };
    assert_eq!((cfg.max_size, cfg.max_size_exit), (Some(4096), true));
    let Ok(Mode::Record(cfg)) = parse(&args(&[b"out=/t"])) else {
        panic!("refused");
    };
    assert_eq!((cfg.max_size, cfg.max_size_exit), (None, false));
    for (bad, says) in [
        (
            &[b"out=/t" as &[u8], b"max_size=0"][..],
            "max_size=0: expected a byte count",
        ),
        (
            &[b"out=/t", b"max_size=1M"],
            "max_size=1M: expected a byte count",
        ),
        (
            &[b"out=/t", b"max_size=9", b"max_size_exit=yes"],
            "expected on or off",
        ),
        (&[b"out=/t", b"max_size_exit=on"], "needs max_size=BYTES"),
    ] {
        let err = parse(&args(bad)).expect_err("refused");
        assert!(err.contains(says), "{err}");
    }
}

#[test]
fn process_watch_takes_both_keys() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[
        b"out=/t",
        b"proc_watch=1:2:3:4",
        b"proc_offsets=1240:24:40:32",
    ])) else {
        panic!("refused");
    };
    let (w, o) = *cfg.proc_watch.expect("proc_watch");
    assert_eq!(
        (
            w.mmap_region,
            w.begin_new_exec,
            w.wake_up_new_task,
            w.do_exit
        ),
        (1, 2, 3, 4)
    );
    assert_eq!(
        (o.tgid, o.file_dentry, o.d_name, o.d_parent),
        (1240, 24, 40, 32)
    );
    for bad in [
        &[b"out=/t".as_slice(), b"proc_watch=1:2:3:4"][..],
        &[b"out=/t", b"proc_watch=1:2:3", b"proc_offsets=1:2:3:4"],
        &[b"out=/t", b"proc_watch=1:x:3:4", b"proc_offsets=1:2:3:4"],
        &[
            b"out=/t",
            b"proc_watch=1:2:3:4",
            b"proc_offsets=1:2:3:99999999",
        ],
    ] {
        assert!(parse(&args(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn the_munmap_watch_goes_with_the_process_watch() {
    let watch: [&[u8]; 3] = [b"out=/t", b"proc_watch=1:2:3:4", b"proc_offsets=5:6:7:8"];
    let Ok(Mode::Record(cfg)) = parse(&args(&[&watch[..], &[b"munmap_watch=9:112:104"]].concat()))
    else {
        panic!("refused");
    };
    assert_eq!(cfg.munmap_watch, Some([9, 112, 104]));
    for bad in [
        &[b"out=/t".as_slice(), b"munmap_watch=9:0:8"][..],
        &[&watch[..], &[b"munmap_watch=9:0"]].concat(),
        &[&watch[..], &[b"munmap_watch=9:0:99999999"]].concat(),
    ] {
        assert!(parse(&args(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn the_kernel_s_page_size_is_4k_unless_given_as_one_arm64_has() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[b"out=/t"])) else {
        panic!("refused");
    };
    assert_eq!(cfg.kernel_page, 4096);
    let Ok(Mode::Record(cfg)) = parse(&args(&[b"out=/t", b"kernel_page=16384"])) else {
        panic!("refused");
    };
    assert_eq!(cfg.kernel_page, 16384);
    for bad in ["kernel_page=8192", "kernel_page=0", "kernel_page=16k"] {
        let err = parse(&args(&[b"out=/t", bad.as_bytes()])).err();
        assert!(
            err.as_deref().is_some_and(|e| e.starts_with(bad)),
            "{bad}: {err:?}"
        );
    }
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
    // A Linux kernel's anchor for its randomised base (`state::kaslr`).
    let kaslr = |a: &[&[u8]]| match parse(&args(a)) {
        Ok(Mode::Record(cfg)) => cfg.kaslr_file,
        _ => panic!("refused {a:?}"),
    };
    assert_eq!(kaslr(&[b"out=/t", b"kaslr_file=/t/.kaslr"]), p("/t/.kaslr"));
    assert_eq!(kaslr(&[b"out=/t"]), None);
    // An exec'd program's QEMU drops the first program's list.
    assert_eq!(
        cfg(&[b"out=/t", b"entries=/t/.e", b"entries="]),
        (None, false)
    );
}

#[test]
fn a_pie_s_aims_come_with_its_link_entry() {
    let parse_str = |text: &str| -> Result<config::Config, String> {
        let args: Vec<OsString> = text.split(',').map(OsString::from).collect();
        match parse(&args)? {
            Mode::Record(cfg) => Ok(*cfg),
            Mode::Probe => Err("probe".into()),
        }
    };
    let cfg = parse_str("out=/tmp/x,filter=400000,pie_entry=4a0,pie_filter=10:20,pie_start_at=30")
        .unwrap();
    assert_eq!(cfg.filter, [0x400000]);
    let pie = cfg.pie.unwrap();
    assert_eq!(pie.entry, 0x4a0);
    assert_eq!(pie.aims.filter, [0x10, 0x20]);
    assert_eq!(pie.aims.start_at, [0x30]);
    assert!(pie.aims.notrace.is_empty() && pie.aims.stop_at.is_empty());
    assert!(parse_str("out=/tmp/x").unwrap().pie.is_none());
    let lone = parse_str("out=/tmp/x,pie_stop_at=10").unwrap_err();
    assert!(lone.contains("need pie_entry"), "{lone}");
}

/// The module watch rides on the process watch: refused without it, or half given.
#[test]
fn module_watch_needs_the_process_watch() {
    let proc_watch: [&[u8]; 2] = [b"proc_watch=1:2:3:4", b"proc_offsets=5:6:7:8"];
    let modules: [&[u8]; 2] = [b"mod_watch=10:20", b"mod_offsets=1:2:3:4:5:6:7:8:9"];
    let mut all = vec![b"out=/t".as_slice()];
    all.extend(proc_watch);
    all.extend(modules);
    let Ok(Mode::Record(cfg)) = parse(&args(&all)) else {
        panic!("refused");
    };
    let w = cfg.mod_watch.expect("the module watch");
    assert_eq!((w.load, w.free, w.strtab), (10, 20, 5));
    assert!(parse(&args(&[b"out=/t", modules[0], modules[1]])).is_err());
    assert!(parse(&args(&[
        b"out=/t",
        proc_watch[0],
        proc_watch[1],
        modules[0]
    ]))
    .is_err());
}

/// The module watch's two values: counts checked, offsets bounded.
#[test]
fn module_watch_values_are_parsed_and_bounded() {
    use config::ModWatch;
    let w = ModWatch::parse("10:20", "1:2:3:4:5:6:7:8:9").unwrap();
    assert_eq!((w.load, w.free, w.name, w.init_text), (10, 20, 1, 9));
    assert!(ModWatch::parse("10", "1:2:3:4:5:6:7:8:9").is_err());
    assert!(ModWatch::parse("10:20", "1:2:3").is_err());
    assert!(ModWatch::parse("10:20", "1:2:3:4:5:6:7:8:99999999999").is_err());
}

#[test]
fn a_shared_library_s_aims_are_file_and_link_address() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[
        b"out=/t",
        b"lib_filter=801.b.900:801.a.500",
        b"lib_notrace=801.b.300",
        b"lib_stop_at=801.b.700",
        b"lib_start_at=801.a.40",
    ])) else {
        panic!("refused");
    };
    assert_eq!(cfg.lib_filter, [(0x801, 0xb, 0x900), (0x801, 0xa, 0x500)]);
    assert_eq!(cfg.lib_notrace, [(0x801, 0xb, 0x300)]);
    assert_eq!(cfg.lib_stop_at, [(0x801, 0xb, 0x700)]);
    assert_eq!(cfg.lib_start_at, [(0x801, 0xa, 0x40)]);
    for bad in [
        &b"lib_filter=801.b"[..],
        b"lib_filter=801.b.9.1",
        b"lib_notrace=x.1.2",
    ] {
        let value = String::from_utf8_lossy(bad);
        let (key, _) = value.split_once('=').unwrap();
        match parse(&args(&[b"out=/t", bad])) {
            Err(e) => assert_eq!(
                e,
                format!("{value}: expected DEV.INO.ADDR:DEV.INO.ADDR… (hex)"),
                "{key}"
            ),
            Ok(m) => panic!("{value} accepted: {m:?}"),
        }
    }
}

/// System mode: a guest file's functions, by its path (hex) and the offset in the file.
#[test]
fn a_guest_file_s_aims_are_path_and_offset() {
    let Ok(Mode::Record(cfg)) = parse(&args(&[
        b"out=/t",
        b"file_start_at=2f612f62.8370:2f78.10",
        b"file_trace_off_at=2f78.20",
    ])) else {
        panic!("refused");
    };
    let aims = &cfg.file_aims;
    assert_eq!(
        aims.start_at,
        [("/a/b".to_string(), 0x8370), ("/x".to_string(), 0x10)]
    );
    assert_eq!(aims.trace_off_at, [("/x".to_string(), 0x20)]);
    assert!(aims.stop_at.is_empty() && aims.trace_on_at.is_empty());
    // Odd hex, a relative path, a bad offset, an empty aim.
    for bad in ["2f61", "2f6.10", "61.10", "2f61.zz", "2f61.10:", ""] {
        let arg = format!("file_stop_at={bad}");
        match parse(&args(&[b"out=/t", arg.as_bytes()])) {
            Err(e) => assert!(e.contains("HEXPATH.OFFSET"), "{arg}: {e}"),
            Ok(m) => panic!("{arg} accepted: {m:?}"),
        }
    }
}
