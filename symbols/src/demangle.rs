//! Optional demangling of Rust and C++ names.

/// The demangled form of `name`, or `name` itself when it is not mangled.
pub(crate) fn demangle(name: String) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(&name) {
        // `{:#}` leaves out the hash suffix, as uftrace and perf show Rust names.
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name.as_bytes()) {
            if let Ok(d) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return d;
            }
        }
    }
    name
}
