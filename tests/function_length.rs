//! No function in src/ is longer than a reader can hold: at most
//! [`LIMIT`] lines from its `fn` to its closing brace, tests included.
//! One exception, named here with its reason: the publisher's send loop,
//! whose hot path reads best in one piece (docs/development.md).

use std::fs;
use std::path::{Path, PathBuf};

const LIMIT: usize = 150;

/// (file under src/, function): allowed to be longer, and why.
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "load/publisher/send.rs",
    "send_all",
    "the per-message send loop: split, its state would cross function calls on the hot path",
)];

/// A function's name, where it starts, and how many lines it spans.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// The text with string and char literals and comments blanked (their
/// braces do not count), line breaks kept.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // A raw string: r"..." or r#"..."#, any number of #.
        if c == 'r' && (next == Some('"') || next == Some('#')) {
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) == Some(&'"') {
                let close: Vec<char> = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                j += 1;
                while j < chars.len() && chars[j..].iter().take(close.len()).ne(close.iter()) {
                    if chars[j] == '\n' {
                        out.push('\n');
                    }
                    j += 1;
                }
                i = j + close.len();
                continue;
            }
        }
        match c {
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    if chars.get(i) == Some(&'\n') {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 1;
            }
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => {
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    if chars[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
                i += 2;
            }
            // A char literal: 'x' or an escape like '\''; a lifetime stays.
            '\'' if chars.get(i + 2) == Some(&'\'') => i += 3,
            '\'' if next == Some('\\') => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The name of the function a line starts, if it starts one.
fn starts_function(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    for prefix in ["const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let name = rest.strip_prefix("fn ")?;
    let name: String = name
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Every function with a body in `text`, nested ones included.
fn functions(text: &str) -> Vec<Function> {
    let code = code_of(text);
    let lines: Vec<&str> = code.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = starts_function(line) else {
            continue;
        };
        let mut depth = 0i64;
        let mut opened = false;
        for (end, body) in lines.iter().enumerate().skip(start) {
            if !opened && body.contains(';') && !body.contains('{') {
                // A declaration without a body (a trait's).
                break;
            }
            for c in body.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth == 0 {
                found.push(Function {
                    name: name.clone(),
                    line: start + 1,
                    lines: end - start + 1,
                });
                break;
            }
        }
    }
    found
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

#[test]
fn no_function_is_longer_than_the_limit() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut long = Vec::new();
    let mut seen = 0;
    for file in files {
        let shown = file
            .strip_prefix(&src)
            .expect("under src")
            .display()
            .to_string();
        let text = fs::read_to_string(&file).expect("a source file is readable");
        for f in functions(&text) {
            seen += 1;
            let excepted = EXCEPTIONS
                .iter()
                .any(|(path, name, _)| *path == shown && *name == f.name);
            if f.lines > LIMIT && !excepted {
                long.push(format!(
                    "src/{shown}:{}: fn {} has {} lines",
                    f.line, f.name, f.lines
                ));
            }
        }
    }
    assert!(seen > 1000, "only {seen} functions found");
    assert!(
        long.is_empty(),
        "functions longer than {LIMIT} lines (cut them into named steps):\n{}",
        long.join("\n")
    );
}

#[test]
fn every_exception_still_exists_and_is_still_long() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    for (path, name, why) in EXCEPTIONS {
        let text = fs::read_to_string(src.join(path)).expect("the excepted file");
        let f = functions(&text)
            .into_iter()
            .find(|f| f.name == *name)
            .unwrap_or_else(|| panic!("src/{path} has no fn {name}: drop its exception ({why})"));
        assert!(
            f.lines > LIMIT,
            "src/{path}: fn {name} has {} lines now: drop its exception",
            f.lines
        );
    }
}

#[test]
fn functions_are_measured_from_fn_to_their_closing_brace() {
    let text = r##"
pub async fn outer(x: u8) -> String {
    let s = "}{";
    let c = '{';
    let e = '\'';
    let raw = r#"a "}" b"#;
    let long = "first line {
second line";
    // } in a comment
    /* { in a block */
    fn inner() {
        if true {}
    }
    format!("{x}")
}
trait T {
    fn declared(&self);
}
pub(crate) const fn k() -> u8 { 1 }
"##;
    let found = functions(text);
    let by_name = |n: &str| found.iter().find(|f| f.name == n).map(|f| f.lines);
    assert_eq!(by_name("outer"), Some(14));
    assert_eq!(by_name("inner"), Some(3));
    assert_eq!(by_name("k"), Some(1));
    assert_eq!(by_name("declared"), None);
}
