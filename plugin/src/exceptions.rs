//! Exception returns that are really function returns.
//!
//! Early kernel and firmware code "returns" to its caller by dropping (or keeping) the
//! exception level with ERET to the link register (arm64 `init_kernel_el`). An ERET counts
//! as the top frame's return when it goes to that frame's return address and is executed
//! inside that frame's function (near its entry). Returns from interrupt handlers run in
//! vector code, not in the interrupted function, so they never close a frame here.

use crate::hot::Engine;

/// How far past a function's entry its own ERET may sit.
const SAME_FUNCTION_WINDOW: u64 = 4096;

impl Engine {
    pub fn exception_return(&mut self, now: u64, target: u64, eret_pc: u64) {
        let Some(top) = self.stacks.current().top().copied() else {
            return;
        };
        let inside_top = eret_pc.wrapping_sub(top.func) < SAME_FUNCTION_WINDOW;
        if top.ret_addr == target && inside_top {
            self.stats.eret_returns += 1;
            let now = self.clamp(now);
            self.close_top(now);
        }
    }
}
