//! Facts about the run that make its numbers interpretable later: which
//! code, which server, which machine.

use super::summary::{HostInfo, ToolInfo};

pub fn tool() -> ToolInfo {
    let commit = env!("JSBENCH_GIT_COMMIT");
    ToolInfo {
        name: env!("CARGO_PKG_NAME").into(),
        version: env!("CARGO_PKG_VERSION").into(),
        git_commit: (!commit.is_empty()).then(|| commit.to_string()),
        git_dirty: env!("JSBENCH_GIT_DIRTY") == "true",
    }
}

pub fn host() -> HostInfo {
    HostInfo {
        os: std::env::consts::OS.into(),
        arch: std::env::consts::ARCH.into(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_bytes: proc_field("/proc/meminfo", "MemTotal:")
            .and_then(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024),
        cpu_model: proc_field("/proc/cpuinfo", "model name"),
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
    }
}

/// The value after the first `key` line of a /proc file.
fn proc_field(path: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let value = line.split_once(':')?.1.trim();
    Some(value.to_string())
}

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
    fn host_facts_are_read() {
        let h = host();
        assert!(h.cores >= 1);
        if cfg!(target_os = "linux") {
            assert!(h.memory_bytes.unwrap_or(0) > 1 << 20, "{h:?}");
        }
    }

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
