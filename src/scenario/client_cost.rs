//! What a variant cost the client: its CPU against the server's, the
//! bytes its ledgers held, and whether its memory stayed flat, so a
//! figure is never read without what it took to produce it.

use std::time::Duration;

use crate::drive::DriveOutcome;
use crate::record::histogram::INTERVAL_BYTES_PER_SECOND;
use crate::record::metrics::Direction;
use crate::record::names;
use crate::system::cpu::MemoryTrace;
use crate::variant::{Invariant, VariantResult};

/// What the ledgers cost: the bytes every task's shard and their merge
/// held at the end, with the per-message records beside them (each
/// consumer's set of first deliveries, each publisher's stored count per
/// message), per persisted message.
pub fn ledger_cost(o: &DriveOutcome, r: &mut VariantResult) {
    let stored = o.counts.persisted;
    if stored == 0 {
        return;
    }
    let shards: u64 = o
        .acks
        .iter()
        .map(|a| a.ledger.bytes() + a.stored_by_message.bytes())
        .sum::<u64>()
        + o.consumers
            .iter()
            .map(|c| c.ledger.bytes() + c.first_deliveries.bytes())
            .sum::<u64>()
        + o.ledger.bytes();
    let per_msg = shards as f64 / stored as f64;
    r.metric(
        names::LEDGER_BYTES_PER_MSG,
        "bytes",
        per_msg,
        Direction::Lower,
    );
}

/// The client's side of a variant: what its CPU, its ledgers and its
/// memory cost.
pub fn client_figures(o: &DriveOutcome, r: &mut VariantResult) {
    client_figures_with(o, o.server_cpu, r);
}

/// [`client_figures`] with the server's CPU as the scenario judged it:
/// `None` where it withheld the figure (a read too short for the clock's
/// ticks), so that neither the server's figure nor the client's share of
/// the CPU is made up from it here.
pub fn client_figures_with(o: &DriveOutcome, server: Option<Duration>, r: &mut VariantResult) {
    cpu_figures(o, server, r);
    ledger_cost(o, r);
    client_memory(o, r);
    consumer_client(o, r);
}

/// `consumer_client`: which client read ("direct", "async-nats"; both,
/// comma-separated, when the clients differed), so a figure is never
/// compared across clients unawares.
fn consumer_client(o: &DriveOutcome, r: &mut VariantResult) {
    let mut clients: Vec<&str> = o.consumers.iter().map(|c| c.client.as_str()).collect();
    clients.sort_unstable();
    clients.dedup();
    if !clients.is_empty() {
        r.param("consumer_client", clients.join(","));
    }
}

/// CPU per message on each side of the wire, from the publishers' connect
/// to the end of the drain: the client's whole process, its publishers
/// (their sending threads and the publish runtime's connection I/O and
/// PubAck readers) and its consumers (the consume runtime) apart, and the
/// server's. A message is one stored, or in a variant that only reads,
/// one read. A scenario that already reported its own client or server
/// figure keeps it. When the client spends more per message than the
/// server, the load generator may be what limits the figures: a warning
/// says so.
fn cpu_figures(o: &DriveOutcome, server: Option<Duration>, r: &mut VariantResult) {
    let messages = if o.counts.persisted > 0 {
        o.counts.persisted
    } else {
        o.counts.delivered
    };
    let split = CpuSplit {
        client: o.client_cpu.total(),
        publisher: (!o.sends.is_empty()).then(|| o.publisher_cpu()),
        consumer: (!o.consumers.is_empty()).then_some(o.client_cpu.consume),
        server,
    };
    cpu_per_message(&split, messages, r);
    sender_thread_load(o, r);
}

/// The busiest sending thread's CPU over its own span, first send to
/// last, in cores: a publisher is one thread, so near 1 that thread is the
/// limit however many cores the host has to spare.
fn sender_thread_load(o: &DriveOutcome, r: &mut VariantResult) {
    let busiest = |share: fn(&crate::load::SendReport) -> Option<Duration>| {
        let spans = o.sends.iter().filter(|s| s.last_sent_ns > s.first_sent_ns);
        spans
            .filter_map(|s| {
                Some(share(s)?.as_secs_f64() * 1e9 / (s.last_sent_ns - s.first_sent_ns) as f64)
            })
            .reduce(f64::max)
    };
    let load = (
        names::SENDER_THREAD_LOAD,
        "cores",
        busiest(|s| Some(s.thread_cpu)),
    );
    let waiting = (
        names::SENDER_THREAD_WAITING,
        "ratio",
        busiest(|s| s.thread_waited),
    );
    for (name, unit, value) in [load, waiting] {
        if let Some(value) = value {
            r.metric(name, unit, value, Direction::None);
        }
    }
}

/// CPU a variant used, each side's from the same window.
pub struct CpuSplit {
    /// The whole client process.
    pub client: Duration,
    /// Its publishers, when the variant has any.
    pub publisher: Option<Duration>,
    /// Its consumers, when the variant has any.
    pub consumer: Option<Duration>,
    /// The server, when it can be read.
    pub server: Option<Duration>,
}

/// Reports `split` per message (µs), the client's share of a message's
/// CPU, and the warning when the client spends more than the server.
/// Figures a scenario already reported stay as they are.
pub fn cpu_per_message(split: &CpuSplit, messages: u64, r: &mut VariantResult) {
    if messages == 0 {
        return;
    }
    let per_message = |d: Duration| d.as_secs_f64() * 1e6 / messages as f64;
    for (name, cpu) in [
        (names::CLIENT_CPU_PER_MSG, Some(split.client)),
        (names::PUBLISHER_CPU_PER_MSG, split.publisher),
        (names::CONSUMER_CPU_PER_MSG, split.consumer),
        (names::SERVER_CPU_PER_MSG, split.server),
    ] {
        if let Some(cpu) = cpu
            && !r.metrics.iter().any(|m| m.name == name)
        {
            r.metric(name, "us", per_message(cpu), Direction::Lower);
        }
    }
    let value = |name: &str| r.metrics.iter().find(|m| m.name == name).map(|m| m.value);
    if let (Some(client), Some(server)) = (
        value(names::CLIENT_CPU_PER_MSG),
        value(names::SERVER_CPU_PER_MSG),
    ) && client + server > 0.0
    {
        let share = client / (client + server);
        r.metric(names::CLIENT_CPU_SHARE, "ratio", share, Direction::None);
        if client > server {
            r.warnings.push(format!(
                "the client used more CPU per message ({client:.1} µs) than the server \
                 ({server:.1} µs): the load generator may be the limit"
            ));
        }
    }
}

/// Share of a variant's messages taken as the client's warm-up before its
/// memory is expected to stay flat.
const MEMORY_WARMUP_SHARE: f64 = 0.2;
/// The slope is judged once this many messages follow the warm-up: over
/// fewer, the allocator's own warm-up reads as growth (0.55 and 0.91 MB per
/// million over the 1.4 million after the warm-up of two 60 s runs at 30k
/// msg/s, against 0.24 over 40 million in the soak). Shorter runs are
/// judged by their growth in bytes instead.
const MEMORY_CHECK_MESSAGES: u64 = 5_000_000;
/// Growth allowed after the warm-up, bytes per message (1 MB per million),
/// beyond what the drive keeps by design: a per-message record kept for the
/// whole run costs more (the old dense ledger cost 12-15).
const MEMORY_SLOPE_LIMIT: f64 = 1.0;
/// Growth allowed after the warm-up of a run too short for a slope, beyond
/// what the drive keeps by design: the allocator's warm-up grew 0.8 and
/// 1.3 MB in the two 60 s runs above, the old dense ledger would have grown
/// 17-21 MB.
const SHORT_RUN_GROWTH_LIMIT: f64 = 8e6;
/// Sets of interval histograms the drive keeps: five recorders by the
/// second values ended in, end-to-end latency again by the second it began.
const INTERVAL_RECORDERS: u64 = 6;
/// What the drive keeps a second beside the interval histograms, by design:
/// its timelines (a count a second each, a few dozen across publishers and
/// consumers: under 512 bytes), the servers' telemetry (two samples a
/// second of about 120 bytes per node, three nodes: 720), the durable's
/// state (four samples of about 64: 256) and the memory trace (24),
/// rounded up.
const OTHER_BYTES_PER_SECOND: u64 = 2_048;

/// What the drive keeps by design over `seconds`: every interval
/// recorder's seconds and the other per-second state, plus the
/// per-message records a behaviour keeps (delivery events, the copies of
/// messages planned to be dead-lettered), a vector holding up to twice its
/// length.
fn kept_by_design(o: &DriveOutcome, seconds: f64) -> f64 {
    let per_second = INTERVAL_RECORDERS * INTERVAL_BYTES_PER_SECOND + OTHER_BYTES_PER_SECOND;
    let events = o.events.len() * std::mem::size_of::<crate::consume::DeliveryEvent>();
    let doomed: usize = o
        .consumers
        .iter()
        .flat_map(|c| &c.doomed)
        .map(|m| std::mem::size_of_val(m) + m.payload.len() + m.subject.len())
        .sum();
    per_second as f64 * seconds + 2.0 * (events + doomed) as f64
}

/// The memory trace after the warm-up: messages and seconds it spans,
/// resident growth end to end, and the least-squares slope (bytes a
/// message). `None` with fewer than two samples after the warm-up.
#[derive(Debug, Clone, Copy)]
struct Growth {
    messages: u64,
    seconds: f64,
    grown: f64,
    slope: Option<f64>,
}

fn growth(t: &MemoryTrace) -> Option<Growth> {
    let last = t.samples.last()?;
    let from = (last.messages as f64 * MEMORY_WARMUP_SHARE) as u64;
    let first = t.samples.iter().find(|s| s.messages >= from)?;
    (last.at_ns > first.at_ns).then(|| Growth {
        messages: last.messages - first.messages,
        seconds: (last.at_ns - first.at_ns) as f64 / 1e9,
        grown: last.rss as f64 - first.rss as f64,
        slope: t.slope_after(MEMORY_WARMUP_SHARE),
    })
}

/// The client's memory over the variant: peak resident, its slope against
/// messages after the warm-up, and what the histograms hold; "client
/// memory flat" against an allowance from design constants, and the
/// interval histograms against their own design.
pub fn client_memory(o: &DriveOutcome, r: &mut VariantResult) {
    if let Some(peak) = o.memory.peak() {
        r.metric("client_rss_peak", "MB", peak as f64 / 1e6, Direction::Lower);
    }
    let recorders = [
        &o.send_lag,
        &o.pub_ack_intended,
        &o.pub_ack_sent,
        &o.e2e_intended,
        &o.e2e_sent,
    ];
    let (fixed, intervals) = recorders
        .iter()
        .map(|h| h.bytes())
        .fold((0, 0), |(f, i), (a, b)| (f + a, i + b));
    for (name, bytes) in [
        ("histogram_bytes", fixed),
        ("interval_log_bytes", intervals),
    ] {
        r.metric(name, "KB", bytes as f64 / 1e3, Direction::None);
    }
    let g = growth(&o.memory);
    if let Some(slope) = g.and_then(|g| g.slope) {
        r.metric("client_rss_slope", "MB/Mmsg", slope, Direction::Lower);
    }
    let flat = if o.parts.is_empty() {
        memory_flat(g, kept_by_design(o, g.map_or(0.0, |g| g.seconds)))
    } else {
        several_readers(o.parts.len())
    };
    r.invariants.push(flat);
    let (seconds, bytes) = recorders
        .iter()
        .map(|h| h.interval_seconds())
        .fold((0, 0), |(s, b), (a, c)| (s + a, b + c));
    r.invariants.push(intervals_within_design(seconds, bytes));
}

const MEMORY_FLAT: &str = "client memory flat";

/// A drive of several streams holds a recorder set per reader until the
/// merge (fanout's 1,000 durables grew 143 MB in 10 s, 110 bytes a
/// recorder-second once merged): the allowance counts one set, so it
/// cannot judge them, and says so rather than fail or pass.
fn several_readers(streams: usize) -> Invariant {
    Invariant::not_applicable(
        MEMORY_FLAT,
        format!(
            "a drive of {streams} streams: each reader keeps its own per-second histograms until \
             the merge, which the allowance (one drive's recorders) does not count"
        ),
    )
}

/// `allowance`: the bytes the drive keeps by design over the growth's span.
fn memory_flat(growth: Option<Growth>, allowance: f64) -> Invariant {
    let Some(g) = growth else {
        return Invariant::not_applicable(
            MEMORY_FLAT,
            "fewer than two memory samples after the warm-up",
        );
    };
    let warmup = MEMORY_WARMUP_SHARE * 100.0;
    let invariant = match g.slope {
        Some(slope) if g.messages >= MEMORY_CHECK_MESSAGES => {
            let by_design = allowance / g.messages as f64;
            Invariant::check(
                MEMORY_FLAT,
                slope - by_design <= MEMORY_SLOPE_LIMIT,
                format!(
                    "resident memory grew {slope:.2} MB per million messages over the {} messages \
                     after the first {warmup:.0}%, {by_design:.2} of it allowed by design (interval \
                     histograms, per-second state, kept records; limit {MEMORY_SLOPE_LIMIT} MB beyond)",
                    g.messages
                ),
            )
        }
        _ => Invariant::check(
            MEMORY_FLAT,
            g.grown - allowance <= SHORT_RUN_GROWTH_LIMIT,
            format!(
                "resident memory grew {:.1} MB over the {} messages ({:.0} s) after the first \
                 {warmup:.0}%, {:.1} MB of it allowed by design (limit {:.0} MB beyond); under \
                 {MEMORY_CHECK_MESSAGES} messages the growth is judged, not its slope",
                g.grown / 1e6,
                g.messages,
                g.seconds,
                allowance / 1e6,
                SHORT_RUN_GROWTH_LIMIT / 1e6
            ),
        ),
    };
    invariant.client_side()
}

/// The interval histograms hold no more a second than they were designed
/// to ([`INTERVAL_BYTES_PER_SECOND`]): the flat check allows them that
/// much, so their own growth must be held to it here.
fn intervals_within_design(seconds: u64, bytes: u64) -> Invariant {
    const NAME: &str = "interval histograms within design";
    if seconds == 0 {
        return Invariant::not_applicable(NAME, "no finished second");
    }
    Invariant::check(
        NAME,
        bytes <= seconds * INTERVAL_BYTES_PER_SECOND,
        format!(
            "{bytes} bytes over {seconds} finished recorder-seconds: {} a second against \
             {INTERVAL_BYTES_PER_SECOND} by design",
            bytes / seconds
        ),
    )
    .client_side()
}

#[cfg(test)]
mod memory_tests {
    use super::*;
    use crate::system::cpu::MemorySample;

    /// A trace of 61 one-second samples over `messages` whose resident
    /// memory grows `bytes_per_msg` a message after a 20 MB start.
    fn trace(bytes_per_msg: f64, messages: u64) -> MemoryTrace {
        let n = 60u64;
        MemoryTrace {
            samples: (0..=n)
                .map(|i| {
                    let m = messages * i / n;
                    MemorySample {
                        at_ns: i * 1_000_000_000,
                        messages: m,
                        // Some jitter, as an allocator gives.
                        rss: 20_000_000 + (m as f64 * bytes_per_msg) as u64 + (i % 3) * 4096,
                    }
                })
                .collect(),
            high_water: None,
        }
    }

    /// The check with what a drive keeps by design a second and nothing
    /// kept per message.
    fn check(t: &MemoryTrace) -> Invariant {
        let g = growth(t);
        let allowance = g.map_or(0.0, |g| kept_by_design(&DriveOutcome::empty(), g.seconds));
        memory_flat(g, allowance)
    }

    #[test]
    fn memory_that_grows_with_messages_fails_and_flat_memory_passes() {
        // The old dense ledger: about 15 bytes a message.
        let growing = check(&trace(15.0, 10_000_000));
        assert!(!growing.passed && growing.applicable, "{growing:?}");
        assert!(
            growing.detail.contains("15.00 MB per million"),
            "{}",
            growing.detail
        );
        let flat = check(&trace(0.0, 10_000_000));
        assert!(flat.passed && flat.applicable, "{flat:?}");
        let slope = trace(15.0, 10_000_000).slope_after(0.2).unwrap();
        assert!((slope - 15.0).abs() < 0.1, "{slope}");
    }

    #[test]
    fn what_the_drive_keeps_a_second_by_design_is_allowed_and_no_more() {
        // 5 million messages in 48 s after the warm-up: the design allows
        // 12 KB a second, 0.12 bytes a message.
        let per_second =
            (INTERVAL_RECORDERS * INTERVAL_BYTES_PER_SECOND + OTHER_BYTES_PER_SECOND) as f64;
        let by_design = per_second * 48.0 / 8_000_000.0;
        let kept = check(&trace(by_design + 0.9, 10_000_000));
        assert!(kept.passed && kept.applicable, "{kept:?}");
        let beyond = check(&trace(by_design + 1.1, 10_000_000));
        assert!(!beyond.passed, "{beyond:?}");
    }

    #[test]
    fn interval_histograms_growing_beyond_design_are_no_allowance() {
        // 10 million messages in a minute, memory growing 15 bytes each:
        // had the interval histograms measured that much, they would have
        // excused it. The allowance is the design's, whatever they hold.
        let leak = check(&trace(15.0, 10_000_000));
        assert!(!leak.passed, "{leak:?}");
        // And their own bytes are held to the design apart.
        let within = intervals_within_design(100, 100 * INTERVAL_BYTES_PER_SECOND);
        assert!(within.passed && within.applicable, "{within:?}");
        let beyond = intervals_within_design(100, 100 * INTERVAL_BYTES_PER_SECOND + 1);
        assert!(!beyond.passed && beyond.client_side, "{beyond:?}");
        assert!(!intervals_within_design(0, 0).applicable);
    }

    #[test]
    fn a_short_run_that_leaks_fails() {
        // The old dense ledger over a 60 s run at 30k msg/s: 27 MB.
        let leak = check(&trace(15.0, 1_800_000));
        assert!(leak.applicable && !leak.passed, "{leak:?}");
        assert!(leak.detail.contains("growth is judged"), "{}", leak.detail);
        // The allocator's warm-up over the same run (about 1 MB) passes.
        let warm = check(&trace(0.9, 1_800_000));
        assert!(warm.applicable && warm.passed, "{warm:?}");
    }

    #[test]
    fn a_drive_of_several_streams_is_not_judged_by_one_drives_allowance() {
        let mut o = DriveOutcome::empty();
        o.memory = trace(1_000.0, 10_000_000);
        let part = |name: &str| crate::drive::StreamPart {
            name: name.into(),
            outcome: DriveOutcome::empty(),
            stored: None,
            read_error: None,
            durables: Vec::new(),
        };
        let mut r = VariantResult::new("v");
        client_memory(&o, &mut r);
        let flat = |r: &VariantResult| r.invariants.iter().find(|i| i.name == MEMORY_FLAT).cloned();
        assert!(flat(&r).unwrap().applicable && !flat(&r).unwrap().passed);
        o.parts = vec![part("a"), part("b")];
        let mut r = VariantResult::new("v");
        client_memory(&o, &mut r);
        let i = flat(&r).unwrap();
        assert!(!i.applicable, "{i:?}");
        assert!(i.detail.contains("2 streams"), "{}", i.detail);
    }

    #[test]
    fn a_run_without_samples_after_its_warm_up_cannot_tell_and_says_so() {
        assert!(!check(&MemoryTrace::default()).applicable);
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    fn figures(client_ms: u64, server_ms: u64) -> VariantResult {
        let mut r = VariantResult::new("v");
        let split = CpuSplit {
            client: Duration::from_millis(client_ms),
            publisher: Some(Duration::from_millis(client_ms / 2)),
            consumer: Some(Duration::from_millis(client_ms / 4)),
            server: Some(Duration::from_millis(server_ms)),
        };
        cpu_per_message(&split, 1_000, &mut r);
        r
    }

    fn value(r: &VariantResult, name: &str) -> f64 {
        r.metrics.iter().find(|m| m.name == name).unwrap().value
    }

    fn close(got: f64, want: f64) {
        assert!((got - want).abs() < 1e-9, "{got} != {want}");
    }

    #[test]
    fn a_client_that_outspends_the_server_is_warned_about() {
        let r = figures(30, 10);
        close(value(&r, "client_cpu_per_msg"), 30.0);
        close(value(&r, "publisher_cpu_per_msg"), 15.0);
        close(value(&r, "consumer_cpu_per_msg"), 7.0);
        close(value(&r, "server_cpu_per_msg"), 10.0);
        close(value(&r, "client_cpu_share"), 0.75);
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        assert!(r.warnings[0].contains("load generator may be the limit"));

        let r = figures(10, 30);
        close(value(&r, "client_cpu_share"), 0.25);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
    }

    #[test]
    fn a_figure_the_scenario_reported_stays_and_nothing_comes_of_no_messages() {
        let mut r = VariantResult::new("v");
        r.metric(
            "client_cpu_per_msg",
            "us",
            1.0,
            crate::record::metrics::Direction::Lower,
        );
        let split = CpuSplit {
            client: Duration::from_secs(1),
            publisher: None,
            consumer: None,
            server: None,
        };
        cpu_per_message(&split, 10, &mut r);
        assert_eq!(
            r.metrics.len(),
            1,
            "no duplicate, no share without a server"
        );
        close(value(&r, "client_cpu_per_msg"), 1.0);
        let mut empty = VariantResult::new("v");
        cpu_per_message(&split, 0, &mut empty);
        assert!(empty.metrics.is_empty());
    }
}
