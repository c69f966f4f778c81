//! The QEMU plugins, built by `build.rs` and carried inside this binary: one per plugin-API
//! family QEMU may require (`plugin/src/api.rs`), oldest first.

/// One plugin build.
#[derive(Debug)]
pub struct EmbeddedPlugin {
    /// The `qemu_plugin_version` it declares.
    pub api: u32,
    /// The shared object, byte for byte.
    pub bytes: &'static [u8],
    /// Its file name in the cache, named by content (sha256) at build time.
    pub name: &'static str,
}

/// Every build, by API version, oldest first (none without the `embed-plugin` feature).
pub static PLUGINS: &[EmbeddedPlugin] = &[
    #[cfg(feature = "embed-plugin")]
    EmbeddedPlugin {
        api: 4,
        bytes: include_bytes!(concat!(env!("OUT_DIR"), "/plugin-v4.so")),
        name: env!("QEMU_UFTRACE_PLUGIN_V4_NAME"),
    },
    #[cfg(feature = "embed-plugin")]
    EmbeddedPlugin {
        api: 7,
        bytes: include_bytes!(concat!(env!("OUT_DIR"), "/plugin-v7.so")),
        name: env!("QEMU_UFTRACE_PLUGIN_V7_NAME"),
    },
];

/// The API versions carried, for messages: `4, 7`.
pub fn api_list() -> String {
    PLUGINS
        .iter()
        .map(|p| p.api.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
