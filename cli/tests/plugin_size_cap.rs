//! The plugin's size cap, as the CLI's `--max-size` passes it (`max_size=BYTES`,
//! `max_size_exit=on`): on a guest that never ends (`tests/guests/spin.c`), QEMU with the
//! plugin alone writes whole records up to the cap, says so in `plugin.stats`, and stops.

mod common;

use qemu_uftrace::embedded::PLUGINS;
use qemu_uftrace_format::record::{decode_all, RECORD_SIZE};
use qemu_uftrace_tests::{guest_elf, qemu_args, Variant, QEMU};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_size_cap_stops_a_guest_that_never_ends() {
    common::require(QEMU);
    let elf = guest_elf("spin", Variant::Natural).expect("build the guests");
    let tmp = tempfile::tempdir().expect("temp dir");
    // API 4: the QEMUs before 11.1 take it.
    let plugin = PLUGINS
        .iter()
        .find(|p| p.api == 4)
        .expect("the API 4 build");
    let so = tmp.path().join("plugin.so");
    std::fs::write(&so, plugin.bytes).expect("write the plugin");
    let out = tmp.path().join("trace");
    std::fs::create_dir(&out).expect("trace dir");
    // Not a whole number of records: the cap keeps whole ones only.
    let cap = 3 * (1 << 20) / 2 + 5;
    let mut argv = qemu_args(&elf);
    argv.push("-plugin".into());
    argv.push(format!(
        "{},out={},clock=insn,max_size={cap},max_size_exit=on",
        so.display(),
        out.display()
    ));
    let mut qemu = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run QEMU");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = qemu.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = qemu.kill();
            panic!("QEMU still runs past the size cap");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::io::read_to_string(qemu.stderr.take().expect("stderr")).unwrap_or_default();
    assert!(status.success(), "{status}: {err}");
    let stats = std::fs::read_to_string(out.join("plugin.stats")).expect("plugin.stats");
    assert!(stats.lines().any(|l| l == "complete=0"), "{stats}");
    assert!(stats.lines().any(|l| l == "size_capped=1"), "{stats}");
    assert!(stats.lines().any(|l| l == "lost_records=0"), "{stats}");
    let mut total = 0;
    for entry in std::fs::read_dir(&out).expect("trace dir").flatten() {
        if entry.path().extension().is_some_and(|e| e == "dat") {
            let data = std::fs::read(entry.path()).expect("read");
            assert_eq!(data.len() % RECORD_SIZE, 0, "{}", entry.path().display());
            decode_all(&data).expect("whole records");
            total += data.len();
        }
    }
    assert_eq!(total, cap / RECORD_SIZE * RECORD_SIZE, "{stats}");
}
