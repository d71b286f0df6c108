//! The crate's layers, held to the table in docs/development.md: every
//! module imports only from its own layer and the layers below it, no
//! imports run in a loop, and every module has a layer.
//!
//! Imports are read from the source text (`crate::x`, `use crate::{x, y}`,
//! and `super::x` where `super` is the crate root), with comments and
//! `#[cfg(test)]` code left out: tests may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const TABLE: &str = "docs/development.md";

/// An arrow from one top-level module to another, with where it was seen.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Import {
    from: String,
    to: String,
    file: String,
    line: usize,
}

/// Module name -> (layer number, layer name), from the `## Layers` table.
fn read_layers(text: &str) -> BTreeMap<String, (u32, String)> {
    let mut layers = BTreeMap::new();
    let Some(start) = text.find("## Layers") else {
        return layers;
    };
    let section = &text[start + 2..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(layer), Some(modules)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let Some((number, name)) = layer.split_once(' ') else {
            continue;
        };
        let Ok(number) = number.parse::<u32>() else {
            continue;
        };
        for module in modules.split(',') {
            let module = module.trim().trim_matches('`');
            if !module.is_empty() {
                layers.insert(module.to_string(), (number, name.to_string()));
            }
        }
    }
    layers
}

/// The source a build without tests compiles: `#[cfg(test)]` items and
/// comments blanked out, line numbers kept.
fn production_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            out.push(String::new());
            // The item it marks: one line (`mod tests;`), or a block that
            // rustfmt closes with a `}` at the attribute's indentation.
            let indent = &line[..line.len() - trimmed.len()];
            let Some(first) = lines.next() else { break };
            out.push(String::new());
            if first.trim_end().ends_with(';') {
                continue;
            }
            for item in lines.by_ref() {
                out.push(String::new());
                if item == format!("{indent}}}") {
                    break;
                }
            }
            continue;
        }
        out.push(without_comment(line).to_string());
    }
    out
}

/// The line up to a `//` comment that is not inside a string literal.
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// The top-level modules a line names through the crate root.
fn crate_paths(line: &str, depth: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        let before = &rest[..i];
        rest = &rest[i + "crate::".len()..];
        // `jsbench::crate::` does not occur; `$crate::` (macros) would be
        // the crate too.
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue;
        }
        names.extend(path_heads(rest));
    }
    // `super::super::x` at depth 2 is `crate::x`.
    let mut rest = line;
    while let Some(i) = rest.find("super::") {
        let before = &rest[..i];
        let mut after = &rest[i..];
        let mut ups = 0;
        while let Some(tail) = after.strip_prefix("super::") {
            ups += 1;
            after = tail;
        }
        rest = after;
        if before.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if ups >= depth {
            names.extend(path_heads(after));
        }
    }
    names
}

/// `x::...` gives `x`; `{x, y::z}` gives `x` and `y`.
fn path_heads(text: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = text.strip_prefix('{') else {
        return vec![ident(text)];
    };
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(ident(group[start..i].trim()));
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(ident(group[start..i].trim()));
                start = i + 1;
            }
            _ => {}
        }
    }
    heads.retain(|h| !h.is_empty() && h != "self");
    heads
}

/// The module path of a file under src/: `src/drive/sample.rs` is
/// `["drive", "sample"]`, `src/drive/mod.rs` is `["drive"]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every arrow between top-level modules in the sources under `src`.
fn imports(src: &Path) -> Vec<Import> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let path = module_path(src, &file);
        // The crate root and the binary only declare and call; test
        // modules in files of their own may reach anywhere.
        if path.len() == 1 && (path[0] == "lib" || path[0] == "main") {
            continue;
        }
        if path.last().is_some_and(|p| p == "tests") {
            continue;
        }
        let text = fs::read_to_string(&file).expect("a source file is readable");
        let shown = file
            .strip_prefix(src.parent().unwrap_or(src))
            .unwrap_or(&file);
        found.extend(file_imports(&text, &path, &shown.display().to_string()));
    }
    found
}

fn file_imports(text: &str, path: &[String], file: &str) -> Vec<Import> {
    let from = path[0].clone();
    let mut found = Vec::new();
    for (n, line) in production_lines(text).iter().enumerate() {
        for to in crate_paths(line, path.len()) {
            if to != from && !to.is_empty() {
                found.push(Import {
                    from: from.clone(),
                    to,
                    file: file.to_string(),
                    line: n + 1,
                });
            }
        }
    }
    found
}

/// Imports that go up a layer, or name a module the table does not have.
fn upward(imports: &[Import], layers: &BTreeMap<String, (u32, String)>) -> Vec<String> {
    let mut problems = Vec::new();
    for i in imports {
        match (layers.get(&i.from), layers.get(&i.to)) {
            (Some((from, from_name)), Some((to, to_name))) if to > from => {
                problems.push(format!(
                    "{}:{}: `{}` (layer {from} {from_name}) imports crate::{} (layer {to} {to_name}), a layer above it",
                    i.file, i.line, i.from, i.to
                ));
            }
            (None, _) => problems.push(format!(
                "{}:{}: module `{}` has no layer in {TABLE}",
                i.file, i.line, i.from
            )),
            (_, None) => problems.push(format!(
                "{}:{}: crate::{} has no layer in {TABLE}",
                i.file, i.line, i.to
            )),
            _ => {}
        }
    }
    problems
}

/// One loop of imports between modules, if there is any.
fn find_cycle(imports: &[Import]) -> Option<Vec<String>> {
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for i in imports {
        edges.entry(&i.from).or_default().insert(&i.to);
    }
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, &edges, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let layers = read_layers(&fs::read_to_string(root().join(TABLE)).expect("the layer table"));
    assert!(
        layers.len() > 20,
        "the ## Layers table of {TABLE} names only {} modules",
        layers.len()
    );
    let problems = upward(&imports(&root().join("src")), &layers);
    assert!(
        problems.is_empty(),
        "imports against the layers of {TABLE}:\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_imports_run_in_a_loop() {
    let found = imports(&root().join("src"));
    assert!(found.len() > 100, "only {} imports found", found.len());
    if let Some(cycle) = find_cycle(&found) {
        let evidence: Vec<String> = cycle
            .windows(2)
            .map(|w| {
                let i = found
                    .iter()
                    .find(|i| i.from == w[0] && i.to == w[1])
                    .expect("an edge of the cycle");
                format!("{} -> {} ({}:{})", w[0], w[1], i.file, i.line)
            })
            .collect();
        panic!(
            "modules import each other in a loop:\n{}",
            evidence.join("\n")
        );
    }
}

#[test]
fn every_module_of_the_crate_has_a_layer_and_every_layer_entry_is_a_module() {
    let layers = read_layers(&fs::read_to_string(root().join(TABLE)).expect("the layer table"));
    let lib = fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    let tabled: BTreeSet<String> = layers.keys().cloned().collect();
    let missing: Vec<_> = declared.difference(&tabled).collect();
    let stale: Vec<_> = tabled.difference(&declared).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "{TABLE}'s ## Layers table and src/lib.rs disagree: modules without a layer {missing:?}, \
         layer entries that are not modules {stale:?}"
    );
}

// The checker itself: each rule catches what it is for.

fn sample_layers() -> BTreeMap<String, (u32, String)> {
    read_layers(
        "intro\n## Layers\n\n| layer | modules | what |\n|---|---|---|\n\
         | 2 top | `cli`, `run` | x |\n| 1 ground | `clock` | y |\n\n## Next\n| 9 no | `ignored` | z |\n",
    )
}

#[test]
fn the_table_is_read_from_its_section_only() {
    let layers = sample_layers();
    assert_eq!(layers.get("cli"), Some(&(2, "top".to_string())));
    assert_eq!(layers.get("run"), Some(&(2, "top".to_string())));
    assert_eq!(layers.get("clock"), Some(&(1, "ground".to_string())));
    assert!(!layers.contains_key("ignored"));
}

#[test]
fn an_import_from_above_is_reported_with_its_file_and_line() {
    let text = "use std::fmt;\n\nuse crate::cli::exit_code;\n";
    let found = file_imports(text, &["clock".to_string()], "src/clock.rs");
    let problems = upward(&found, &sample_layers());
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("src/clock.rs:3:"), "{problems:?}");
    assert!(problems[0].contains("crate::cli"), "{problems:?}");
}

#[test]
fn grouped_nested_and_super_paths_count_and_tests_and_comments_do_not() {
    let text = r#"//! See [`crate::run`].
use crate::{cli::{self, x}, clock};
use super::super::run::Thing;
fn f() { let _ = crate::clock::now(); } // crate::report in a comment
let url = "http://x"; let y = crate::cli::z; // "crate::report"
/// crate::run in a doc comment
#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::test_only;
}
#[cfg(test)]
mod more;
fn g() { crate::clock::x(); }
"#;
    let found = file_imports(
        text,
        &["drive".into(), "sample".into()],
        "src/drive/sample.rs",
    );
    let names: BTreeSet<&str> = found.iter().map(|i| i.to.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["cli", "clock", "run"]));
    let run_lines: Vec<usize> = found
        .iter()
        .filter(|i| i.to == "run")
        .map(|i| i.line)
        .collect();
    assert_eq!(
        run_lines,
        vec![3],
        "only the super::super import, not the test's"
    );
    let cli_lines: Vec<usize> = found
        .iter()
        .filter(|i| i.to == "cli")
        .map(|i| i.line)
        .collect();
    assert_eq!(
        cli_lines,
        vec![2, 5],
        "after a string holding //, the code still counts"
    );
    // `super::x` one level down is a sibling, not the crate root.
    let sibling = file_imports(
        "use super::spec::DriveSpec;\n",
        &["drive".into(), "x".into()],
        "f",
    );
    assert!(sibling.is_empty(), "{sibling:?}");
}

#[test]
fn a_loop_between_modules_is_found() {
    let edge = |from: &str, to: &str| Import {
        from: from.into(),
        to: to.into(),
        file: "f".into(),
        line: 1,
    };
    let straight = [edge("a", "b"), edge("b", "c"), edge("a", "c")];
    assert_eq!(find_cycle(&straight), None);
    let looped = [edge("a", "b"), edge("b", "c"), edge("c", "a")];
    let cycle = find_cycle(&looped).expect("a -> b -> c -> a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}
