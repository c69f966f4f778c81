//! x86: where exceptions are delivered through, from the loads of `lidt` (`vcpu::vectors`).

use crate::ffi;
use crate::vcpu;
use std::ffi::{c_uint, c_void};

/// The memory callback of an instruction loading the vector table's place (x86 `lidt`):
/// its 2-byte load is the limit, the other the base, masked by `data` (the instruction's
/// base mask, from `Isa::loads_vector_table`).
///
/// # Safety
/// Registered as a read callback of that instruction alone.
pub unsafe extern "C" fn on_vector_table_load(
    vcpu_index: c_uint,
    info: ffi::MemInfo,
    _vaddr: u64,
    data: *mut c_void,
) {
    // SAFETY: inside the memory callback of the access `info` describes.
    let value = unsafe { ffi::qemu_plugin_mem_get_value(info) };
    vcpu::with(vcpu_index, |v| {
        v.vectors
            .load(value.kind == ffi::MEM_VALUE_U16, value.data[0], data as u64)
    });
}
