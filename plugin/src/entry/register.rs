//! QEMU's callbacks in this build's ABI shapes (`ffi`), each handing over to the plugin's own
//! function, and their registration at install.

use crate::ffi::*;
use crate::state::guard;
use std::ffi::{c_int, c_uint, c_void};

// The callbacks in this build's shapes, each handing over to the plugin's own function.

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    // SAFETY: QEMU passes a live block handle for the duration of the callback.
    guard("translation", || unsafe {
        crate::entry::translate::on_tb_translate(tb)
    });
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_tb_trans(tb: *mut qemu_plugin_tb, _userdata: *mut c_void) {
    // SAFETY: QEMU passes a live block handle for the duration of the callback.
    guard("translation", || unsafe {
        crate::entry::translate::on_tb_translate(tb)
    });
}

/// A vCPU halts or wakes: a moment to switch tracing where no block is instrumented.
#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_idle_or_resume(_id: qemu_plugin_id_t, _vcpu_index: c_uint) {
    guard("a switch", crate::handlers::switch::poke);
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_idle_or_resume(_vcpu_index: c_uint, _userdata: *mut c_void) {
    guard("a switch", crate::handlers::switch::poke);
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_vcpu_init(_id: qemu_plugin_id_t, vcpu_index: c_uint) {
    guard("vCPU init", || {
        crate::lifecycle::vcpus::vcpu_init(vcpu_index)
    });
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_vcpu_init(vcpu_index: c_uint, _userdata: *mut c_void) {
    guard("vCPU init", || {
        crate::lifecycle::vcpus::vcpu_init(vcpu_index)
    });
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_vcpu_exit(_id: qemu_plugin_id_t, vcpu_index: c_uint) {
    guard("vCPU exit", || {
        crate::lifecycle::vcpus::vcpu_exit(vcpu_index)
    });
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_vcpu_exit(vcpu_index: c_uint, _userdata: *mut c_void) {
    guard("vCPU exit", || {
        crate::lifecycle::vcpus::vcpu_exit(vcpu_index)
    });
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_exit(_id: qemu_plugin_id_t, _userdata: *mut c_void) {
    guard("the end", crate::lifecycle::finish::finish);
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_exit(_userdata: *mut c_void) {
    guard("the end", crate::lifecycle::finish::finish);
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_discon(
    _id: qemu_plugin_id_t,
    vcpu_index: c_uint,
    kind: c_int,
    from_pc: u64,
    to_pc: u64,
) {
    guard("an exception entry", || {
        crate::handlers::callbacks::on_discontinuity(vcpu_index, kind, from_pc, to_pc)
    });
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_discon(
    vcpu_index: c_uint,
    kind: c_int,
    from_pc: u64,
    to_pc: u64,
    _userdata: *mut c_void,
) {
    guard("an exception entry", || {
        crate::handlers::callbacks::on_discontinuity(vcpu_index, kind, from_pc, to_pc)
    });
}

#[cfg(not(feature = "api-v7"))]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_syscall(
    _id: qemu_plugin_id_t,
    vcpu_index: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    _a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
) {
    syscall(vcpu_index, num, [a1, a2, a3, a5, a6]);
}
#[cfg(feature = "api-v7")]
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn on_syscall(
    vcpu_index: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    _a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
    _userdata: *mut c_void,
) {
    syscall(vcpu_index, num, [a1, a2, a3, a5, a6]);
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_syscall_ret(_id: qemu_plugin_id_t, vcpu: c_uint, num: i64, ret: i64) {
    syscall_ret(vcpu, num, ret);
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_syscall_ret(vcpu: c_uint, num: i64, ret: i64, _userdata: *mut c_void) {
    syscall_ret(vcpu, num, ret);
}

/// Registers the system calls' callbacks (user mode): with the rest of ours, or alone for
/// an untraced image.
///
/// # Safety
/// `id` is this plugin's id.
pub unsafe fn register_syscalls(id: qemu_plugin_id_t) {
    #[cfg(not(feature = "api-v7"))]
    unsafe {
        qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret);
    }
    #[cfg(feature = "api-v7")]
    unsafe {
        let none = std::ptr::null_mut();
        qemu_plugin_register_vcpu_syscall_cb(id, on_syscall, none);
        qemu_plugin_register_vcpu_syscall_ret_cb(id, on_syscall_ret, none);
    }
}

/// Registers the discontinuity callback for interrupts, exceptions and host calls, where
/// this QEMU has it. Returns whether it did.
///
/// # Safety
/// `id` is this plugin's id, during `qemu_plugin_install`.
pub unsafe fn register_discontinuities(id: qemu_plugin_id_t) -> bool {
    let Some(register) = discontinuity_api() else {
        return false;
    };
    let all = DISCON_INTERRUPT | DISCON_EXCEPTION | DISCON_HOSTCALL;
    #[cfg(not(feature = "api-v7"))]
    unsafe {
        register(id, all, on_discon)
    };
    #[cfg(feature = "api-v7")]
    unsafe {
        register(id, all, on_discon, std::ptr::null_mut())
    };
    true
}

/// Registers the translation, vCPU init and exit callbacks in this build's ABI, and with
/// `vcpu_exits` (user mode, where each guest thread is a vCPU that ends with the thread)
/// the vCPU exit callback and the syscall callbacks that follow file mappings (`usermap`).
///
/// # Safety
/// `id` is this plugin's id, during `qemu_plugin_install`.
pub unsafe fn register_callbacks(id: qemu_plugin_id_t, vcpu_exits: bool) {
    // Tracing off with nothing to count or trigger: no translation callback at all (QEMU's
    // cost of one is most of the tracer's while off); a vCPU's halt or wake, an interrupt
    // or a system call switches it back on (`handlers::switch`).
    let translates = crate::handlers::switch::translates();
    #[cfg(not(feature = "api-v7"))]
    unsafe {
        if translates {
            qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
        }
        qemu_plugin_register_vcpu_idle_cb(id, on_idle_or_resume);
        qemu_plugin_register_vcpu_resume_cb(id, on_idle_or_resume);
        qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init);
        if vcpu_exits {
            qemu_plugin_register_vcpu_exit_cb(id, on_vcpu_exit);
            register_syscalls(id);
        }
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    }
    #[cfg(feature = "api-v7")]
    unsafe {
        let none = std::ptr::null_mut();
        if translates {
            qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans, none);
        }
        qemu_plugin_register_vcpu_idle_cb(id, on_idle_or_resume, none);
        qemu_plugin_register_vcpu_resume_cb(id, on_idle_or_resume, none);
        qemu_plugin_register_vcpu_init_cb(id, on_vcpu_init, none);
        if vcpu_exits {
            qemu_plugin_register_vcpu_exit_cb(id, on_vcpu_exit, none);
            register_syscalls(id);
        }
        qemu_plugin_register_atexit_cb(id, on_exit, none);
    }
}

/// This plugin's id, for the resets that switch tracing (`handlers::switch`).
static ID: std::sync::OnceLock<qemu_plugin_id_t> = std::sync::OnceLock::new();
/// Whether the discontinuity callback was registered at install (registered again after
/// each reset).
static DISCONTINUITIES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Keeps `id` for [`request_reset`]; `discontinuities`: whether install registered them.
pub fn remember(id: qemu_plugin_id_t, discontinuities: bool) {
    let _ = ID.set(id);
    DISCONTINUITIES.store(discontinuities, std::sync::atomic::Ordering::Relaxed);
}

/// Asks QEMU to flush every translation and drop our callbacks, then call [`on_reset`]
/// (on a vCPU thread: in an exclusive section with every vCPU stopped).
pub fn request_reset() {
    let Some(&id) = ID.get() else {
        return;
    };
    // SAFETY: our own id and a callback of this build's ABI.
    #[cfg(not(feature = "api-v7"))]
    unsafe {
        qemu_plugin_reset(id, on_reset)
    };
    #[cfg(feature = "api-v7")]
    unsafe {
        qemu_plugin_reset(id, on_reset, std::ptr::null_mut())
    };
}

#[cfg(not(feature = "api-v7"))]
unsafe extern "C" fn on_reset(_id: qemu_plugin_id_t) {
    reset_done();
}
#[cfg(feature = "api-v7")]
unsafe extern "C" fn on_reset(_userdata: *mut c_void) {
    reset_done();
}

/// A forked child that runs untraced (`lifecycle::process`) keeps only the system calls'
/// callbacks, which follow its execs: asked for by [`retire`], taken at the reset.
static RETIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// User mode, a forked child the size cap has no room for: every translation and callback
/// dropped (QEMU runs it at its own speed), but the system calls' (`register_syscalls`).
pub fn retire() {
    RETIRED.store(true, std::sync::atomic::Ordering::Relaxed);
    request_reset();
}

/// The reset is done: the switch is applied and every callback registered again (a
/// retired image's system calls' alone).
fn reset_done() {
    let Some(&id) = ID.get() else {
        return;
    };
    if RETIRED.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: registering our callbacks for our own id.
        unsafe { register_syscalls(id) };
        return;
    }
    guard("a switch", crate::handlers::switch::apply);
    let system = crate::state::system_mode();
    // SAFETY: registering our callbacks for our own id, as at install.
    unsafe {
        register_callbacks(id, !system);
        if DISCONTINUITIES.load(std::sync::atomic::Ordering::Relaxed) {
            register_discontinuities(id);
        }
    }
}

/// A syscall starts (user mode): file mappings, exec, signal handlers (an untraced image's:
/// its execs only).
fn syscall(vcpu_index: c_uint, num: i64, [a1, a2, a3, a5, a6]: [u64; 5]) {
    guard("a syscall", || {
        if crate::lifecycle::image::untraced() {
            return crate::lifecycle::process::syscall(vcpu_index, num, a1, a2, a3);
        }
        crate::handlers::usermap::syscall(num, a1, a2, a3, a5, a6);
        crate::lifecycle::process::syscall(vcpu_index, num, a1, a2, a3);
        crate::handlers::signals::syscall(vcpu_index, num, a1, a2);
        crate::handlers::switch::at_syscall(num, a1);
    });
}

/// A syscall returned (user mode): mappings, fork, the clock (an untraced image's: its
/// forks only).
fn syscall_ret(vcpu: c_uint, num: i64, ret: i64) {
    guard("a syscall's return", || {
        if crate::lifecycle::image::untraced() {
            return crate::lifecycle::process::syscall_ret(vcpu, ret);
        }
        crate::handlers::usermap::syscall_ret(num, ret);
        crate::handlers::switch::at_syscall_ret(ret);
        crate::lifecycle::process::syscall_ret(vcpu, ret);
        crate::handlers::after_syscall(vcpu);
    });
}
