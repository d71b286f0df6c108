//! What this jsbench is and where it runs: the facts that make a number
//! interpretable later, and that a worker must share with its coordinator.

use serde::{Deserialize, Serialize};

/// Bumped whenever a reader of an older summary would misread a newer one.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
    pub git_commit: Option<String>,
    pub git_dirty: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    pub os: String,
    pub arch: String,
    pub cores: usize,
    pub memory_bytes: Option<u64>,
    pub cpu_model: Option<String>,
    pub hostname: Option<String>,
}

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
}
