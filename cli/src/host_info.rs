//! Facts about the host for the `info` file, in the forms uftrace record uses.

use std::ffi::CStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `Mon Jun  3 12:00:00 2024`, as ctime(3) prints local time.
pub fn ctime(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as libc::time_t;
    // SAFETY: localtime_r and strftime write only into the buffers we pass.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            return String::new();
        }
        let mut buf = [0 as libc::c_char; 64];
        let n = libc::strftime(
            buf.as_mut_ptr(),
            buf.len(),
            c"%a %b %e %H:%M:%S %Y".as_ptr(),
            &tm,
        );
        if n == 0 {
            return String::new();
        }
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

/// `1.234567890 sec`, as uftrace record writes elapsed_time.
pub fn elapsed(d: Duration) -> String {
    format!("{}.{:09} sec", d.as_secs(), d.subsec_nanos())
}

/// The host's kernel, name and distribution, as uftrace's osinfo lines. uftrace labels the
/// first "kernel version", which in a guest trace would pass for the guest's: it says "host".
pub struct OsInfo {
    pub kernel: String,
    pub hostname: String,
    pub distro: String,
}

pub fn os_info() -> OsInfo {
    let (kernel, hostname) = uname();
    let distro = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_default();
    OsInfo {
        kernel: format!("host {kernel}"),
        hostname,
        distro,
    }
}

fn uname() -> (String, String) {
    // SAFETY: uname fills the struct; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return (String::new(), String::new());
        }
        let s = |f: &[libc::c_char]| CStr::from_ptr(f.as_ptr()).to_string_lossy().into_owned();
        (
            format!("{} {}", s(&u.sysname), s(&u.release)),
            s(&u.nodename),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_uftrace() {
        assert_eq!(elapsed(Duration::new(1, 234_567_890)), "1.234567890 sec");
        assert_eq!(elapsed(Duration::from_millis(5)), "0.005000000 sec");
        let d = ctime(SystemTime::now());
        // "Mon Jun  3 12:00:00 2024"
        assert_eq!(d.len(), 24, "{d}");
        assert!(os_info().kernel.starts_with("host Linux "));
    }
}
