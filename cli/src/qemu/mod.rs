//! Understanding the QEMU command line we are given, one job per file: which emulator it
//! runs (`emulator`), how QEMU splits it into options and values (`options`), which guest
//! images it loads, our symbol sources (`images`), which options we refuse (`refusals`),
//! where our `-plugin` option goes (`rewrite`), and a user-mode command's options and
//! program (`user`). Pure functions: nothing here runs QEMU.

pub mod emulator;
pub mod images;
pub mod options;
pub mod refusals;
pub mod rewrite;
pub mod user;
pub mod user_maps;
pub mod user_procs;

pub use emulator::{detect_emulator, Emulator, Mode};
pub use images::{file_is_elf, guest_images, GuestImage, ImageOrigin};
pub use options::{escape_keyval, last_option_key, memory, options, QemuOption};
pub use rewrite::{plugin_option, with_plugin};
