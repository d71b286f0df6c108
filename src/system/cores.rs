//! How many cores each side of a run may use: what a role's CPU is judged
//! against when the rate search names what limited it. A side's capacity
//! is its own, never this host's for a server elsewhere: the embedded
//! server (or a local cluster) may use the CPUs its processes are allowed
//! (one under `ab --pin`), a remote server the cores its /varz reports.

use crate::system::cpu::ServerCpu;

/// The server's cores, `None` when they cannot be read.
pub fn server(cpu: &ServerCpu) -> Option<usize> {
    match cpu {
        ServerCpu::Processes(pids) => {
            let mut allowed: Vec<usize> = Vec::new();
            for pid in pids {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                allowed.extend(allowed_cpus(&status)?);
            }
            allowed.sort_unstable();
            allowed.dedup();
            (!allowed.is_empty()).then_some(allowed.len())
        }
        ServerCpu::Varz(urls) => urls.iter().map(|u| varz_cores(u)).sum(),
        ServerCpu::Unavailable => None,
    }
}

/// This host's cores, as the process may use them.
pub fn host() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPUs a process may run on, from its status's `Cpus_allowed_list`
/// (`0-3,6`).
fn allowed_cpus(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The `cores` field of `<url>/varz`.
fn varz_cores(url: &str) -> Option<usize> {
    let varz: serde_json::Value = crate::system::http::get_json(url, "/varz")?;
    Some(varz.get("cores")?.as_u64()? as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_list_reads_ranges_and_singles() {
        let status = "Name:\tnats-server\nCpus_allowed:\t4f\nCpus_allowed_list:\t0-3,6\n";
        assert_eq!(allowed_cpus(status), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(allowed_cpus("Cpus_allowed_list:\t1\n"), Some(vec![1]));
        assert_eq!(allowed_cpus("Name:\tx\n"), None);
    }

    #[test]
    fn a_local_server_has_the_cores_its_process_may_use() {
        // This process stands in for a server jsbench started.
        let own = ServerCpu::Processes(vec![std::process::id()]);
        assert!(
            server(&own).is_some_and(|n| n >= host()),
            "{:?}",
            server(&own)
        );
        assert_eq!(server(&ServerCpu::Unavailable), None);
        assert_eq!(server(&ServerCpu::Processes(vec![u32::MAX])), None);
    }
}
