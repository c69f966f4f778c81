//! Snapshots for the tests of runs that start mid-way: a guest runs until its serial line
//! shows a marker, then the QEMU monitor stops it and saves it (`savevm`) on a qcow2 disk,
//! from which a later run starts with `-loadvm`.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Makes an empty qcow2 disk (the place `savevm` keeps snapshots).
pub fn create_disk(path: &Path) -> Result<()> {
    let out = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(path)
        .arg("16M")
        .output()
        .context("running qemu-img (install qemu-utils: scripts/install-deps.sh)")?;
    if !out.status.success() {
        bail!(
            "qemu-img create failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// QEMU's options for the disk that holds the snapshots (attached to no device: `savevm`
/// and `-loadvm` only need it to exist).
pub fn disk_args(disk: &Path) -> Vec<String> {
    vec![
        "-drive".into(),
        format!("if=none,id=snapdisk,file={},format=qcow2", disk.display()),
    ]
}

/// Runs the QEMU command line `qemu` (without serial or monitor options) until its serial
/// line has printed `marker`, then stops it, saves snapshot `tag` and quits, through the
/// monitor. Gives the serial output seen. `work` is a directory for the serial's socket.
pub fn save_at_marker(
    qemu: &[String],
    work: &Path,
    marker: &str,
    tag: &str,
    timeout: Duration,
) -> Result<String> {
    // HMP runs one command after the other: savevm is done before the list is printed.
    let commands = format!("stop\nsavevm {tag}\ninfo snapshots\nquit\n");
    let (serial, stdout, stderr) = run_to_marker(qemu, work, marker, &commands, timeout)?;
    listed_after_savevm(tag, serial, &stdout, &stderr)
}

/// Like [`save_at_marker`], but once the marker's line is out the guest runs on, through
/// QEMU's gdbstub, until a vCPU is about to run the instruction at `addr` (a breakpoint:
/// QEMU's own, nothing written to guest memory), and is saved there: a run from the
/// snapshot starts at `addr` exactly, which a stop from the monitor only reaches by chance.
pub fn save_at_breakpoint(
    qemu: &[String],
    work: &Path,
    marker: &str,
    addr: u64,
    tag: &str,
    timeout: Duration,
) -> Result<String> {
    let gdb = work.join("gdb.sock");
    let _ = std::fs::remove_file(&gdb);
    let mut args = qemu.to_vec();
    args.extend([
        "-gdb".to_string(),
        format!("unix:{},server=on,wait=off", gdb.display()),
    ]);
    let commands = format!("savevm {tag}\ninfo snapshots\nquit\n");
    let run_to = || gdb_run_to(&gdb, addr, timeout);
    let (serial, stdout, stderr) =
        run_to_marker_then(&args, work, marker, &run_to, &commands, timeout)?;
    listed_after_savevm(tag, serial, &stdout, &stderr)
}

/// `serial`, if `savevm TAG` put its snapshot in the list the monitor printed.
fn listed_after_savevm(tag: &str, serial: String, stdout: &str, stderr: &str) -> Result<String> {
    // The snapshot list: a line whose second column is the tag (the monitor's echo of
    // `savevm TAG` carries terminal escapes after it).
    let listed = stdout
        .lines()
        .skip_while(|l| !l.starts_with("List of snapshots"))
        .any(|l| l.split_whitespace().nth(1) == Some(tag));
    if !listed {
        bail!("snapshot {tag} is not listed after savevm:\n{stdout}\n{stderr}");
    }
    Ok(serial)
}

/// Like [`save_at_marker`], but migrates the running guest into the file `stream` (HMP's
/// `migrate` without `-d` returns once the migration completed), for `-incoming
/// file:STREAM`. The guest keeps running meanwhile: its state must not change after the
/// marker (it waits).
pub fn migrate_at_marker(
    qemu: &[String],
    work: &Path,
    marker: &str,
    stream: &Path,
    timeout: Duration,
) -> Result<String> {
    let commands = format!("migrate file:{}\ninfo migrate\nquit\n", stream.display());
    let (serial, stdout, stderr) = run_to_marker(qemu, work, marker, &commands, timeout)?;
    if !stdout
        .lines()
        .any(|l| l.trim() == "Migration status: completed")
    {
        bail!("the migration did not complete:\n{stdout}\n{stderr}");
    }
    Ok(serial)
}

/// Waits, through QMP, until the VM runs: `query-status` says so, or a RESUME event comes (a
/// run from a migration stream starts once the stream is loaded). QEMU connects to
/// `listener` (`-qmp unix:PATH`, without `server=on`, with the test listening first).
pub fn wait_until_running(listener: &UnixListener, timeout: Duration) -> Result<()> {
    let (stream, _) = listener.accept().context("QEMU's QMP connection")?;
    stream.set_read_timeout(Some(timeout))?;
    let mut writer = stream.try_clone()?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stream));
    let mut next =
        || -> Result<String> { lines.next().context("QMP closed")?.context("reading QMP") };
    next()?; // the greeting
    writer.write_all(b"{\"execute\": \"qmp_capabilities\"}\n")?;
    while !next()?.contains("\"return\"") {}
    writer.write_all(b"{\"execute\": \"query-status\"}\n")?;
    loop {
        let line = next()?;
        if line.contains("\"running\": true") || line.contains("\"RESUME\"") {
            return Ok(());
        }
    }
}

/// Runs `qemu` until its serial line shows `marker`'s whole line, then gives the monitor
/// `commands` (which end with `quit`) and waits for QEMU to exit. Gives the serial output
/// seen and QEMU's stdout (the monitor) and stderr.
fn run_to_marker(
    qemu: &[String],
    work: &Path,
    marker: &str,
    commands: &str,
    timeout: Duration,
) -> Result<(String, String, String)> {
    run_to_marker_then(qemu, work, marker, &|| Ok(()), commands, timeout)
}

/// [`run_to_marker`], running `then` between the marker and the monitor's `commands`.
fn run_to_marker_then(
    qemu: &[String],
    work: &Path,
    marker: &str,
    then: &dyn Fn() -> Result<()>,
    commands: &str,
    timeout: Duration,
) -> Result<(String, String, String)> {
    let socket: PathBuf = work.join("serial.sock");
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .with_context(|| format!("cannot listen on {}", socket.display()))?;
    let mut child = Command::new(&qemu[0])
        .args(&qemu[1..])
        .arg("-serial")
        .arg(format!("unix:{}", socket.display()))
        .args(["-monitor", "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", qemu[0]))?;
    // QEMU connects to the serial socket as it starts; the guest's output is read there
    // until the marker (or the end), on a thread, so that the wait has a limit.
    let (tx, rx) = mpsc::channel();
    let want = marker.as_bytes().to_vec();
    std::thread::spawn(move || {
        let seen = (|| -> std::io::Result<(Vec<u8>, UnixStream)> {
            let (mut stream, _) = listener.accept()?;
            let mut seen = Vec::new();
            let mut buf = [0u8; 256];
            // The marker's whole line: stopped at its first bytes, a guest that prints slowly
            // (a loaded host) was caught still writing the rest of it.
            let line_done = |seen: &[u8]| {
                seen.windows(want.len())
                    .position(|w| w == want.as_slice())
                    .is_some_and(|p| seen[p + want.len()..].contains(&b'\n'))
            };
            while !line_done(&seen) {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            Ok((seen, stream))
        })();
        let _ = tx.send(seen);
    });
    // The stream stays open until QEMU quits.
    let (serial, _stream) = match rx.recv_timeout(timeout) {
        Ok(Ok((seen, stream))) => (String::from_utf8_lossy(&seen).into_owned(), stream),
        Ok(Err(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("reading the guest's serial line: {e}");
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            // Unblocks the accept if QEMU never connected.
            let _ = UnixStream::connect(&socket);
            bail!("the guest did not print {marker:?} within {timeout:?}");
        }
    };
    if !serial.contains(marker) {
        let _ = child.kill();
        let _ = child.wait();
        bail!("the guest's serial line ended before {marker:?}: {serial:?}");
    }
    if let Err(e) = then() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let mut stdin = child.stdin.take().context("QEMU's stdin")?;
    stdin
        .write_all(commands.as_bytes())
        .context("writing to QEMU's monitor")?;
    drop(stdin);
    let (status, stdout, stderr) = crate::wait_with_timeout(child, timeout)?;
    if status.is_none() {
        bail!("QEMU did not quit within {timeout:?}\n{stdout}\n{stderr}");
    }
    Ok((serial, stdout, stderr))
}

/// Through QEMU's gdbstub at `socket` (GDB's remote serial protocol): sets a breakpoint at
/// `addr` (an AArch64 instruction), lets the guest run until it stops there, and removes
/// the breakpoint; the guest stays stopped. Attaching stops it already.
fn gdb_run_to(socket: &Path, addr: u64, timeout: Duration) -> Result<()> {
    let mut gdb = UnixStream::connect(socket)
        .with_context(|| format!("connecting to QEMU's gdbstub at {}", socket.display()))?;
    gdb.set_read_timeout(Some(timeout))?;
    let mut ask = |body: &str| -> Result<String> {
        let sum = body.bytes().fold(0u8, |a, b| a.wrapping_add(b));
        gdb.write_all(format!("${body}#{sum:02x}").as_bytes())?;
        gdb_reply(&mut gdb).with_context(|| format!("the gdbstub's reply to {body:?}"))
    };
    let set = ask(&format!("Z0,{addr:x},4"))?;
    if set != "OK" {
        bail!("the gdbstub did not set a breakpoint at {addr:#x}: {set:?}");
    }
    let stop = ask("c")?;
    if !stop.starts_with('T') && !stop.starts_with('S') {
        bail!("the guest did not stop at {addr:#x}: {stop:?}");
    }
    let removed = ask(&format!("z0,{addr:x},4"))?;
    if removed != "OK" {
        bail!("the gdbstub did not remove the breakpoint at {addr:#x}: {removed:?}");
    }
    Ok(())
}

/// The next packet's body from the gdbstub (acknowledged), past acknowledgements.
fn gdb_reply(gdb: &mut UnixStream) -> Result<String> {
    let mut byte = [0u8; 1];
    let mut next = |gdb: &mut UnixStream| -> Result<u8> {
        gdb.read_exact(&mut byte)
            .context("the gdbstub's connection")?;
        Ok(byte[0])
    };
    while next(gdb)? != b'$' {}
    let mut body = Vec::new();
    loop {
        match next(gdb)? {
            b'#' => break,
            b => body.push(b),
        }
    }
    // The checksum's two digits; a corrupted reply fails its caller's check of the body.
    next(gdb)?;
    next(gdb)?;
    gdb.write_all(b"+")?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}
