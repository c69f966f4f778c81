//! User mode: the program's first instruction.

use std::ffi::{c_uint, c_void};

/// User mode: the program's first instruction (registered with R_REGS by `translate`).
pub extern "C" fn on_startup(_vcpu: c_uint, _userdata: *mut c_void) {
    crate::state::guard("the program's start", || {
        if crate::handlers::usermap::startup() {
            // After QEMU's own signal set-up, which reads the dispositions it finds.
            crate::lifecycle::stop_signals::install();
        }
    });
}
