//! The documentation's links hold: every relative link in README.md,
//! docs/**/*.md and results/README.md points at a file that exists and, with
//! a `#anchor`, at a heading in it (GitHub's slug rule). README.md stays
//! short, no page in docs/ is an orphan (README.md or docs/README.md
//! links each one), and every docs/ page that help text, error messages,
//! scripts or tests name exists. No server needed.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// README.md's length limit: the front page, not the manual.
const README_MAX_LINES: usize = 260;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `*.md` under `dir`, sorted, so failures come in a stable order.
fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = files_under(dir);
    found.retain(|p| p.extension().is_some_and(|x| x == "md"));
    found
}

/// The files whose links are checked: README.md, docs/**/*.md, results/README.md.
fn checked_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    files.extend(markdown_under(&root.join("docs")));
    files.push(root.join("results/README.md"));
    files
}

/// A line is outside a fenced code block (``` or ~~~) when this says so.
struct Fences {
    open: Option<String>,
}

impl Fences {
    fn new() -> Self {
        Fences { open: None }
    }

    /// Feeds one line; true when the line is prose (not a fence, not inside one).
    fn is_prose(&mut self, line: &str) -> bool {
        let trimmed = line.trim_start();
        let marker = if trimmed.starts_with("```") {
            Some("```")
        } else if trimmed.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (&self.open, marker) {
            (None, Some(m)) => {
                self.open = Some(m.to_string());
                false
            }
            (Some(open), Some(m)) if open == m => {
                self.open = None;
                false
            }
            (Some(_), _) => false,
            (None, None) => true,
        }
    }
}

/// The line with inline code spans (`...`) blanked out: a `[x](y)` inside
/// backticks is text, not a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of inline links `[text](target)` on one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let bytes = line.as_bytes();
    let mut targets = Vec::new();
    let mut i = 0;
    while let Some(pos) = line[i..].find("](") {
        let start = i + pos + 2;
        // Only a link when a matching `[` comes before it.
        if !line[..i + pos].contains('[') {
            i = start;
            continue;
        }
        let mut depth = 1;
        let mut end = start;
        while end < bytes.len() {
            match bytes[end] {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            end += 1;
        }
        if end < bytes.len() {
            // `[text](target "title")`: the target is the first word.
            let target = line[start..end].split_whitespace().next().unwrap_or("");
            targets.push(target.trim_matches(['<', '>']).to_string());
        }
        i = end.max(start);
    }
    targets
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://") || lower.starts_with("mailto:")
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped except `-`
/// and `_`, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings, outside code blocks; a
/// repeated heading gets `-1`, `-2`, ... as on GitHub.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fences = Fences::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut anchors = BTreeSet::new();
    for line in text.lines() {
        if !fences.is_prose(line) {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// `a/b/../c` as `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A relative link found in a file, with where it was found.
struct Link {
    file: PathBuf,
    line: usize,
    target: String,
}

impl Link {
    /// The linked file, resolved against the linking file's folder.
    fn resolved(&self) -> PathBuf {
        let path = self.target.split('#').next().unwrap_or("");
        if path.is_empty() {
            self.file.clone()
        } else {
            normalize(&self.file.parent().unwrap().join(path))
        }
    }

    fn anchor(&self) -> Option<&str> {
        self.target.split_once('#').map(|(_, a)| a)
    }

    fn place(&self) -> String {
        let file = self.file.strip_prefix(root()).unwrap_or(&self.file);
        format!("{}:{}: ({})", file.display(), self.line, self.target)
    }
}

fn relative_links(file: &Path, text: &str) -> Vec<Link> {
    let mut fences = Fences::new();
    let mut links = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if !fences.is_prose(line) {
            continue;
        }
        for target in link_targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            links.push(Link {
                file: file.to_path_buf(),
                line: n + 1,
                target,
            });
        }
    }
    links
}

/// Every broken link among `files`, one message each.
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut problems = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for link in relative_links(file, &text) {
            let target = link.resolved();
            if !target.exists() {
                problems.push(format!(
                    "{} no such file: {}",
                    link.place(),
                    target.display()
                ));
                continue;
            }
            let Some(anchor) = link.anchor() else {
                continue;
            };
            if target.extension().is_none_or(|x| x != "md") {
                problems.push(format!(
                    "{} an anchor into a file that is not markdown",
                    link.place()
                ));
                continue;
            }
            let known = anchors(&fs::read_to_string(&target).unwrap());
            if !known.contains(anchor) {
                problems.push(format!(
                    "{} no heading with anchor #{anchor}; the file has: {}",
                    link.place(),
                    known.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    problems
}

#[test]
fn every_relative_link_points_at_an_existing_file_and_heading() {
    let problems = broken_links(&checked_files());
    assert!(
        problems.is_empty(),
        "broken links:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_readme_stays_short() {
    let text = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move the detail into a page under docs/"
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme_or_the_docs_index() {
    let root = root();
    let mut linked = BTreeSet::new();
    for index in [root.join("README.md"), root.join("docs/README.md")] {
        let text = fs::read_to_string(&index).unwrap();
        for link in relative_links(&index, &text) {
            linked.insert(link.resolved());
        }
    }
    let orphans: Vec<String> = markdown_under(&root.join("docs"))
        .into_iter()
        .filter(|page| *page != root.join("docs/README.md") && !linked.contains(page))
        .map(|page| page.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    assert!(
        orphans.is_empty(),
        "pages linked from neither README.md nor docs/README.md: {}",
        orphans.join(", ")
    );
}

/// Every file under `dir` (recursively), sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The `docs/...` pages and folders a text names, such as `docs/compare.md`
/// in a help string or `docs/scenarios/` in an error message.
fn docs_paths(text: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "-_./".contains(c)) {
            continue; // part of a longer path, e.g. a checkout named wt-docs/
        }
        let rest = &text[at..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || "-_./".contains(c)))
            .unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches('.');
        if path.ends_with(".md") || path.ends_with('/') {
            paths.push(path.to_string());
        }
    }
    paths
}

#[test]
fn every_docs_page_named_in_code_scripts_and_tests_exists() {
    let root = root();
    let mut missing = Vec::new();
    let mut files = files_under(&root.join("src"));
    files.extend(files_under(&root.join("scripts")));
    files.extend(files_under(&root.join("tests")));
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            for path in docs_paths(line) {
                if !root.join(&path).exists() {
                    let file = file.strip_prefix(&root).unwrap();
                    missing.push(format!("{}:{}: {path}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documentation pages named but missing (renamed or moved?):\n  {}",
        missing.join("\n  ")
    );
}

/// The names of the invariants a source text can report: the string
/// literal opening `Invariant::check(`, `equal(` or `not_applicable(`, and
/// a `const NAME`; unit tests (after `#[cfg(test)]`) left out.
fn invariant_names(text: &str) -> Vec<String> {
    let text = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut names = Vec::new();
    for opening in [
        "Invariant::check(",
        "Invariant::equal(",
        "Invariant::not_applicable(",
        "const NAME: &str =",
    ] {
        for (at, _) in text.match_indices(opening) {
            let rest = text[at + opening.len()..].trim_start();
            if let Some(literal) = rest.strip_prefix('"')
                && let Some(end) = literal.find('"')
            {
                names.push(literal[..end].to_string());
            }
        }
    }
    names
}

/// docs/invariants.md's table: every invariant the code can report is in
/// it, and every test it names exists, so the page cannot fall behind.
#[test]
fn every_invariant_is_in_the_table_with_a_test_that_exists() {
    let root = root();
    let page = fs::read_to_string(root.join("docs/invariants.md")).unwrap();
    let rows: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(" |").next())
        .map(str::to_string)
        .collect();
    let mut missing = BTreeSet::new();
    for file in files_under(&root.join("src")) {
        if file.extension().is_some_and(|e| e == "rs") && !file.ends_with("tests.rs") {
            for name in invariant_names(&fs::read_to_string(&file).unwrap()) {
                if !rows.contains(&name) {
                    missing.insert(format!("{name} ({})", file.display()));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "invariants missing from docs/invariants.md:\n  {}",
        missing.into_iter().collect::<Vec<_>>().join("\n  ")
    );
    let mut code = String::new();
    for dir in ["src", "tests"] {
        for file in files_under(&root.join(dir)) {
            if file.extension().is_some_and(|e| e == "rs") {
                code.push_str(&fs::read_to_string(&file).unwrap());
            }
        }
    }
    let named: Vec<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.matches('_').count() >= 4
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(named.len() >= 30, "the table names its tests: {named:?}");
    let absent: Vec<&&str> = named
        .iter()
        .filter(|t| !code.contains(&format!("fn {t}(")))
        .collect();
    assert!(
        absent.is_empty(),
        "docs/invariants.md names tests that do not exist: {absent:?}"
    );
}

#[test]
fn invariant_names_are_read_from_their_constructors() {
    let text = "Invariant::check(\n    \"a b\", x, y)\nInvariant::equal(\"c\", 1, 1)\n\
                Invariant::check(name, x, y)\nconst NAME: &str = \"d\";\n\
                #[cfg(test)]\nInvariant::equal(\"fixture\", 1, 1)";
    assert_eq!(invariant_names(text), ["a b", "c", "d"]);
}

#[test]
fn docs_paths_are_found_in_prose_and_strings() {
    assert_eq!(
        docs_paths("see docs/compare.md. And docs/scenarios/, not wt-docs/x.md or docs/x"),
        ["docs/compare.md", "docs/scenarios/"]
    );
}

#[test]
fn the_slug_follows_githubs_rule() {
    assert_eq!(slug("Exit status"), "exit-status");
    assert_eq!(
        slug("The committed baseline and scripts/ci-compare.sh"),
        "the-committed-baseline-and-scriptsci-comparesh"
    );
    assert_eq!(
        slug("A profile's `[connection]` table"),
        "a-profiles-connection-table"
    );
    assert_eq!(
        slug("`--cluster 3` and `--cluster 5`"),
        "--cluster-3-and---cluster-5"
    );
    assert_eq!(
        slug("Keys of the `replay_x` scenario"),
        "keys-of-the-replay_x-scenario"
    );
    let text = "# Title\n## Keys\n```sh\n# not a heading\n```\n## Keys\n";
    let found = anchors(text);
    assert!(found.contains("title") && found.contains("keys") && found.contains("keys-1"));
    assert!(!found.contains("not-a-heading"), "{found:?}");
}

#[test]
fn links_in_code_and_external_links_are_skipped() {
    let text = "[a](one.md) and [b](https://x.org/y) and `[c](two.md)`\n\
                ```\n[d](three.md)\n```\n[e](mailto:x@y.z) [f](#here \"title\")\n";
    let targets: Vec<String> = relative_links(Path::new("/x/page.md"), text)
        .into_iter()
        .map(|l| l.target)
        .collect();
    assert_eq!(targets, ["one.md", "#here"]);
}

#[test]
fn a_broken_link_and_a_broken_anchor_are_reported_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    fs::write(dir.path().join("other.md"), "# Other\n## Real heading\n").unwrap();
    fs::write(
        &page,
        "# Page\n\n[fine](other.md#real-heading)\n[gone](missing.md)\n[typo](other.md#real-headin)\n[self](#page)\n",
    )
    .unwrap();
    let problems = broken_links(&[page]);
    assert_eq!(problems.len(), 2, "{problems:#?}");
    assert!(
        problems[0].contains("page.md:4: (missing.md) no such file"),
        "{problems:#?}"
    );
    assert!(
        problems[1].contains("page.md:5: (other.md#real-headin) no heading"),
        "{problems:#?}"
    );
}
