//! The QEMU plugin, built by `build.rs` and carried inside this binary.

/// The plugin shared object, byte for byte.
pub static PLUGIN_SO: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libqemu_uftrace_plugin.so"));

/// Its file name in the cache, named by content (sha256) at build time.
pub const PLUGIN_NAME: &str = env!("QEMU_UFTRACE_PLUGIN_NAME");
