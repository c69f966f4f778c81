//! QEMU's and glib's functions as the plugin's unit tests see them: the test binary is an
//! executable, which cannot leave them to the QEMU that would load the plugin. Scoreboards
//! and byte arrays work (plain memory); guests have no registers and no readable memory;
//! registration does nothing.

#![allow(clippy::missing_safety_doc)]

use super::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// vCPUs a test scoreboard holds.
const STUB_VCPUS: usize = 64;

struct StubScoreboard {
    element: usize,
    data: Vec<u64>,
}

#[no_mangle]
pub extern "C" fn g_byte_array_new() -> *mut GByteArray {
    Box::into_raw(Box::new(GByteArray {
        data: std::ptr::null_mut(),
        len: 0,
    }))
}

/// How many byte arrays the stub `g_byte_array_free` freed.
pub static BYTE_ARRAYS_FREED: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

#[no_mangle]
pub unsafe extern "C" fn g_byte_array_free(
    array: *mut GByteArray,
    _free_segment: c_int,
) -> *mut u8 {
    BYTE_ARRAYS_FREED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: made by the stub `g_byte_array_new` (never given data here).
    drop(unsafe { Box::from_raw(array) });
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn g_array_free(_array: *mut GArray, _free_segment: c_int) -> *mut c_char {
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn g_array_get_element_size(_array: *mut GArray) -> c_uint {
    0
}

#[no_mangle]
pub extern "C" fn qemu_plugin_scoreboard_new(element_size: usize) -> *mut qemu_plugin_scoreboard {
    let words = element_size.div_ceil(8) * STUB_VCPUS;
    Box::into_raw(Box::new(StubScoreboard {
        element: element_size,
        data: vec![0; words],
    }))
    .cast()
}

#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_scoreboard_find(
    score: *mut qemu_plugin_scoreboard,
    vcpu_index: c_uint,
) -> *mut c_void {
    // SAFETY: made by the stub `qemu_plugin_scoreboard_new`, never freed.
    let s = unsafe { &mut *score.cast::<StubScoreboard>() };
    assert!(
        (vcpu_index as usize) < STUB_VCPUS,
        "test scoreboards hold {STUB_VCPUS} vCPUs"
    );
    // SAFETY: within the allocation (asserted above).
    unsafe {
        s.data
            .as_mut_ptr()
            .cast::<u8>()
            .add(vcpu_index as usize * s.element)
    }
    .cast()
}

#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_u64_get(entry: qemu_plugin_u64, vcpu_index: c_uint) -> u64 {
    // SAFETY: a stub scoreboard's element, as QEMU's own function reads it.
    unsafe {
        qemu_plugin_scoreboard_find(entry.score, vcpu_index)
            .cast::<u8>()
            .add(entry.offset)
            .cast::<u64>()
            .read()
    }
}

#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_u64_set(entry: qemu_plugin_u64, vcpu_index: c_uint, val: u64) {
    // SAFETY: as in `qemu_plugin_u64_get`.
    unsafe {
        qemu_plugin_scoreboard_find(entry.score, vcpu_index)
            .cast::<u8>()
            .add(entry.offset)
            .cast::<u64>()
            .write(val)
    }
}

#[no_mangle]
pub extern "C" fn qemu_plugin_get_registers() -> *mut GArray {
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn qemu_plugin_read_memory_vaddr(
    _addr: u64,
    _data: *mut GByteArray,
    _len: usize,
) -> bool {
    false
}

#[cfg(not(feature = "api-v7"))]
#[no_mangle]
pub extern "C" fn qemu_plugin_read_register(
    _handle: *mut qemu_plugin_register,
    _buf: *mut GByteArray,
) -> c_int {
    -1
}
#[cfg(feature = "api-v7")]
#[no_mangle]
pub extern "C" fn qemu_plugin_read_register(
    _handle: *mut qemu_plugin_register,
    _buf: *mut GByteArray,
) -> bool {
    false
}

#[no_mangle]
pub extern "C" fn qemu_plugin_mem_get_value(_info: MemInfo) -> MemValue {
    MemValue {
        kind: 0,
        data: [0; 2],
    }
}

#[no_mangle]
pub extern "C" fn qemu_plugin_tb_n_insns(_tb: *const qemu_plugin_tb) -> usize {
    0
}

#[no_mangle]
pub extern "C" fn qemu_plugin_tb_get_insn(
    _tb: *const qemu_plugin_tb,
    _idx: usize,
) -> *mut qemu_plugin_insn {
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn qemu_plugin_insn_data(
    _insn: *const qemu_plugin_insn,
    _dest: *mut c_void,
    _len: usize,
) -> usize {
    0
}

#[no_mangle]
pub extern "C" fn qemu_plugin_insn_vaddr(_insn: *const qemu_plugin_insn) -> u64 {
    0
}

#[no_mangle]
pub extern "C" fn qemu_plugin_insn_haddr(_insn: *const qemu_plugin_insn) -> *mut c_void {
    std::ptr::null_mut()
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_mem_cb(
    _insn: *mut qemu_plugin_insn,
    _cb: VcpuMemCb,
    _flags: CbFlags,
    _rw: MemRw,
    _userdata: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_insn_exec_cb(
    _insn: *mut qemu_plugin_insn,
    _cb: VcpuUdataCb,
    _flags: CbFlags,
    _userdata: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
    _insn: *mut qemu_plugin_insn,
    _op: Op,
    _entry: qemu_plugin_u64,
    _imm: u64,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_tb_exec_cb(
    _tb: *mut qemu_plugin_tb,
    _cb: VcpuUdataCb,
    _flags: CbFlags,
    _userdata: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_tb_exec_cond_cb(
    _tb: *mut qemu_plugin_tb,
    _cb: VcpuUdataCb,
    _flags: CbFlags,
    _cond: Cond,
    _entry: qemu_plugin_u64,
    _imm: u64,
    _userdata: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_insn_exec_cond_cb(
    _insn: *mut qemu_plugin_insn,
    _cb: VcpuUdataCb,
    _flags: CbFlags,
    _cond: Cond,
    _entry: qemu_plugin_u64,
    _imm: u64,
    _userdata: *mut c_void,
) {
}

#[no_mangle]
pub extern "C" fn qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
    _tb: *mut qemu_plugin_tb,
    _op: Op,
    _entry: qemu_plugin_u64,
    _imm: u64,
) {
}

#[cfg(not(feature = "api-v7"))]
mod registration {
    use super::*;

    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_idle_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_resume_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    ) {
    }

    #[no_mangle]
    pub extern "C" fn qemu_plugin_reset(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t),
    ) {
    }

    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_tb_trans_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb),
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_init_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_atexit_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_exit_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_syscall_cb(_id: qemu_plugin_id_t, _cb: SyscallCb) {}
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_syscall_ret_cb(
        _id: qemu_plugin_id_t,
        _cb: SyscallRetCb,
    ) {
    }
}

#[cfg(feature = "api-v7")]
mod registration {
    use super::*;

    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_idle_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_resume_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn qemu_plugin_reset(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }

    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_tb_trans_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(tb: *mut qemu_plugin_tb, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_init_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_atexit_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_exit_cb(
        _id: qemu_plugin_id_t,
        _cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_syscall_cb(
        _id: qemu_plugin_id_t,
        _cb: SyscallCb,
        _userdata: *mut c_void,
    ) {
    }
    #[no_mangle]
    pub extern "C" fn qemu_plugin_register_vcpu_syscall_ret_cb(
        _id: qemu_plugin_id_t,
        _cb: SyscallRetCb,
        _userdata: *mut c_void,
    ) {
    }
}
