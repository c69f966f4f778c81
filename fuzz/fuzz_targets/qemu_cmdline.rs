//! How `record` reads a QEMU command line (`cli/src/qemu/`): the option lexer, QEMU's
//! key=value and JSON option strings, guest image discovery and the refusals, on command
//! lines of any bytes (NUL-separated words, as argv). None may panic, and `escape_keyval`
//! must be undone by `keyval`, whatever the bytes.
#![no_main]

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::qemu::{self, options, refusals};

fuzz_target!(|data: &[u8]| {
    let words: Vec<OsString> = data
        .split(|&b| b == 0)
        .map(|w| OsStr::from_bytes(w).to_os_string())
        .collect();
    let _ = qemu::detect_emulator(&words[0]);
    let opts = qemu::options(&words[1..]);
    // Whether a file is an ELF decided from its name: the fuzzer must not depend on files.
    let _ = qemu::guest_images(&opts, |p| p.as_os_str().len() % 2 == 0);
    let _ = refusals::hardware_accel(&opts);
    // Looks at most at the -kernel file's metadata and first bytes, for each machine.
    for &arch in qemu_uftrace_format::arch::Arch::ALL {
        let _ = refusals::check(&opts, arch, "qemu-system-fuzz");
    }
    let _ = qemu::memory(&opts);
    let _ = qemu::last_option_key(&opts, &["M", "machine"], "type", "type");
    for w in &words {
        let _ = options::keyval(w, "driver");
        let _ = options::json_fields(&w.to_string_lossy());
        // `key=<escaped bytes>` reads back as exactly those bytes.
        let mut written = OsString::from("k=");
        written.push(options::escape_keyval(w));
        assert_eq!(
            options::keyval(&written, "driver"),
            [("k".to_string(), w.clone())],
            "{written:?}"
        );
    }
});
