//! The QEMU plugin, built by `build.rs` and carried inside this binary.

/// The plugin shared object, byte for byte.
pub static PLUGIN_SO: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libqemu_uftrace_plugin.so"));
