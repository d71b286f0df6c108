//! The name of a run's folder, from when it started and which code ran
//! ([`crate::system::about`] says which code and which machine).

use crate::system::about::ToolInfo;

/// The folder name: `<utc>-<sha7|nogit>-<profile>`, sortable by time.
pub fn run_id(started: time::OffsetDateTime, tool: &ToolInfo, profile: &str) -> String {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let when = started.format(&format).expect("fixed format");
    let sha = match &tool.git_commit {
        Some(c) => {
            let short: String = c.chars().take(7).collect();
            if tool.git_dirty {
                format!("{short}+dirty")
            } else {
                short
            }
        }
        None => "nogit".into(),
    };
    format!("{when}-{sha}-{profile}")
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
