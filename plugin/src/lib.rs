//! qemu-uftrace TCG plugin.
