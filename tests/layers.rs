//! The crate's layers, held to the table in docs/development.md, down to
//! the file: every top-level module imports only from its own layer and
//! the layers below it, every module has a layer, and no imports run in a
//! loop, between top-level modules or between the files inside a folder.
//!
//! Imports are read from the source text (`crate::x::y`, `super::x`,
//! `self::x`, grouped `use` lists), with comments and `#[cfg(test)]` code
//! left out: tests may reach anywhere. A name a folder's `mod.rs` (or
//! `x.rs` beside `x/`) re-exports is followed to the file that defines it,
//! so `super::Item` counts as an import of the sibling that holds `Item`.
//! A file's imports of the folders around it (its parent's own items) and
//! a folder's of its own files are how Rust modules are built, not loops.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const TABLE: &str = "docs/development.md";

/// A module's path inside the crate: `["drive", "sample"]`.
type ModPath = Vec<String>;

/// An arrow from one module (file) to another, with where it was seen.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Import {
    from: ModPath,
    to: ModPath,
    file: String,
    line: usize,
}

impl Import {
    /// The same arrow between the top-level modules.
    fn heads(&self) -> (String, String) {
        (self.from[0].clone(), self.to[0].clone())
    }
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

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The paths a `a::b::{c, d::e}` text names, each as its segments:
/// `[a, b, c]` and `[a, b, d, e]`; `self` in a group names the group's
/// own prefix, `*` is kept as a segment.
fn expand(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut out = Vec::new();
            for item in split_group(group) {
                for mut tail in expand(item.trim()) {
                    if tail.first().is_some_and(|s| s == "self") {
                        tail.remove(0);
                    }
                    let mut path = prefix.clone();
                    path.extend(tail);
                    out.push(path);
                }
            }
            return out;
        }
        if rest.starts_with('*') {
            prefix.push("*".to_string());
            return vec![prefix];
        }
        let segment = ident(rest);
        if segment.is_empty() {
            return if prefix.is_empty() {
                Vec::new()
            } else {
                vec![prefix]
            };
        }
        rest = &rest[segment.len()..];
        prefix.push(segment);
        match rest.strip_prefix("::") {
            Some(after) => rest = after,
            None => return vec![prefix],
        }
    }
}

/// The items of a `{...}` group (its text after the `{`), up to its `}`.
fn split_group(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.retain(|s| !s.trim().is_empty());
    items
}

/// Every path a line names from the crate root, `super` or `self`, made
/// absolute for a file of module `module`: `super::x` in
/// `drive::sample` is `["drive", "x"]`.
fn absolute_paths(line: &str, module: &[String]) -> Vec<ModPath> {
    let mut found = Vec::new();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < line.len() {
        let rest = &line[i..];
        let starts_word = i == 0 || {
            let c = bytes[i - 1] as char;
            !(c.is_alphanumeric() || c == '_' || c == ':' || c == '$')
        };
        let base: Option<(ModPath, &str)> = if !starts_word {
            None
        } else if let Some(after) = rest.strip_prefix("crate::") {
            Some((Vec::new(), after))
        } else if rest.starts_with("super::") {
            let mut after = rest;
            let mut up = module.to_vec();
            while let Some(tail) = after.strip_prefix("super::") {
                up.pop();
                after = tail;
            }
            Some((up, after))
        } else if let Some(after) = rest.strip_prefix("self::") {
            Some((module.to_vec(), after))
        } else {
            None
        };
        match base {
            Some((base, after)) => {
                for tail in expand(after) {
                    let mut path = base.clone();
                    path.extend(tail);
                    found.push(path);
                }
                i = line.len() - after.len();
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    found
}

/// The module path of a file under src/: `src/drive/sample.rs` is
/// `["drive", "sample"]`, `src/drive/mod.rs` is `["drive"]`.
fn module_path(src: &Path, file: &Path) -> ModPath {
    let relative = file.strip_prefix(src).expect("under src");
    let mut parts: ModPath = relative
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

/// One source file: where it is shown, and its production lines.
struct SourceFile {
    shown: String,
    lines: Vec<String>,
}

/// Every module file of the crate but its root and the binary (they only
/// declare and call) and test modules in files of their own.
struct Crate {
    files: BTreeMap<ModPath, SourceFile>,
    /// Per module: a name it re-exports -> the module that defines it.
    reexports: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        paths.sort();
        let mut files = BTreeMap::new();
        for file in paths {
            let module = module_path(src, &file);
            if module.len() == 1 && (module[0] == "lib" || module[0] == "main") {
                continue;
            }
            if module.last().is_some_and(|p| p == "tests") {
                continue;
            }
            let text = fs::read_to_string(&file).expect("a source file is readable");
            let shown = file
                .strip_prefix(src.parent().unwrap_or(src))
                .unwrap_or(&file)
                .display()
                .to_string();
            files.insert(
                module,
                SourceFile {
                    shown,
                    lines: production_lines(&text),
                },
            );
        }
        Crate::from_files(files)
    }

    fn from_files(files: BTreeMap<ModPath, SourceFile>) -> Crate {
        let mut krate = Crate {
            files,
            reexports: BTreeMap::new(),
        };
        let mut reexports = BTreeMap::new();
        for (module, file) in &krate.files {
            let mut names = BTreeMap::new();
            for line in &file.lines {
                let Some(used) = pub_use(line) else { continue };
                let mut targets = absolute_paths(used, module);
                if targets.is_empty() {
                    // A child by its bare name: `pub use outcome::{...}`.
                    for tail in expand(used) {
                        let mut path = module.clone();
                        path.extend(tail);
                        targets.push(path);
                    }
                }
                for path in targets {
                    let Some((item, prefix)) = path.split_last() else {
                        continue;
                    };
                    let Some(defining) = krate.longest_module(prefix) else {
                        continue;
                    };
                    if item == "*" {
                        for name in krate.defined_names(&defining) {
                            names.insert(name, defining.clone());
                        }
                    } else {
                        names.insert(item.clone(), defining);
                    }
                }
            }
            reexports.insert(module.clone(), names);
        }
        krate.reexports = reexports;
        krate
    }

    /// The longest prefix of `path` that is a module file of the crate.
    fn longest_module(&self, path: &[String]) -> Option<ModPath> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|p| self.files.contains_key(p))
    }

    /// The names a module defines in public (for a glob re-export).
    fn defined_names(&self, module: &ModPath) -> Vec<String> {
        let Some(file) = self.files.get(module) else {
            return Vec::new();
        };
        let mut names = Vec::new();
        for line in &file.lines {
            let Some(rest) = line.trim_start().strip_prefix("pub ") else {
                continue;
            };
            let rest = rest
                .trim_start_matches("async ")
                .trim_start_matches("const fn ");
            for kind in [
                "struct ", "enum ", "fn ", "const ", "static ", "type ", "trait ",
            ] {
                if let Some(name) = rest.strip_prefix(kind) {
                    names.push(ident(name));
                }
            }
        }
        names
    }

    /// The module a path names: its longest module prefix, followed
    /// through that module's re-exports to the module defining the item.
    fn resolve(&self, path: &[String]) -> Option<ModPath> {
        let mut module = self.longest_module(path)?;
        let mut item = path.get(module.len()).cloned();
        // Re-exports may chain (a folder re-exporting a sub-folder's).
        for _ in 0..8 {
            let Some(name) = &item else { break };
            let Some(next) = self.reexports.get(&module).and_then(|r| r.get(name)) else {
                break;
            };
            if *next == module {
                break;
            }
            module = next.clone();
            item = Some(name.clone());
        }
        Some(module)
    }

    /// Every arrow between two module files, but a file's arrows to the
    /// folders around it and a folder's to its own files.
    fn imports(&self) -> Vec<Import> {
        let mut found = Vec::new();
        for (module, file) in &self.files {
            for (n, line) in file.lines.iter().enumerate() {
                for path in absolute_paths(line, module) {
                    if path.is_empty() {
                        continue;
                    }
                    let Some(to) = self.resolve(&path) else {
                        // Nothing of the crate below the root: a name the
                        // crate root declares, checked by the table.
                        if let Some(head) = path.first() {
                            found.push(Import {
                                from: module.clone(),
                                to: vec![head.clone()],
                                file: file.shown.clone(),
                                line: n + 1,
                            });
                        }
                        continue;
                    };
                    if to.starts_with(module) || module.starts_with(&to) {
                        continue;
                    }
                    found.push(Import {
                        from: module.clone(),
                        to,
                        file: file.shown.clone(),
                        line: n + 1,
                    });
                }
            }
        }
        // One arrow per line and target, however many names it takes.
        found.sort();
        found.dedup();
        found
    }
}

/// The path of a `pub use` line (`pub(crate) use` too), without its `;`.
fn pub_use(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = t
        .strip_prefix("pub use ")
        .or_else(|| t.strip_prefix("pub(crate) use "))
        .or_else(|| t.strip_prefix("pub(super) use "))?;
    Some(rest.trim_end().trim_end_matches(';'))
}

/// Imports that go up a layer, or name a module the table does not have.
fn upward(imports: &[Import], layers: &BTreeMap<String, (u32, String)>) -> Vec<String> {
    let mut problems = Vec::new();
    for i in imports {
        let (from_head, to_head) = i.heads();
        if from_head == to_head {
            continue;
        }
        match (layers.get(&from_head), layers.get(&to_head)) {
            (Some((from, from_name)), Some((to, to_name))) if to > from => {
                problems.push(format!(
                    "{}:{}: `{from_head}` (layer {from} {from_name}) imports crate::{to_head} (layer {to} {to_name}), a layer above it",
                    i.file, i.line
                ));
            }
            (None, _) => problems.push(format!(
                "{}:{}: module `{from_head}` has no layer in {TABLE}",
                i.file, i.line
            )),
            (_, None) => problems.push(format!(
                "{}:{}: crate::{to_head} has no layer in {TABLE}",
                i.file, i.line
            )),
            _ => {}
        }
    }
    problems
}

/// One loop in a graph of arrows, if there is any, as the nodes in order
/// (the first repeated at the end).
fn find_cycle<N: Ord + Clone>(edges: &[(N, N)]) -> Option<Vec<N>> {
    let mut next: BTreeMap<&N, BTreeSet<&N>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from).or_default().insert(to);
    }
    fn visit<'a, M: Ord + Clone>(
        node: &'a M,
        next: &BTreeMap<&'a M, BTreeSet<&'a M>>,
        stack: &mut Vec<&'a M>,
        done: &mut BTreeSet<&'a M>,
    ) -> Option<Vec<M>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut cycle: Vec<M> = stack[at..].iter().map(|n| (*n).clone()).collect();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for to in next.get(node).into_iter().flatten().copied() {
            if let Some(cycle) = visit(to, next, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in next.keys().copied() {
        if let Some(cycle) = visit(node, &next, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

/// A loop as evidence: each arrow with the file and line it was seen at.
fn evidence(cycle: &[ModPath], imports: &[Import], level: fn(&ModPath) -> ModPath) -> String {
    cycle
        .windows(2)
        .map(|w| {
            let i = imports
                .iter()
                .find(|i| level(&i.from) == w[0] && level(&i.to) == w[1])
                .expect("an arrow of the loop");
            format!(
                "{} -> {} ({}:{})",
                w[0].join("::"),
                w[1].join("::"),
                i.file,
                i.line
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn head(m: &ModPath) -> ModPath {
    m[..1].to_vec()
}

fn whole(m: &ModPath) -> ModPath {
    m.clone()
}

/// A loop between top-level modules.
fn module_loop(imports: &[Import]) -> Option<String> {
    let edges: Vec<(ModPath, ModPath)> = imports
        .iter()
        .filter(|i| i.from[0] != i.to[0])
        .map(|i| (head(&i.from), head(&i.to)))
        .collect();
    find_cycle(&edges).map(|c| evidence(&c, imports, head))
}

/// A loop between files.
fn file_loop(imports: &[Import]) -> Option<String> {
    let edges: Vec<(ModPath, ModPath)> = imports
        .iter()
        .map(|i| (i.from.clone(), i.to.clone()))
        .collect();
    find_cycle(&edges).map(|c| evidence(&c, imports, whole))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn the_crate() -> Crate {
    Crate::read(&root().join("src"))
}

#[test]
fn no_module_imports_from_a_layer_above_it() {
    let layers = read_layers(&fs::read_to_string(root().join(TABLE)).expect("the layer table"));
    assert!(
        layers.len() > 8,
        "the ## Layers table of {TABLE} names only {} modules",
        layers.len()
    );
    let problems = upward(&the_crate().imports(), &layers);
    assert!(
        problems.is_empty(),
        "imports against the layers of {TABLE}:\n{}",
        problems.join("\n")
    );
}

#[test]
fn no_imports_run_in_a_loop_between_modules() {
    let found = the_crate().imports();
    assert!(found.len() > 100, "only {} imports found", found.len());
    if let Some(evidence) = module_loop(&found) {
        panic!("modules import each other in a loop:\n{evidence}");
    }
}

#[test]
fn no_imports_run_in_a_loop_between_files() {
    let krate = the_crate();
    assert!(
        krate.files.len() > 100,
        "only {} files read",
        krate.files.len()
    );
    if let Some(evidence) = file_loop(&krate.imports()) {
        panic!("files import each other in a loop:\n{evidence}");
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

/// The crate's own map (src/lib.rs's `# Layers` comment) names every
/// module the crate declares, so a newcomer reading it misses none.
#[test]
fn the_crate_map_in_lib_rs_names_every_module() {
    let lib = fs::read_to_string(root().join("src/lib.rs")).expect("src/lib.rs");
    let map: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let unnamed: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';'))
        .filter(|m| !map.contains(&format!("[`{m}`]")))
        .collect();
    assert!(
        unnamed.is_empty(),
        "src/lib.rs's map does not name {unnamed:?}: add each as [`module`] to its layer"
    );
}

// The checker itself: each rule catches what it is for.

fn sample_layers() -> BTreeMap<String, (u32, String)> {
    read_layers(
        "intro\n## Layers\n\n| layer | modules | what |\n|---|---|---|\n\
         | 2 top | `cli`, `run` | x |\n| 1 ground | `clock` | y |\n\n## Next\n| 9 no | `ignored` | z |\n",
    )
}

/// A crate made of these files: module path (`a::b`) and source text.
fn sample_crate(files: &[(&str, &str)]) -> Crate {
    Crate::from_files(
        files
            .iter()
            .map(|(module, text)| {
                let path: ModPath = module.split("::").map(String::from).collect();
                (
                    path,
                    SourceFile {
                        shown: format!("src/{}.rs", module.replace("::", "/")),
                        lines: production_lines(text),
                    },
                )
            })
            .collect(),
    )
}

fn names(imports: &[Import]) -> BTreeSet<String> {
    imports.iter().map(|i| i.to.join("::")).collect()
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
    let krate = sample_crate(&[
        ("clock", "use std::fmt;\n\nuse crate::cli::exit_code;\n"),
        ("cli", "pub fn exit_code() {}\n"),
    ]);
    let problems = upward(&krate.imports(), &sample_layers());
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
    let krate = sample_crate(&[
        ("drive::sample", text),
        ("drive", ""),
        ("cli", ""),
        ("clock", ""),
        ("run", ""),
        ("report", ""),
    ]);
    let found = krate.imports();
    assert_eq!(
        names(&found),
        BTreeSet::from(["cli", "clock", "run"].map(String::from))
    );
    let lines = |to: &str| -> Vec<usize> {
        found
            .iter()
            .filter(|i| i.to == [to.to_string()])
            .map(|i| i.line)
            .collect()
    };
    assert_eq!(
        lines("run"),
        vec![3],
        "only the super::super import, not the test's"
    );
    assert_eq!(
        lines("cli"),
        vec![2, 5],
        "after a string holding //, the code still counts"
    );
}

#[test]
fn a_sibling_is_found_by_its_path_and_through_the_folders_reexports() {
    let krate = sample_crate(&[
        (
            "drive",
            "mod spec;\nmod outcome;\npub use outcome::{DriveOutcome, merge};\npub struct RunContext;\n",
        ),
        ("drive::spec", "use super::outcome::Attribution;\n"),
        (
            "drive::outcome",
            "pub struct DriveOutcome;\npub fn merge() {}\n",
        ),
        (
            "drive::sample",
            "use super::{DriveOutcome, RunContext};\nfn f() { crate::drive::merge(); }\n",
        ),
    ]);
    let found = krate.imports();
    let from = |m: &str| -> BTreeSet<String> {
        found
            .iter()
            .filter(|i| i.from.join("::") == m)
            .map(|i| i.to.join("::"))
            .collect()
    };
    assert_eq!(
        from("drive::spec"),
        BTreeSet::from(["drive::outcome".to_string()])
    );
    // `RunContext` is the folder's own: no arrow; `DriveOutcome` and
    // `merge` are its sibling's, re-exported.
    assert_eq!(
        from("drive::sample"),
        BTreeSet::from(["drive::outcome".to_string()])
    );
    assert!(
        from("drive").is_empty(),
        "a folder's arrows to its own files"
    );
}

#[test]
fn a_loop_between_modules_is_found() {
    let edge = |from: &str, to: &str| (from.to_string(), to.to_string());
    let straight = [edge("a", "b"), edge("b", "c"), edge("a", "c")];
    assert_eq!(find_cycle(&straight), None);
    let looped = [edge("a", "b"), edge("b", "c"), edge("c", "a")];
    let cycle = find_cycle(&looped).expect("a -> b -> c -> a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}

#[test]
fn a_loop_between_sibling_files_is_found_with_its_evidence() {
    let krate = sample_crate(&[
        ("worker", "mod clock;\nmod merge;\nmod protocol;\n"),
        ("worker::clock", "use super::protocol::Command;\n"),
        ("worker::merge", "fn f() { super::clock::pair(); }\n"),
        (
            "worker::protocol",
            "pub struct Command { c: super::merge::PartCounts }\n",
        ),
    ]);
    let found = krate.imports();
    assert_eq!(
        module_loop(&found),
        None,
        "one top-level module: no loop between modules"
    );
    let evidence = file_loop(&found).expect("clock -> protocol -> merge -> clock");
    assert!(
        evidence.contains("worker::protocol -> worker::merge (src/worker/protocol.rs:1)"),
        "{evidence}"
    );
    let mended = sample_crate(&[
        ("worker", "mod clock;\nmod merge;\nmod protocol;\n"),
        ("worker::clock", "use super::protocol::Command;\n"),
        ("worker::merge", "fn f() { super::clock::pair(); }\n"),
        (
            "worker::protocol",
            "pub struct Command;\npub struct PartCounts;\n",
        ),
    ]);
    assert_eq!(file_loop(&mended.imports()), None);
}
