//! The install's archive work (`cargo xtask`, see `main.rs`): Debian package listings, the
//! layouts kernel files have had, and keeping a file out of a package atomically; and the test
//! runner `scripts/test.sh` uses (`testrun`).

pub mod deb;
pub mod layout;
pub mod listing;
pub mod testrun;
