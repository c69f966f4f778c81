//! What QEMU calls: the install entry point (`install`), the callbacks in this build's ABI
//! and their registration (`register`), and translation-time instrumentation (`translate`).

pub mod install;
pub mod register;
pub mod startup;
pub mod translate;
