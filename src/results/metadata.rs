//! The name of a run's folder, from when it started and which code ran
//! ([`crate::system::about`] says which code and which machine).

use crate::system::about::ToolInfo;

/// The folder name: `<utc>-<sha7|nogit>-<profile>`, sortable by time.
pub fn run_id(started: time::OffsetDateTime, tool: &ToolInfo, profile: &str) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let when = started.format(&format).expect("fixed format");
    // An unknown commit is never marked dirty.
    let dirty = tool.git_dirty && tool.git_commit.is_some();
    let sha = short_commit(tool.git_commit.as_deref(), dirty);
    format!("{when}-{sha}-{profile}")
}

/// A commit as folder names and tables show it: seven characters, `nogit`
/// when unknown, `+dirty` when the build had uncommitted changes.
pub fn short_commit(commit: Option<&str>, dirty: bool) -> String {
    let short: String = commit.unwrap_or("nogit").chars().take(7).collect();
    if dirty {
        format!("{short}+dirty")
    } else {
        short
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_name_time_commit_and_profile() {
        let t = time::macros::datetime!(2026-11-30 10:18:39 UTC);
        let mut tool = ToolInfo {
            name: "jsbench".into(),
            version: "0.1.0".into(),
            git_commit: Some("3f2a1bc9d".into()),
            git_dirty: false,
        };
        assert_eq!(run_id(t, &tool, "quick"), "20261130T101839Z-3f2a1bc-quick");
        tool.git_dirty = true;
        assert_eq!(
            run_id(t, &tool, "quick"),
            "20261130T101839Z-3f2a1bc+dirty-quick"
        );
        tool.git_commit = None;
        assert_eq!(run_id(t, &tool, "quick"), "20261130T101839Z-nogit-quick");
    }
}
