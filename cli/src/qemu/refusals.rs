//! Options that take the guest away from what the plugin sees.

use super::options::{keyval, QemuOption};

/// Hardware accelerators that bypass TCG, and so our plugin.
const HW_ACCELS: &[&str] = &["kvm", "hvf", "whpx", "xen", "nvmm"];

/// The option that asks for a hardware accelerator, if any, as the user wrote it.
pub fn hardware_accel(opts: &[QemuOption]) -> Option<String> {
    for o in opts {
        let value = o.value.as_ref().map(|v| v.to_string_lossy().into_owned());
        match (o.name.as_str(), value) {
            ("enable-kvm", _) => return Some("-enable-kvm".into()),
            ("accel", Some(v)) => {
                let kv = keyval(&v, "accel");
                if let Some((_, a)) = kv.iter().find(|(k, _)| k == "accel") {
                    if HW_ACCELS.contains(&a.as_str()) {
                        return Some(format!("-accel {v}"));
                    }
                }
            }
            ("machine" | "M", Some(v)) => {
                let kv = keyval(&v, "type");
                if let Some((_, list)) = kv.iter().find(|(k, _)| k == "accel") {
                    // `accel=kvm:tcg` tries KVM first.
                    if list.split(':').any(|a| HW_ACCELS.contains(&a)) {
                        return Some(format!("-{} {v}", o.name));
                    }
                }
            }
            _ => {}
        }
    }
    None
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
    fn detects_hardware_accelerators() {
        let cases = [
            (vec!["-enable-kvm"], Some("-enable-kvm")),
            (vec!["--enable-kvm"], Some("-enable-kvm")),
            (vec!["-accel", "kvm"], Some("-accel kvm")),
            (
                vec!["-accel", "hvf,thread=single"],
                Some("-accel hvf,thread=single"),
            ),
            (vec!["-accel", "accel=kvm"], Some("-accel accel=kvm")),
            (
                vec!["-M", "virt,accel=kvm:tcg"],
                Some("-M virt,accel=kvm:tcg"),
            ),
            (vec!["-machine", "accel=whpx"], Some("-machine accel=whpx")),
            (vec!["-accel", "tcg"], None),
            (vec!["-accel", "tcg,thread=multi"], None),
            (vec!["-M", "virt,accel=tcg"], None),
            (vec!["-append", "-enable-kvm"], None),
            (vec!["-M", "virt"], None),
        ];
        for (argv, want) in cases {
            assert_eq!(
                hardware_accel(&options(&os(&argv))).as_deref(),
                want,
                "{argv:?}"
            );
        }
    }
}
