//! CPU accounting: what a run cost the client and the server, per message
//! (and the client's peak memory, from the same process accounting).
//!
//! The price of a feature such as dedup is paid on both sides of the
//! connection; reporting client and server CPU per message separately shows
//! who pays it. The embedded server is measured exactly from /proc; any
//! other server only through the `cpu` percentage of its `/varz` monitoring
//! endpoint, sampled and integrated over the measured span.

use std::time::{Duration, Instant};

/// User plus system CPU time of a process, from /proc/<pid>/stat.
pub fn process_cpu_time(pid: u32) -> Option<Duration> {
    stat_cpu_time(&format!("/proc/{pid}/stat"))
}

/// User plus system CPU time from a process's or thread's stat file.
fn stat_cpu_time(path: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // utime and stime are fields 14 and 15 overall, 12 and 13 after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = if ticks > 0 { ticks as u64 } else { 100 };
    Some(Duration::from_nanos(
        (utime + stime) * 1_000_000_000 / ticks,
    ))
}

fn total_cpu_time(pids: &[u32]) -> Option<Duration> {
    pids.iter().map(|&p| process_cpu_time(p)).sum()
}

/// CPU time this process (jsbench, every thread) has used, at microsecond
/// resolution.
pub fn own_cpu_time() -> Duration {
    let usage = own_rusage();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// CPU time the calling thread has used, in nanoseconds' resolution: a
/// publisher's sending thread reads it as it ends, since a thread that
/// has ended can no longer be read from /proc.
pub fn this_thread_cpu() -> Duration {
    // SAFETY: clock_gettime writes into the struct we own.
    let ts = unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
        ts
    };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Time the calling thread has spent runnable but waiting for a CPU (the
/// scheduler's run delay, /proc/thread-self/schedstat's second field),
/// so a sending thread that fell behind can say whether it was busy or
/// waiting to be scheduled; `None` where the kernel does not keep it.
pub fn this_thread_waited() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// CPU time used so far by this process's threads whose names start with
/// `prefix` (the runtimes of [`crate::system::runtimes`]), from each thread's
/// schedstat (nanoseconds), or its stat ticks where schedstat is missing.
pub fn threads_cpu(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .filter_map(|t| {
            let on_cpu = std::fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .map(Duration::from_nanos);
            on_cpu.or_else(|| {
                let tid = t.file_name().to_str()?.parse::<u32>().ok()?;
                stat_cpu_time(&format!("/proc/self/task/{tid}/stat"))
            })
        })
        .sum()
}

/// The client's CPU over a variant: the whole process, and the threads of
/// the publish and consume runtimes apart (publishers' sending threads
/// report their own, see [`this_thread_cpu`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientCpu {
    pub process: Duration,
    pub publish_io: Duration,
    pub consume: Duration,
}

impl ClientCpu {
    /// The CPU used so far, to subtract a later reading from.
    pub fn now() -> ClientCpu {
        ClientCpu {
            process: own_cpu_time(),
            publish_io: threads_cpu(crate::system::runtimes::PUBLISH_THREADS),
            consume: threads_cpu(crate::system::runtimes::CONSUME_THREADS),
        }
    }

    pub fn total(&self) -> Duration {
        self.process
    }

    /// What was used since `start`.
    pub fn since(start: ClientCpu) -> ClientCpu {
        let now = ClientCpu::now();
        ClientCpu {
            process: now.process.saturating_sub(start.process),
            publish_io: now.publish_io.saturating_sub(start.publish_io),
            consume: now.consume.saturating_sub(start.consume),
        }
    }
}

impl std::ops::AddAssign for ClientCpu {
    fn add_assign(&mut self, other: ClientCpu) {
        self.process += other.process;
        self.publish_io += other.publish_io;
        self.consume += other.consume;
    }
}

/// The most memory this process has held resident so far (its high-water
/// mark, `ru_maxrss`), in bytes: a load generator that grows with the
/// messages it sends would show here first.
pub fn own_peak_rss() -> u64 {
    // Linux reports kilobytes.
    (own_rusage().ru_maxrss.max(0) as u64) * 1024
}

/// The memory this process holds resident now, in bytes (from
/// /proc/self/statm; 0 where it cannot be read).
pub fn own_rss() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * if page > 0 { page as u64 } else { 4096 }
}

/// The most memory this process has held resident since the high-water
/// mark was last reset ([`reset_peak_rss`]), in bytes, from VmHWM in
/// /proc/self/status; `None` where it cannot be read.
fn peak_rss_since_reset() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Sets this process's high-water mark of resident memory to what it holds
/// now (Linux 4.0 and later), so the next [`peak_rss_since_reset`] covers
/// from here on; false where the kernel refuses.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The client's resident memory over a variant against the messages it
/// had published by then: memory that grows with the messages a run
/// moves (a per-message record kept forever) shows as a slope, which a
/// long run multiplies, while what a run sets up once does not.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemoryTrace {
    pub samples: Vec<MemorySample>,
    /// The kernel's high-water mark since the first sample, which reset it,
    /// as last read: memory taken and handed back between two samples (the
    /// collect phase merging every report) counts in the peak. `None`
    /// where the mark cannot be reset, and the samples alone give the peak.
    pub high_water: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MemorySample {
    /// ns on [`crate::record::clock`].
    pub at_ns: u64,
    /// Messages published by then.
    pub messages: u64,
    /// Resident bytes.
    pub rss: u64,
}

/// The trace keeps one sample a second: /proc is read on the run loop,
/// never on a hot path.
const MEMORY_EVERY_NS: u64 = 1_000_000_000;

impl MemoryTrace {
    /// Takes a sample when a second has passed since the last. The first
    /// resets the kernel's high-water mark, from which [`Self::peak`]
    /// then counts.
    pub fn note(&mut self, now_ns: u64, messages: u64) {
        if self
            .samples
            .last()
            .is_some_and(|s| now_ns < s.at_ns + MEMORY_EVERY_NS)
        {
            return;
        }
        if self.samples.is_empty() {
            self.high_water = reset_peak_rss().then_some(0);
        }
        self.samples.push(MemorySample {
            at_ns: now_ns,
            messages,
            rss: own_rss(),
        });
        self.read_high_water();
    }

    /// Reads the high-water mark once more, however soon after the last
    /// sample: the end of the span the peak covers.
    pub fn close(&mut self) {
        self.read_high_water();
    }

    fn read_high_water(&mut self) {
        if let Some(mark) = &mut self.high_water {
            *mark = (*mark).max(peak_rss_since_reset().unwrap_or(0));
        }
    }

    /// The most memory held resident from the first sample to the last
    /// reading: the kernel's high-water mark where it could be reset, else
    /// the largest sample.
    pub fn peak(&self) -> Option<u64> {
        let sampled = self.samples.iter().map(|s| s.rss).max()?;
        Some(sampled.max(self.high_water.unwrap_or(0)))
    }

    /// Messages published by the last sample.
    pub fn messages(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.messages)
    }

    /// Least-squares slope of resident bytes against messages published,
    /// in bytes per message, over the samples after the first
    /// `warmup_share` of the messages (allocators, buffers and the
    /// client's queues grow to their working size first). `None` with
    /// fewer than 10 samples after the warm-up.
    pub fn slope_after(&self, warmup_share: f64) -> Option<f64> {
        let last = self.samples.last()?.messages;
        let from = (last as f64 * warmup_share) as u64;
        let points: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|s| s.messages >= from)
            .map(|s| (s.messages as f64, s.rss as f64))
            .collect();
        if points.len() < 10 {
            return None;
        }
        let n = points.len() as f64;
        let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
        let my = points.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        (sxx > 0.0).then(|| sxy / sxx)
    }
}

/// This process's resource usage so far.
fn own_rusage() -> libc::rusage {
    // SAFETY: getrusage writes into the struct we own.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    }
}

/// A CPU set of the given CPU numbers, for `sched_setaffinity`.
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

/// Confines every thread a process has to `cpus`; threads it starts later
/// inherit the set from the thread that starts them. Keeps a server and
/// the load generator off each other's cores, so neither's scheduling
/// moves the other's numbers from run to run.
pub fn pin_process(pid: u32, cpus: &[usize]) -> std::io::Result<()> {
    let set = cpu_set(cpus);
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let Some(tid) = entry?
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: the set is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Confines the calling thread to `cpus`: called between fork and exec, it
/// pins the new program and everything it starts. Async-signal-safe.
pub fn pin_this_thread(cpus: &[usize]) -> std::io::Result<()> {
    let set = cpu_set(cpus);
    // SAFETY: the set is a valid cpu_set_t of the size passed; pid 0 is
    // the calling thread.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Where the server's CPU time can be read from.
#[derive(Debug, Clone)]
pub enum ServerCpu {
    /// Local processes (the embedded server, or each node of a local
    /// cluster), summed.
    Processes(Vec<u32>),
    /// Monitoring endpoints, `http://host:port`, one per node: their cpu%
    /// summed.
    Varz(Vec<String>),
    Unavailable,
}

impl ServerCpu {
    /// Starts measuring; [`CpuMeter::stop`] returns the CPU time used since.
    pub fn start(&self) -> CpuMeter {
        match self {
            ServerCpu::Processes(pids) => CpuMeter::Processes {
                pids: pids.clone(),
                start: total_cpu_time(pids),
            },
            ServerCpu::Varz(urls) => CpuMeter::Varz(VarzSampler::start(urls)),
            ServerCpu::Unavailable => CpuMeter::Unavailable,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ServerCpu::Processes(pids) => {
                format!(
                    "process accounting (/proc) of pids {pids:?}, read at both ends of the span"
                )
            }
            ServerCpu::Varz(urls) => {
                // The count, not the addresses: the method travels into
                // report.html, which names no URL (a staging address would
                // leak with every shared report).
                format!(
                    "/varz cpu% of {} monitoring endpoint(s) (--monitor), summed, sampled every \
                     {} ms and integrated to the stop (the server's cpu% is an average over its \
                     own recent past: it lags)",
                    urls.len(),
                    VARZ_EVERY.as_millis()
                )
            }
            ServerCpu::Unavailable => "unavailable".into(),
        }
    }
}

pub enum CpuMeter {
    Processes {
        pids: Vec<u32>,
        start: Option<Duration>,
    },
    Varz(VarzSampler),
    Unavailable,
}

impl CpuMeter {
    /// The CPU used from the start to now.
    pub fn stop(self) -> Option<Duration> {
        self.stop_at(Instant::now())
    }

    /// The CPU used from the start to `at` (now, or just before): process
    /// accounting is read now; /varz is integrated up to `at` exactly.
    pub fn stop_at(self, at: Instant) -> Option<Duration> {
        match self {
            CpuMeter::Processes { pids, start } => {
                Some(total_cpu_time(&pids)?.saturating_sub(start?))
            }
            CpuMeter::Varz(sampler) => sampler.stop(at),
            CpuMeter::Unavailable => None,
        }
    }
}

/// Integrates `/varz` cpu% over time on a background thread, every
/// [`VARZ_EVERY`], from the start to the stop's instant exactly: the
/// stop wakes the thread, whose last interval ends at that instant rather
/// than at its next sample. The server's cpu% is itself an average over
/// its own recent past, so the figure still lags the load; process
/// accounting ([`ServerCpu::Processes`]) does not.
pub struct VarzSampler {
    /// Sends the stop's instant; dropped unread (its variant failed), it
    /// ends the thread too.
    stop: std::sync::mpsc::Sender<Instant>,
    /// Integrated CPU nanoseconds; `None` once a sample failed.
    thread: std::thread::JoinHandle<Option<u64>>,
}

/// How often a [`VarzSampler`] reads /varz.
const VARZ_EVERY: Duration = Duration::from_millis(250);

impl VarzSampler {
    fn start(urls: &[String]) -> VarzSampler {
        let started = Instant::now();
        let (stop, stopped) = std::sync::mpsc::channel::<Instant>();
        let urls = urls.to_vec();
        // Every node's cpu%, summed; `None` if any does not answer.
        let sum = move || -> Option<f64> { urls.iter().map(|u| varz_cpu_percent(u)).sum() };
        let thread = std::thread::spawn(move || {
            // The first reading stands for the start, however late the
            // thread got to it.
            let (mut last, mut last_cpu) = (started, sum()?);
            let mut total_ns = 0f64;
            loop {
                let wait = (last + VARZ_EVERY).saturating_duration_since(Instant::now());
                let end = match stopped.recv_timeout(wait) {
                    Ok(at) => Some(at),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => None,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
                };
                let cpu = sum()?;
                let until = end.unwrap_or_else(Instant::now).max(last);
                let dt = until.duration_since(last).as_secs_f64();
                total_ns += (last_cpu + cpu) / 2.0 / 100.0 * dt * 1e9;
                if end.is_some() {
                    return Some(total_ns as u64);
                }
                (last, last_cpu) = (until, cpu);
            }
        });
        VarzSampler { stop, thread }
    }

    /// The integral from the start to `at`.
    fn stop(self, at: Instant) -> Option<Duration> {
        let _ = self.stop.send(at);
        self.thread.join().ok().flatten().map(Duration::from_nanos)
    }
}

/// The `cpu` field of `<url>/varz`, by a plain HTTP/1.0 GET (the server then
/// answers with the whole body and closes). `None` when unreachable.
pub fn varz_cpu_percent(url: &str) -> Option<f64> {
    let varz: serde_json::Value = crate::system::http::get_json(url, "/varz")?;
    varz.get("cpu")?.as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn(d: Duration) {
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < d {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
    }

    /// Burns until this thread's clock shows `d` of CPU: with the cores
    /// busy the wall clock runs ahead of it, so a burn timed by the wall
    /// clock proves nothing about the meters. The process meters under
    /// test must then show at least as much.
    fn burn_cpu(d: Duration) {
        let before = this_thread_cpu();
        let deadline = Instant::now() + Duration::from_secs(30);
        while this_thread_cpu() - before < d {
            assert!(
                Instant::now() < deadline,
                "the thread's CPU time grew by less than {d:?} in 30 s of burning"
            );
            burn(Duration::from_millis(5));
        }
    }

    #[test]
    fn own_and_process_cpu_time_grow_with_work() {
        let before = own_cpu_time();
        burn_cpu(Duration::from_millis(30));
        let spent = own_cpu_time() - before;
        assert!(spent >= Duration::from_millis(30), "{spent:?}");
        let by_proc = process_cpu_time(std::process::id()).expect("/proc stat readable");
        assert!(by_proc >= Duration::from_millis(30), "{by_proc:?}");
    }

    #[test]
    fn process_meter_measures_a_span() {
        let meter = ServerCpu::Processes(vec![std::process::id()]).start();
        burn_cpu(Duration::from_millis(30));
        let spent = meter.stop().unwrap();
        // /proc counts in clock ticks (10 ms): a tick may fall either side.
        assert!(spent >= Duration::from_millis(20), "{spent:?}");
        assert!(ServerCpu::Unavailable.start().stop().is_none());
    }

    #[test]
    fn a_peak_between_two_samples_is_the_traces_peak() {
        // Memory taken and handed back between two samples, as the collect
        // phase's merge does after the run loop's last sample.
        let mut trace = MemoryTrace::default();
        trace.note(0, 0);
        let before = own_rss();
        const HELD: usize = 64 << 20;
        let mut held = vec![0u8; HELD];
        for page in held.chunks_mut(4096) {
            page[0] = 1;
        }
        std::hint::black_box(&held);
        drop(held);
        trace.note(2 * MEMORY_EVERY_NS, 1);
        let peak = trace.peak().unwrap();
        assert!(
            peak >= before + (HELD as u64) * 9 / 10,
            "peak {peak} B, {before} B before holding {HELD} B"
        );
    }

    /// A /varz that always says one core busy: `cpu` 100.
    fn busy_varz() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                // The whole request first: closing on unread bytes resets
                // the connection under the client's read.
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n")
                    && std::io::Read::read(&mut stream, &mut byte).is_ok_and(|n| n == 1)
                {
                    request.push(byte[0]);
                }
                let body = r#"{"cpu":100.0}"#;
                let _ = std::io::Write::write_all(
                    &mut stream,
                    format!("HTTP/1.0 200 OK\r\n\r\n{body}").as_bytes(),
                );
            }
        });
        url
    }

    #[test]
    fn the_varz_integral_ends_at_the_stop() {
        // One core busy throughout: the integral is the time it covers,
        // which must lie within the calls that start and stop it. A
        // sampler that closed its last interval with a sample up to 250 ms
        // after the stop covered more.
        let url = busy_varz();
        assert_eq!(varz_cpu_percent(&url), Some(100.0));
        let meter = ServerCpu::Varz(vec![url]);
        for _ in 0..3 {
            let started = Instant::now();
            let running = meter.start();
            std::thread::sleep(Duration::from_millis(20));
            let stop = Instant::now();
            let cpu = running.stop_at(stop).expect("the fake /varz answers");
            let window = stop - started;
            assert!(cpu > Duration::ZERO, "it integrated something");
            assert!(
                cpu <= window,
                "{cpu:?} of one core in {window:?} from start to stop"
            );
        }
    }

    #[test]
    fn unreachable_varz_is_none() {
        assert_eq!(varz_cpu_percent("http://127.0.0.1:1"), None);
        assert_eq!(varz_cpu_percent("https://127.0.0.1:1"), None);
    }
}
