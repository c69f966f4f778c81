//! Checks the guests themselves under plain QEMU (no plugin): they build,
//! exit 0 and print what they should; the oracle logs parse, balance and
//! match the call structure of the source; and the natural/-nofp builds
//! really contain the leaves, tail calls and frame-less functions that
//! `TEST_PROGRAMS` promises (the properties the tracer tests rely on).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use qemu_uftrace_tests::{
    calldense_elf, check_balanced, disassemble, function_at, guest_elf, hello_elf,
    is_runtime_function, nm_functions, oracle_names, parse_oracle, run_plain_qemu, tail_calls,
    test_program, GuestProgram, OracleEvent, Variant,
};

/// Runs a guest, asserting exit status 0; returns its UART output.
fn run_ok(elf: &Path) -> String {
    let (code, uart) = run_plain_qemu(elf).expect("QEMU runs the guest");
    assert_eq!(
        code,
        0,
        "{} exited with {code}; output:\n{uart}",
        elf.display()
    );
    uart
}

/// The output lines before the oracle block.
fn program_lines(uart: &str) -> Vec<&str> {
    uart.lines()
        .map(str::trim_end)
        .take_while(|l| *l != "ORACLE-BEGIN")
        .collect()
}

/// The oracle log of a program's -oracle build, parsed and checked balanced,
/// with the oracle ELF's symbols.
fn oracle_of(program: &str) -> (Vec<OracleEvent>, BTreeMap<u64, String>) {
    let elf = guest_elf(program, Variant::Oracle).expect("guests build");
    let uart = run_ok(&elf);
    let events = parse_oracle(&uart).expect("the oracle log parses");
    check_balanced(&events).expect("the oracle log is balanced");
    (events, nm_functions(&elf).expect("nm works"))
}

/// `E name`, the children's events, `X name`.
fn call(name: &str, children: &[Vec<String>]) -> Vec<String> {
    let mut v = vec![format!("E {name}")];
    v.extend(children.iter().flatten().cloned());
    v.push(format!("X {name}"));
    v
}

fn leaf(name: &str) -> Vec<String> {
    call(name, &[])
}

/// Everything a program promises, in every variant.
fn check_program(name: &str) {
    let p: &GuestProgram = test_program(name).expect("a known test program");

    for variant in Variant::ALL {
        let elf = guest_elf(name, variant).expect("guests build");
        let uart = run_ok(&elf);
        assert_eq!(
            program_lines(&uart),
            p.output,
            "{}: unexpected output",
            elf.display()
        );
        assert_eq!(
            uart.contains("ORACLE-BEGIN"),
            variant == Variant::Oracle,
            "{}: only -oracle builds print an oracle log",
            elf.display()
        );
        // Clones or split functions would make names differ between builds.
        let syms = nm_functions(&elf).expect("nm works");
        for n in syms.values() {
            assert!(
                !n.contains('.'),
                "{}: compiler-generated function {n}",
                elf.display()
            );
        }
        for f in p.functions {
            assert!(
                syms.values().any(|n| n == f),
                "{}: no function {f}",
                elf.display()
            );
        }
    }

    check_oracle_structure(p);
    for variant in [Variant::Natural, Variant::NoFp] {
        check_code_shape(p, variant);
    }
}

/// The oracle names exactly the program's functions, and each entry's call
/// site lies in the function that was innermost when it was called.
fn check_oracle_structure(p: &GuestProgram) {
    let (events, syms) = oracle_of(p.name);
    let logged: BTreeSet<&str> = events
        .iter()
        .map(|ev| syms.get(&ev.func()).map_or("?", String::as_str))
        .collect();
    let expected: BTreeSet<&str> = p.functions.iter().copied().collect();
    assert_eq!(logged, expected, "{}: functions in the oracle log", p.name);
    assert!(logged.iter().all(|n| !is_runtime_function(n)));

    let mut stack: Vec<u64> = Vec::new();
    for ev in &events {
        match ev {
            OracleEvent::Enter { func, site } => {
                let caller = function_at(&syms, *site).map(|(_, n)| n);
                let want = match stack.last() {
                    Some(parent) => syms.get(parent).map(String::as_str),
                    None => Some("_start"),
                };
                assert_eq!(
                    caller,
                    want,
                    "{}: call site {site:#x} of {:?}",
                    p.name,
                    syms.get(func)
                );
                stack.push(*func);
            }
            OracleEvent::Exit { .. } => {
                stack.pop();
            }
        }
    }
}

/// Leaves, tail calls and frame records in the natural and -nofp builds.
fn check_code_shape(p: &GuestProgram, variant: Variant) {
    let elf = guest_elf(p.name, variant).expect("guests build");
    let what = format!("{} ({variant:?})", p.name);

    let tails: BTreeSet<(String, Option<String>)> = tail_calls(&elf)
        .expect("objdump works")
        .into_iter()
        .filter(|(f, _)| !is_runtime_function(f))
        .collect();
    let want: BTreeSet<(String, Option<String>)> = p
        .tail_calls
        .iter()
        .map(|(f, t)| (f.to_string(), t.map(str::to_owned)))
        .collect();
    assert_eq!(tails, want, "{what}: tail calls");

    let funcs = disassemble(&elf).expect("objdump works");
    for f in funcs
        .iter()
        .filter(|f| p.functions.contains(&f.name.as_str()))
    {
        let is_leaf = p.leaves.contains(&f.name.as_str());
        let calls = f.mnemonics().any(|m| m == "bl" || m == "blr")
            || tails.iter().any(|(t, _)| *t == f.name);
        assert_eq!(calls, !is_leaf, "{what}: {} calls something", f.name);
        if is_leaf {
            // A leaf keeps its return address in x30 and never saves it.
            assert!(
                !f.insns.iter().any(|(_, t)| t.contains("x30")),
                "{what}: leaf {} touches x30",
                f.name
            );
        }
        let frameless = variant == Variant::NoFp || p.frameless.contains(&f.name.as_str());
        assert_eq!(
            f.has_frame_record(),
            !frameless,
            "{what}: {} frame record",
            f.name
        );
    }
}

#[test]
fn nested_guest() {
    check_program("nested");
    let (events, syms) = oracle_of("nested");
    let level4 = || call("nest_level4", &[leaf("nest_leaf")]);
    let level1 = || {
        call(
            "nest_level1",
            &[
                call("nest_level2", &[call("nest_level3", &[level4(), level4()])]),
                leaf("nest_leaf"),
            ],
        )
    };
    let want = call("main", &[level1(), level1()]);
    assert_eq!(oracle_names(&events, &syms), want);
}

#[test]
fn recursion_guest() {
    check_program("recursion");
    let (events, syms) = oracle_of("recursion");
    let names = oracle_names(&events, &syms);
    let count = |n: &str| names.iter().filter(|s| *s == &format!("E {n}")).count();
    assert_eq!(count("rec_depth"), 13);
    assert_eq!(count("fib"), 177);
    assert_eq!(count("rec_even") + count("rec_odd"), 11);

    // Nesting depth of each function's own recursion.
    let mut depth: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for s in &names {
        let (kind, name) = s.split_at(2);
        let (cur, max) = depth.entry(name.to_owned()).or_default();
        if kind == "E " {
            *cur += 1;
            *max = (*max).max(*cur);
        } else {
            *cur -= 1;
        }
    }
    assert_eq!(depth["rec_depth"].1, 13);
    assert_eq!(depth["fib"].1, 10);
    assert_eq!(depth["rec_even"].1 + depth["rec_odd"].1, 11);
}

#[test]
fn fnptr_guest() {
    check_program("fnptr");
    for variant in [Variant::Natural, Variant::NoFp] {
        let elf = guest_elf("fnptr", variant).expect("guests build");
        let funcs = disassemble(&elf).expect("objdump works");
        for name in ["fp_apply", "main"] {
            let f = funcs
                .iter()
                .find(|f| f.name == name)
                .expect("function present");
            assert!(
                f.mnemonics().any(|m| m == "blr"),
                "{name} ({variant:?}) calls through a pointer"
            );
        }
    }
    let (events, syms) = oracle_of("fnptr");
    let apply = |op: Vec<String>| call("fp_apply", &[op]);
    let want = call(
        "main",
        &[
            call(
                "fp_apply_all",
                &[
                    apply(leaf("op_add")),
                    apply(leaf("op_sub")),
                    apply(call("op_twice_sum", &[leaf("op_add")])),
                ],
            ),
            leaf("op_sub"),
            call("table_call", &[call("op_twice_sum", &[leaf("op_add")])]),
        ],
    );
    assert_eq!(oracle_names(&events, &syms), want);
}

#[test]
fn leaf_guest() {
    check_program("leaf");
    let (events, syms) = oracle_of("leaf");
    let round = [leaf("leaf_add"), leaf("leaf_mix"), leaf("leaf_stack")].concat();
    let want = call(
        "main",
        &[
            call(
                "leaf_caller",
                &[round.clone(), round.clone(), round.clone(), round],
            ),
            leaf("leaf_add"),
        ],
    );
    assert_eq!(oracle_names(&events, &syms), want);
}

#[test]
fn tailcall_guest() {
    check_program("tailcall");
    // In the oracle build the tail calls are ordinary calls, so the log shows
    // the source's nesting.
    let (events, syms) = oracle_of("tailcall");
    let c = || call("tail_c", &[leaf("tail_leaf")]);
    let want = call(
        "main",
        &[call(
            "tail_driver",
            &[
                call("tail_a", &[call("tail_b", &[c()])]),
                call("tail_to_leaf", &[leaf("tail_leaf")]),
                call("tail_via_ptr", &[c()]),
                call("tail_mixed", &[leaf("tail_leaf"), c()]),
            ],
        )],
    );
    assert_eq!(oracle_names(&events, &syms), want);
}

#[test]
fn longjmp_guest() {
    check_program("longjmp");
    let (events, syms) = oracle_of("longjmp");
    // The first lj_outer longjmps out of lj_level3: the three discarded
    // frames exit (innermost first) before lj_after is entered.
    let levels = call("lj_level1", &[call("lj_level2", &[leaf("lj_level3")])]);
    let want = call(
        "main",
        &[
            call("lj_outer", &[levels.clone(), leaf("lj_after")]),
            call("lj_outer", &[levels]),
        ],
    );
    assert_eq!(oracle_names(&events, &syms), want);
    let elf = guest_elf("longjmp", Variant::Natural).expect("guests build");
    let syms = nm_functions(&elf).expect("nm works");
    assert!(syms.values().any(|n| n == "setjmp") && syms.values().any(|n| n == "longjmp"));
}

#[test]
fn hello_example() {
    let elf = hello_elf().expect("guests build");
    let uart = run_ok(&elf);
    assert_eq!(
        uart.lines().map(str::trim_end).collect::<Vec<_>>(),
        [
            "Hello from qemu-uftrace!",
            "sum_squares(10) = 385",
            "factorial(10) = 3628800",
            "apply_op(op_mul, 6, 7) = 42",
            "Goodbye.",
        ]
    );
    let syms = nm_functions(&elf).expect("nm works");
    for f in [
        "main",
        "run_demo",
        "compute_report",
        "sum_squares",
        "square",
        "factorial",
        "apply_op",
        "op_mul",
        "uart_putc",
    ] {
        assert!(syms.values().any(|n| n == f), "hello.elf has no {f}");
    }
}

#[test]
fn calldense_runs() {
    let elf = calldense_elf().expect("guests build");
    let uart = run_ok(&elf);
    assert!(
        uart.starts_with("calldense: 20000000 calls, checksum "),
        "unexpected output: {uart}"
    );
}
