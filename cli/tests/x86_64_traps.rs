//! An x86_64 guest that takes each kind of exception on purpose (`tests/guests/x86_64/
//! traps.c`): it loads an IDT with `lidt`, then takes an INT3, a #UD, a #GP, a #PF and an
//! `INT 0x80`, each from a function of its own, served by a C handler behind an entry stub
//! and left by IRETQ. QEMU gives plugins no vector: the trace must name each one, from the
//! raising instruction or the IDT, under the function that raised it, with the handler
//! beneath, once (QEMU reports each x86 exception twice), closed by its IRETQ, on the QEMUs
//! that report exceptions (10.2.2, 11.1.3). The system call's handler first runs an IRETQ to
//! its own next instruction, as Linux's `sync_core` does: that one closes nothing.

mod common;

use common::record_argv;
use qemu_uftrace_tests::replay::uftrace;
use qemu_uftrace_tests::x86_64_guests::{
    system_qemus_x86_64, x86_64_guest_elf, x86_64_qemu_args_on,
};
use qemu_uftrace_tests::{is_runtime_function, Variant};

/// `main`'s calls, each line a call, indented two spaces per level. Each entry stub ends
/// with `jmp trap_common`: the exception's own code going to its handler, which the entry
/// (`[int3]` …) stands for, as for arm64's vector slots (`b el0t_64_sync`): no call.
const EXPECTED: &str = "
main
  set_gate
  set_gate
  set_gate
  set_gate
  set_gate
  load_idt
  cause_int3
    [int3]
      trap_handler
        on_int3
  cause_ud
    [invalid-op]
      trap_handler
        on_ud
  cause_gp
    [general-protection]
      trap_handler
        on_gp
  cause_pf
    [page-fault]
      trap_handler
        on_pf
  cause_svc
    [svc]
      trap_handler
        on_svc
          iret_to_self
          synced
";

#[test]
fn x86_64_exceptions_are_named_by_their_vector() {
    let elf = x86_64_guest_elf("traps", Variant::Natural).expect("build guests");
    let qemus: Vec<_> = system_qemus_x86_64()
        .into_iter()
        .filter(|q| q.label != "10.0")
        .collect();
    assert_eq!(qemus.len(), 2, "expected QEMU 10.2.2 and 11.1.3");
    for qemu in qemus {
        let (_tmp, dir, console) = record_argv(&x86_64_qemu_args_on(&qemu.program, &elf), &[]);
        // SeaBIOS's last words have no newline before the guest's.
        assert!(
            console
                .lines()
                .any(|l| l.trim_end().ends_with("seen = 111111")),
            "traps.elf on {}: console:\n{console}",
            qemu.label
        );
        let what = format!("traps.elf on {}", qemu.label);
        let d = dir.to_string_lossy().to_string();
        let replay =
            uftrace(&["replay", "--no-pager", "-F", "^main$", "-d", &d]).expect("uftrace replay");
        // `name() {`, `name();`: the calls under main, indented as uftrace shows them.
        let calls: Vec<String> = replay
            .lines()
            .filter_map(|l| l.split_once("] | ").map(|(_, f)| f.trim_end()))
            .filter(|f| !f.trim_start().starts_with('}'))
            .map(|f| {
                f.trim_end_matches(" {")
                    .trim_end_matches(';')
                    .trim_end_matches("()")
            })
            .map(str::to_string)
            .filter(|f| !is_runtime_function(f.trim_start()))
            .collect();
        assert_eq!(calls, tree_lines(EXPECTED), "{what}:\n{replay}");
    }
}

/// The expected tree as indented lines (one per call), as `calls` above has them.
fn tree_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}
