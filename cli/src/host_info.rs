//! Facts about the host for the `info` file, in the forms uftrace record uses.

use std::time::{Duration, SystemTime};

/// `Mon Jun  3 12:00:00 2024`, as ctime(3) prints local time (empty when the time cannot
/// be told: the info file has no date then).
pub fn ctime(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| {
            ts.to_zoned_datetime(jiff::tz::TimeZone::system())
                .strftime("%a %b %e %H:%M:%S %Y")
                .to_string()
        })
        .unwrap_or_default()
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
    let u = rustix::system::uname();
    let text = |c: &std::ffi::CStr| c.to_string_lossy().into_owned();
    OsInfo {
        kernel: format!("host {} {}", text(u.sysname()), text(u.release())),
        hostname: text(u.nodename()),
        distro: distro(),
    }
}

/// The distribution's `PRETTY_NAME` from os-release(5): `/etc/os-release`, else
/// `/usr/lib/os-release`. Read here rather than with the os-release crate, whose one
/// release (0.1.0, 2018) is unmaintained and, like this, reads only the first file.
fn distro() -> String {
    ["/etc/os-release", "/usr/lib/os-release"]
        .iter()
        .find_map(|f| std::fs::read_to_string(f).ok())
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim().trim_matches(['"', '\'']).to_string())
        })
        .unwrap_or_default()
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
        // The day of the month is padded with a space, as ctime(3) does.
        let t = std::time::UNIX_EPOCH + Duration::from_secs(3 * 86_400 + 12 * 3600);
        let d = ctime(t);
        assert!(d.ends_with(" 1970") && d.contains("Jan  "), "{d}");
        let info = os_info();
        assert!(info.kernel.starts_with("host Linux "));
        assert!(!info.hostname.is_empty());
    }
}
