//! The part of QEMU's TCG plugin C API this plugin uses, declared for one ABI family.
//!
//! QEMU accepts a plugin whose `qemu_plugin_version` lies between its minimum and current API
//! versions, and the ABI changed on the way (../shared/docs/qemu-plugin-api.md):
//! - v4 (QEMU 9.2, 10.0; 10.1 and 10.2 speak v5 and still accept v4): the layout below.
//! - v6 (11.0): `read_register` returns `bool`, not a size. We never use its value (the size
//!   comes from the buffer), so the v4 build also reads registers correctly there.
//! - v7 (11.1, whose minimum is 7): the vCPU init and at-exit callbacks lose the plugin id and
//!   gain a `userdata` argument, and their register functions take that `userdata`.
//!
//! One shared object exports one version, so the crate is built once per family: the default
//! build is v4, the `api-v7` feature gives v7. The CLI embeds both and picks by what the
//! running QEMU accepts. Only the callback and registration shapes differ between them:
//! `entry::register` hands the same plugin functions to QEMU whatever the build.
//!
//! v7's exact shapes were read off QEMU 11.1.3's own code (what it passes to each callback):
//! the translation callback is `(tb, userdata)`, the discontinuity callback
//! `(vcpu_index, type, from_pc, to_pc, userdata)`, vCPU init `(vcpu_index, userdata)`, at
//! exit `(userdata)`; every register function takes `userdata` last.
//!
//! Declared by hand from the documented API rather than from a binding crate: the published
//! one stops at v5, and these few declarations are all that is needed.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

#[cfg(test)]
pub mod test_stubs;

/// The API version this build declares to QEMU.
#[cfg(not(feature = "api-v7"))]
pub const API_VERSION: c_int = 4;
#[cfg(feature = "api-v7")]
pub const API_VERSION: c_int = 7;

pub type qemu_plugin_id_t = u64;

/// `qemu_info_t`: unchanged from v2 to v7.
#[repr(C)]
pub struct qemu_info_t {
    pub target_name: *const c_char,
    pub version_min: c_int,
    pub version_cur: c_int,
    pub system_emulation: bool,
    pub smp_vcpus: c_int,
    pub max_vcpus: c_int,
}

#[repr(C)]
pub struct qemu_plugin_tb {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct qemu_plugin_insn {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct qemu_plugin_scoreboard {
    _opaque: [u8; 0],
}
#[repr(C)]
pub struct qemu_plugin_register {
    _opaque: [u8; 0],
}

/// A `uint64_t` member of a scoreboard entry, as inline ops name it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct qemu_plugin_u64 {
    pub score: *mut qemu_plugin_scoreboard,
    pub offset: usize,
}

/// The leading fields of `qemu_plugin_reg_descriptor`. v5 appended `is_readonly`, so the
/// array's stride is taken from glib (`g_array_get_element_size`), never from this type.
#[repr(C)]
pub struct qemu_plugin_reg_descriptor {
    pub handle: *mut qemu_plugin_register,
    pub name: *const c_char,
}

/// glib's `GArray` header.
#[repr(C)]
pub struct GArray {
    pub data: *mut c_char,
    pub len: c_uint,
}

// glib is loaded with QEMU; the plugin API wants buffers glib can grow.
extern "C" {
    pub fn g_byte_array_new() -> *mut GByteArray;
    pub fn g_byte_array_free(array: *mut GByteArray, free_segment: c_int) -> *mut u8;
    pub fn g_array_free(array: *mut GArray, free_segment: c_int) -> *mut c_char;
    pub fn g_array_get_element_size(array: *mut GArray) -> c_uint;
}

/// glib's `GByteArray` header.
#[repr(C)]
pub struct GByteArray {
    pub data: *mut u8,
    pub len: c_uint,
}

/// `enum qemu_plugin_cb_flags`.
pub type CbFlags = c_int;
pub const CB_NO_REGS: CbFlags = 0;
pub const CB_R_REGS: CbFlags = 1;

/// `enum qemu_plugin_cond`.
pub type Cond = c_int;
pub const COND_EQ: Cond = 2;
pub const COND_NE: Cond = 3;
/// Unsigned, as QEMU compares (`TCG_COND_GTU`).
pub const COND_GT: Cond = 6;

/// `enum qemu_plugin_op`.
pub type Op = c_int;
pub const INLINE_ADD_U64: Op = 0;
pub const INLINE_STORE_U64: Op = 1;

/// `qemu_plugin_vcpu_udata_cb_t`, the same in every version.
pub type VcpuUdataCb = unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void);

/// `qemu_plugin_meminfo_t`: an opaque word describing one access.
pub type MemInfo = u32;

/// `qemu_plugin_vcpu_mem_cb_t`, the same in every version (it had `userdata` before v7).
pub type VcpuMemCb =
    unsafe extern "C" fn(vcpu_index: c_uint, info: MemInfo, vaddr: u64, userdata: *mut c_void);

/// `QEMU_PLUGIN_MEM_VALUE_U16` of `enum qemu_plugin_mem_value_type` (U8 is 0).
pub const MEM_VALUE_U16: c_int = 1;

/// `enum qemu_plugin_mem_rw`.
pub type MemRw = c_int;
pub const MEM_R: MemRw = 1;

/// `qemu_plugin_mem_value` (API 4, QEMU 9.2 on): the type tag, then a union of `uint8_t` …
/// `uint64_t` and a 128-bit pair, little-endian, of which only the tagged width is set.
#[repr(C)]
pub struct MemValue {
    pub kind: c_int,
    pub data: [u64; 2],
}

/// The discontinuity callback (QEMU 10.2 on, found with dlsym): v7 drops the id and adds
/// `userdata`, as for every callback.
#[cfg(not(feature = "api-v7"))]
pub type DisconCb = unsafe extern "C" fn(
    id: qemu_plugin_id_t,
    vcpu_index: c_uint,
    kind: c_int,
    from_pc: u64,
    to_pc: u64,
);
#[cfg(feature = "api-v7")]
pub type DisconCb = unsafe extern "C" fn(
    vcpu_index: c_uint,
    kind: c_int,
    from_pc: u64,
    to_pc: u64,
    userdata: *mut c_void,
);

extern "C" {
    pub fn qemu_plugin_tb_n_insns(tb: *const qemu_plugin_tb) -> usize;
    pub fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut qemu_plugin_insn,
        cb: VcpuMemCb,
        flags: CbFlags,
        rw: MemRw,
        userdata: *mut c_void,
    );
    /// The value the access `info` describes loaded or stored (read by QEMU from the vCPU's
    /// last access, so only inside that access's memory callback).
    pub fn qemu_plugin_mem_get_value(info: MemInfo) -> MemValue;
    pub fn qemu_plugin_tb_get_insn(tb: *const qemu_plugin_tb, idx: usize) -> *mut qemu_plugin_insn;
    pub fn qemu_plugin_insn_data(
        insn: *const qemu_plugin_insn,
        dest: *mut c_void,
        len: usize,
    ) -> usize;
    pub fn qemu_plugin_insn_vaddr(insn: *const qemu_plugin_insn) -> u64;
    pub fn qemu_plugin_insn_haddr(insn: *const qemu_plugin_insn) -> *mut c_void;
    pub fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut qemu_plugin_insn,
        cb: VcpuUdataCb,
        flags: CbFlags,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
        insn: *mut qemu_plugin_insn,
        op: Op,
        entry: qemu_plugin_u64,
        imm: u64,
    );
    pub fn qemu_plugin_register_vcpu_tb_exec_cb(
        tb: *mut qemu_plugin_tb,
        cb: VcpuUdataCb,
        flags: CbFlags,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_tb_exec_cond_cb(
        tb: *mut qemu_plugin_tb,
        cb: VcpuUdataCb,
        flags: CbFlags,
        cond: Cond,
        entry: qemu_plugin_u64,
        imm: u64,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_insn_exec_cond_cb(
        insn: *mut qemu_plugin_insn,
        cb: VcpuUdataCb,
        flags: CbFlags,
        cond: Cond,
        entry: qemu_plugin_u64,
        imm: u64,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
        tb: *mut qemu_plugin_tb,
        op: Op,
        entry: qemu_plugin_u64,
        imm: u64,
    );
    pub fn qemu_plugin_scoreboard_new(element_size: usize) -> *mut qemu_plugin_scoreboard;
    pub fn qemu_plugin_scoreboard_find(
        score: *mut qemu_plugin_scoreboard,
        vcpu_index: c_uint,
    ) -> *mut c_void;
    pub fn qemu_plugin_u64_get(entry: qemu_plugin_u64, vcpu_index: c_uint) -> u64;
    pub fn qemu_plugin_u64_set(entry: qemu_plugin_u64, vcpu_index: c_uint, val: u64);
    pub fn qemu_plugin_get_registers() -> *mut GArray;
    pub fn qemu_plugin_read_memory_vaddr(addr: u64, data: *mut GByteArray, len: usize) -> bool;
}

// The return value is a size before v6 and a bool from v6 on: declared as it is in each
// build's family, and never trusted either way (see `guest::ByteBuf::read_handle`).
#[cfg(not(feature = "api-v7"))]
extern "C" {
    pub fn qemu_plugin_read_register(
        handle: *mut qemu_plugin_register,
        buf: *mut GByteArray,
    ) -> c_int;
}
#[cfg(feature = "api-v7")]
extern "C" {
    pub fn qemu_plugin_read_register(
        handle: *mut qemu_plugin_register,
        buf: *mut GByteArray,
    ) -> bool;
}

#[cfg(not(feature = "api-v7"))]
extern "C" {
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb),
    );
    pub fn qemu_plugin_register_vcpu_init_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    );
    pub fn qemu_plugin_register_atexit_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_exit_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    );
    pub fn qemu_plugin_register_vcpu_syscall_cb(id: qemu_plugin_id_t, cb: SyscallCb);
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(id: qemu_plugin_id_t, cb: SyscallRetCb);
}

// vCPU idle and resume callbacks (a vCPU halts, e.g. WFI, and wakes): API 4 and API 7 shapes.
#[cfg(not(feature = "api-v7"))]
extern "C" {
    pub fn qemu_plugin_register_vcpu_idle_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    );
    pub fn qemu_plugin_register_vcpu_resume_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint),
    );
}
#[cfg(feature = "api-v7")]
extern "C" {
    pub fn qemu_plugin_register_vcpu_idle_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_resume_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        userdata: *mut c_void,
    );
}

// `qemu_plugin_reset` (API 4): every callback of the plugin is unregistered and every
// translation flushed (in an exclusive section, when called on a vCPU thread), then `cb`
// runs, where the plugin registers its callbacks again.
#[cfg(not(feature = "api-v7"))]
extern "C" {
    pub fn qemu_plugin_reset(id: qemu_plugin_id_t, cb: unsafe extern "C" fn(id: qemu_plugin_id_t));
}
// `qemu_plugin_reset` in API 7: `userdata` after the callback, which takes only it (read
// off 11.1.3's `plugin_reset_uninstall`: the data keeps id, cb, userdata; `cb(userdata)`).
#[cfg(feature = "api-v7")]
extern "C" {
    pub fn qemu_plugin_reset(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(userdata: *mut c_void),
        userdata: *mut c_void,
    );
}

/// The syscall entry and return callbacks in API 4: the plugin id first.
#[cfg(not(feature = "api-v7"))]
pub type SyscallCb = unsafe extern "C" fn(
    id: qemu_plugin_id_t,
    vcpu_index: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    a7: u64,
    a8: u64,
);
#[cfg(not(feature = "api-v7"))]
pub type SyscallRetCb =
    unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu_index: c_uint, num: i64, ret: i64);

#[cfg(feature = "api-v7")]
extern "C" {
    pub fn qemu_plugin_register_vcpu_tb_trans_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(tb: *mut qemu_plugin_tb, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_init_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_atexit_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_exit_cb(
        id: qemu_plugin_id_t,
        cb: unsafe extern "C" fn(vcpu_index: c_uint, userdata: *mut c_void),
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_syscall_cb(
        id: qemu_plugin_id_t,
        cb: SyscallCb,
        userdata: *mut c_void,
    );
    pub fn qemu_plugin_register_vcpu_syscall_ret_cb(
        id: qemu_plugin_id_t,
        cb: SyscallRetCb,
        userdata: *mut c_void,
    );
}

/// The syscall entry and return callbacks: v7 drops the id and adds `userdata` last (read
/// off 11.1.3's `qemu_plugin_vcpu_syscall`: vCPU index, number, a1…a8, then userdata).
#[cfg(feature = "api-v7")]
pub type SyscallCb = unsafe extern "C" fn(
    vcpu_index: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    a7: u64,
    a8: u64,
    userdata: *mut c_void,
);
#[cfg(feature = "api-v7")]
pub type SyscallRetCb =
    unsafe extern "C" fn(vcpu_index: c_uint, num: i64, ret: i64, userdata: *mut c_void);

/// `enum qemu_plugin_discon_type` bits.
pub const DISCON_INTERRUPT: c_int = 1;
pub const DISCON_EXCEPTION: c_int = 2;
pub const DISCON_HOSTCALL: c_int = 4;

/// An optional API function of this QEMU, looked up at run time: QEMU binds plugins
/// immediately, so naming a function an older QEMU lacks would fail the load.
pub fn optional(name: &std::ffi::CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// `qemu_plugin_write_memory_vaddr` (API v5, QEMU 10.1 on; the same in every ABI family).
pub type WriteMemoryVaddr = unsafe extern "C" fn(addr: u64, data: *mut GByteArray) -> bool;

/// The guest-memory write function, where this QEMU has one.
pub fn write_memory_api() -> Option<WriteMemoryVaddr> {
    let p = optional(c"qemu_plugin_write_memory_vaddr")?;
    // SAFETY: the symbol QEMU exports under this name has this signature (10.1 on).
    Some(unsafe { std::mem::transmute::<*mut c_void, WriteMemoryVaddr>(p) })
}

/// `qemu_plugin_register_vcpu_discon_cb` in this build's ABI (v7 adds `userdata`).
#[cfg(not(feature = "api-v7"))]
pub type RegisterDiscon = unsafe extern "C" fn(id: qemu_plugin_id_t, kind: c_int, cb: DisconCb);
#[cfg(feature = "api-v7")]
pub type RegisterDiscon =
    unsafe extern "C" fn(id: qemu_plugin_id_t, kind: c_int, cb: DisconCb, userdata: *mut c_void);

/// The discontinuity callback's registration function, where this QEMU has one (10.2 on,
/// whatever API version it reports).
pub fn discontinuity_api() -> Option<RegisterDiscon> {
    let p = optional(c"qemu_plugin_register_vcpu_discon_cb")?;
    // SAFETY: the symbol QEMU exports under this name has this signature in the ABI family
    // this build is for (read off 10.2.2 and 11.1.3).
    Some(unsafe { std::mem::transmute::<*mut c_void, RegisterDiscon>(p) })
}
