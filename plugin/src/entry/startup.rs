//! User mode: the program's first instruction.

use std::ffi::{c_uint, c_void};

/// User mode: the program's first instruction (registered with R_REGS by `translate`).
pub extern "C" fn on_startup(vcpu: c_uint, _userdata: *mut c_void) {
    crate::state::guard("the program's start", || {
        let pending = crate::state::aims::pending();
        if crate::handlers::usermap::startup() {
            if let Some(cfg) = crate::state::config() {
                let dir = crate::lifecycle::image::files_dir(&cfg.out);
                crate::handlers::usermap::save_vdso(&dir);
            }
            if pending {
                // Placed by the entry point just read (or, unread, the run-time ones
                // alone): this vCPU's gates, before the program's first call.
                let aims = crate::state::aims::now();
                crate::vcpu::with(vcpu, |v| {
                    v.engine
                        .set_gates(aims.filter.clone(), aims.notrace.clone())
                });
                if crate::state::aims::pending() {
                    eprintln!(
                        "qemu-uftrace plugin: the program's entry point was not found: \
                         the options naming its functions cannot be placed"
                    );
                }
            }
            // After QEMU's own signal set-up, which reads the dispositions it finds.
            crate::lifecycle::stop_signals::install();
        }
    });
}
