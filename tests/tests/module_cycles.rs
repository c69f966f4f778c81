//! No module of any crate uses, directly or through others, a module that uses it back: each
//! crate reads bottom-up. Finer than `shared/tools/module_cycles.py`, which sees top-level
//! modules only: here every file is a module (`vcpu/clock.rs` is `vcpu::clock`, a `mod.rs`
//! its folder), so a cycle inside one layer of the plugin fails too. An edge is a path that
//! names a module (`crate::a::b`, `super::b`, a child `b::`, `use` lists included), resolved
//! to the longest prefix that is a file; `mod` declarations and `#[cfg(test)]` modules are
//! not edges, nor is the crate root's use of its modules (its facade: re-exports, `main`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rs_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` is `[a, b]`, `a/mod.rs` is `[a]`, `lib.rs` and `main.rs` are `[]`.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The file's text without comments and without its test module (conventionally last).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|n| n.trim_start().starts_with("mod "))
        {
            break;
        }
        if !t.starts_with("//") {
            out.push_str(line.split(" // ").next().unwrap_or(""));
            out.push('\n');
        }
    }
    out
}

/// Every path in `code` as segments (`a::b::c`), `use` lists expanded one level.
fn paths(code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == ':')) {
            i += 1;
            continue;
        }
        // A path starts here: identifiers joined by `::`, maybe ending in a `{…}` list.
        let mut segs = vec![String::new()];
        let mut j = i;
        loop {
            while j < bytes.len() && ident(bytes[j]) {
                segs.last_mut().expect("a segment").push(bytes[j]);
                j += 1;
            }
            if j + 1 < bytes.len() && bytes[j] == ':' && bytes[j + 1] == ':' {
                j += 2;
                if j < bytes.len() && bytes[j] == '{' {
                    let end = bytes[j..].iter().position(|&c| c == '}').map(|p| j + p);
                    let inner: String = bytes[j + 1..end.unwrap_or(bytes.len())].iter().collect();
                    for item in inner.split(',') {
                        let mut p = segs.clone();
                        p.extend(
                            item.split("::")
                                .map(|s| s.split_whitespace().next().unwrap_or("").to_string())
                                .filter(|s| !s.is_empty() && s != "self" && s != "*"),
                        );
                        out.push(p);
                    }
                    j = end.unwrap_or(bytes.len());
                    segs.clear();
                    break;
                }
                segs.push(String::new());
                continue;
            }
            break;
        }
        if segs.len() > 1 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// The module `path` (as written in `from`) names, if any: the longest prefix that is one.
fn resolve(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let here = from;
    let (mut base, rest): (Module, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (here.clone(), &path[1..]),
        Some("super") => {
            let mut b = here.clone();
            let mut rest = path;
            while rest.first().map(String::as_str) == Some("super") {
                b.pop();
                rest = &rest[1..];
            }
            (b, rest)
        }
        // A child module named relatively (`config::parse` in `state/mod.rs`).
        Some(first) => {
            let mut child = here.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
            (here.clone(), path)
        }
        None => return None,
    };
    let mut best = None;
    if !base.is_empty() || path.first().map(String::as_str) == Some("crate") {
        best = Some(base.clone());
    }
    for seg in rest {
        base.push(seg.clone());
        if modules.contains(&base) {
            best = Some(base.clone());
        } else {
            break;
        }
    }
    best.filter(|m| m != from)
}

/// The largest strongly connected component of `graph` (Tarjan's algorithm).
fn largest_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Module> {
    struct T<'a> {
        g: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        best: Vec<Module>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Module) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            let Some((w, _)) = t.g.get_key_value(w) else {
                continue;
            };
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > t.best.len() {
                t.best = scc;
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        best: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.best
}

fn graph_of(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(src, f)).collect();
    let mut graph = BTreeMap::new();
    for f in &files {
        let m = module_of(src, f);
        if m.is_empty() {
            graph.insert(m, BTreeSet::new());
            continue;
        }
        let text = std::fs::read_to_string(f).expect("readable source");
        let edges: BTreeSet<Module> = paths(&code(&text))
            .iter()
            .filter_map(|p| resolve(&m, p, &modules))
            .collect();
        graph.insert(m, edges);
    }
    graph
}

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["cli", "plugin", "engine", "symbols", "format", "tests"] {
        let src = root.join(krate).join("src");
        let cycle = largest_cycle(&graph_of(&src));
        if cycle.len() > 1 {
            let names: Vec<String> = cycle.iter().map(|m| m.join("::")).collect();
            found.push(format!("{krate}: {}", names.join(" ")));
        }
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

#[test]
fn a_cycle_is_found() {
    let dir = std::env::temp_dir().join(format!("module-cycles-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("a")).expect("temp dir");
    std::fs::write(dir.join("lib.rs"), "mod a;\n").expect("write");
    std::fs::write(dir.join("a/mod.rs"), "mod b;\nmod c;\n").expect("write");
    std::fs::write(dir.join("a/b.rs"), "use super::c::f;\n").expect("write");
    std::fs::write(dir.join("a/c.rs"), "fn f() { crate::a::b::g() }\n").expect("write");
    let cycle = largest_cycle(&graph_of(&dir));
    std::fs::write(dir.join("a/c.rs"), "use std::io::Write;\n").expect("write");
    let none = largest_cycle(&graph_of(&dir));
    std::fs::remove_dir_all(&dir).expect("cleanup");
    assert_eq!(cycle.len(), 2, "{cycle:?}");
    assert_eq!(none.len(), 1, "{none:?}");
}
