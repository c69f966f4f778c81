//! The guest images a system-mode command line loads (`-kernel`, `-bios`, `-device
//! loader`): our symbol sources.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::options::{json_fields, keyval, QemuOption};

/// Where a guest image on the QEMU command line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageOrigin {
    Kernel,
    Bios,
    Loader,
    /// The program a user-mode QEMU runs.
    Program,
}

impl ImageOrigin {
    pub fn option(self) -> &'static str {
        match self {
            ImageOrigin::Kernel => "-kernel",
            ImageOrigin::Bios => "-bios",
            ImageOrigin::Loader => "-device loader",
            ImageOrigin::Program => "the program",
        }
    }
}

/// A guest image named on the QEMU command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestImage {
    pub path: PathBuf,
    pub origin: ImageOrigin,
}

/// The guest images of a system-mode command line, in command-line order by kind: kernel,
/// then firmware, then generic-loader files (ELF only; raw blobs carry no symbols, which
/// `is_elf` decides).
pub fn guest_images(opts: &[QemuOption], is_elf: impl Fn(&Path) -> bool) -> Vec<GuestImage> {
    let mut kernels = Vec::new();
    let mut bioses = Vec::new();
    let mut loaders = Vec::new();
    for o in opts {
        let Some(value) = &o.value else { continue };
        match o.name.as_str() {
            "kernel" => kernels.push(GuestImage {
                path: PathBuf::from(value),
                origin: ImageOrigin::Kernel,
            }),
            // A firmware name QEMU finds in its own data directory (edk2, u-boot blobs) is
            // not a file here and has no symbols anyway.
            "bios" if Path::new(value).exists() => bioses.push(GuestImage {
                path: PathBuf::from(value),
                origin: ImageOrigin::Bios,
            }),
            "device" => {
                let kv = device_fields(value);
                let is_loader = kv.iter().any(|(k, v)| k == "driver" && v == "loader");
                let raw = kv.iter().any(|(k, v)| {
                    k == "force-raw" && matches!(v.to_str(), Some("on" | "true" | "yes"))
                });
                if !is_loader || raw {
                    continue;
                }
                if let Some((_, file)) = kv.iter().find(|(k, _)| k == "file") {
                    let path = PathBuf::from(file);
                    if is_elf(&path) {
                        loaders.push(GuestImage {
                            path,
                            origin: ImageOrigin::Loader,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    kernels.into_iter().chain(bioses).chain(loaders).collect()
}

/// True when the file starts with the ELF magic (unreadable files count as ELF so that
/// loading them later reports why).
pub fn file_is_elf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    match std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)) {
        Ok(()) => &magic == b"\x7fELF",
        Err(e) => e.kind() != std::io::ErrorKind::UnexpectedEof,
    }
}
/// A `-device` value's properties, in either of QEMU's forms (`driver,key=value,…` or
/// JSON), the driver under `driver`.
pub fn device_fields(value: &OsStr) -> Vec<(String, OsString)> {
    // JSON is UTF-8 (QEMU refuses anything else); key=value strings are bytes.
    let text = value.to_string_lossy();
    if text.trim_start().starts_with('{') {
        json_fields(&text)
    } else {
        keyval(value, "driver")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::options::options;
    use std::ffi::OsString;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn finds_guest_images_in_order() {
        let opts = options(&os(&[
            "-device",
            "loader,file=fw.elf,addr=0x1000",
            "-bios",
            "/bin/sh",
            "-bios",
            "edk2-aarch64-code.fd",
            "-device",
            r#"{"driver": "loader", "file": "json.elf", "addr": 4096}"#,
            "-device",
            "virtio-net-device",
            "-device",
            "driver=loader,file=blob.bin,addr=0x2000",
            "-device",
            "loader,file=raw.elf,force-raw=on",
            "--kernel",
            "vmlinux",
        ]));
        let images = guest_images(&opts, |p| p != Path::new("blob.bin"));
        assert_eq!(
            images,
            [
                GuestImage {
                    path: "vmlinux".into(),
                    origin: ImageOrigin::Kernel
                },
                GuestImage {
                    path: "/bin/sh".into(),
                    origin: ImageOrigin::Bios
                },
                GuestImage {
                    path: "fw.elf".into(),
                    origin: ImageOrigin::Loader
                },
                GuestImage {
                    path: "json.elf".into(),
                    origin: ImageOrigin::Loader
                },
            ]
        );
    }
}
