//! A Debian package's file list, as `dpkg-deb --contents` (`tar -tv`) prints it:
//!
//! ```text
//! -rw-r--r-- root/root  14186432 2026-11-16 10:17 ./boot/vmlinuz-6.1.0-56-cloud-amd64
//! lrwxrwxrwx root/root         0 2026-11-16 10:17 ./boot/vmlinuz-6.16.3 -> ../usr/lib/modules/6.16.3/vmlinuz
//! ```

/// What a member of the package's data archive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// A symbolic or hard link: never the file itself (since 6.16 `boot/vmlinuz-*` is a link
    /// to `usr/lib/modules/*/vmlinuz`).
    Link,
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The path inside the package, without the leading `./`.
    pub path: String,
    pub size: u64,
    pub kind: Kind,
    /// The owner may execute it (an emulator binary kept from a package stays runnable).
    pub executable: bool,
}

/// The members of a listing; lines that are not tar's verbose format are skipped (dpkg-deb
/// prints nothing else, but a listing saved by hand may carry a header).
pub fn parse(text: &str) -> Vec<Member> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Member> {
    // mode owner size date time path: the path is the rest of the line (it may hold spaces).
    let mut rest = line.trim_start();
    let mut fields = [""; 5];
    for field in &mut fields {
        let end = rest.find(char::is_whitespace)?;
        *field = &rest[..end];
        rest = rest[end..].trim_start();
    }
    let [mode, _owner, size, _date, _time] = fields;
    let kind = match mode.chars().next()? {
        '-' => Kind::File,
        'd' => Kind::Dir,
        'l' | 'h' => Kind::Link,
        'b' | 'c' | 'p' | 's' => Kind::Other,
        _ => return None,
    };
    let size = size.parse().ok()?;
    let path = match kind {
        // `a -> target` for a symbolic link, `a link to b` for a hard one.
        Kind::Link => rest
            .split(" -> ")
            .next()
            .and_then(|p| p.split(" link to ").next())
            .unwrap_or(rest),
        _ => rest,
    };
    let path = path
        .strip_prefix("./")
        .unwrap_or(path)
        .trim_end_matches('/');
    if path.is_empty() {
        return None;
    }
    Some(Member {
        path: path.to_string(),
        size,
        kind,
        executable: mode.as_bytes().get(3) == Some(&b'x'),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_links_and_directories() {
        let text = "\
drwxr-xr-x root/root         0 2026-11-16 10:17 ./
drwxr-xr-x root/root         0 2026-11-16 10:17 ./boot/
-rw-r--r-- root/root  14186432 2026-11-16 10:17 ./boot/vmlinuz-6.1.0-56-cloud-amd64
lrwxrwxrwx root/root         0 2026-11-16 10:17 ./boot/vmlinuz-6.16.3 -> ../usr/lib/modules/6.16.3/vmlinuz
hrw-r--r-- root/root         0 2026-11-16 10:17 ./x link to ./y
dpkg-deb: error: something else
";
        let members = parse(text);
        assert_eq!(members.len(), 4);
        assert_eq!(members[0].path, "boot");
        assert_eq!(members[0].kind, Kind::Dir);
        assert_eq!(
            members[1],
            Member {
                path: "boot/vmlinuz-6.1.0-56-cloud-amd64".into(),
                size: 14186432,
                kind: Kind::File,
                executable: false,
            }
        );
        assert_eq!(members[2].path, "boot/vmlinuz-6.16.3");
        assert_eq!(members[2].kind, Kind::Link);
        assert_eq!(members[3].kind, Kind::Link);
        assert_eq!(members[3].path, "x");
    }

    #[test]
    fn executables() {
        let m = parse("-rwxr-xr-x root/root 5 2026-01-01 00:00 ./usr/bin/qemu-aarch64\n");
        assert!(m[0].executable);
    }

    #[test]
    fn a_path_with_spaces_is_kept_whole() {
        let m = parse("-rw-r--r-- root/root 5 2026-01-01 00:00 ./usr/share/a b c\n");
        assert_eq!(m[0].path, "usr/share/a b c");
    }
}
