//! A Rust program for the demangling test (cli/tests/record_user_signals.rs): its functions
//! are named with Rust's legacy mangling (`_ZN5shapes5total17h…E`), which uftrace shows as
//! `shapes::total`. Built by `make rust` with the host's rustc, for x86_64 only.

mod geometry {
    pub struct Square(pub u64);

    impl Square {
        #[inline(never)]
        pub fn area(&self) -> u64 {
            self.0 * self.0
        }
    }
}

#[inline(never)]
fn total(squares: &[geometry::Square]) -> u64 {
    squares.iter().map(|s| s.area()).sum()
}

fn main() {
    let squares = vec![geometry::Square(3), geometry::Square(4)];
    println!("total={}", total(&squares));
}
