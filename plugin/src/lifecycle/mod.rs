//! The run's lifecycle: vCPUs starting and ending (`vcpus`), user-mode processes forking and
//! exec'ing (`process`), stopping signals (`stop_signals`), and the end (`finish`).

pub mod finish;
pub mod image;
pub mod process;
pub mod record_watch;
pub mod stop_signals;
pub mod vcpus;
