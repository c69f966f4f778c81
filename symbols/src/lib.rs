//! Symbol sources for qemu-uftrace traces.
