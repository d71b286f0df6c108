//! What a run is doing right now, for `run --metrics-listen`: counters the
//! drive and the results writer update as a run goes on, and their
//! Prometheus text exposition (version 0.0.4, which OpenMetrics scrapers
//! read too).
//!
//! One process-wide instance, off until a listener is asked for: the hot
//! path then pays one relaxed load per delivery. When on, each delivery's
//! end-to-end latency also lands in a lock-free log histogram (four
//! buckets per power of two, so a quantile read from it is within 19% of
//! the exact one) whose change since the last scrape gives the
//! percentiles "over the last interval". The exact figures stay those of
//! the results folder.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Four buckets per power of two from 1 µs: bucket `b` holds values below
/// 2^(b/4) µs; the last one everything beyond an hour.
const BUCKETS: usize = 4 * 32 + 1;

static ON: AtomicBool = AtomicBool::new(false);
/// Where `--metrics-listen` listens, once bound (port 0 picks one).
static ADDRESS: Mutex<Option<std::net::SocketAddr>> = Mutex::new(None);

/// Records where the metrics are served.
pub fn set_address(addr: std::net::SocketAddr) {
    *ADDRESS.lock().expect("not poisoned") = Some(addr);
}

/// Where the metrics are served, once the listener is bound.
pub fn address() -> Option<std::net::SocketAddr> {
    *ADDRESS.lock().expect("not poisoned")
}
static LIVE: Live = Live::new();

struct Live {
    /// End-to-end latencies recorded so far, by bucket.
    e2e: [AtomicU64; BUCKETS],
    /// Messages sent and received in variants already finished.
    sent_before: AtomicU64,
    received_before: AtomicU64,
    /// The variant running now: its counts so far.
    sent_now: AtomicU64,
    received_now: AtomicU64,
    in_flight: AtomicU64,
    variants_passed: AtomicU64,
    variants_failed: AtomicU64,
    invariants_failed: AtomicU64,
    lost: AtomicU64,
    client_dropped: AtomicU64,
    redelivered: AtomicU64,
    names: Mutex<Names>,
}

/// The variant running, and what the last scrape saw of the histogram.
struct Names {
    scenario: String,
    variant: String,
    last_scrape: Vec<u64>,
    /// The histogram when the running variant began.
    at_variant_start: Vec<u64>,
}

impl Live {
    const fn new() -> Self {
        Live {
            e2e: [const { AtomicU64::new(0) }; BUCKETS],
            sent_before: AtomicU64::new(0),
            received_before: AtomicU64::new(0),
            sent_now: AtomicU64::new(0),
            received_now: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            variants_passed: AtomicU64::new(0),
            variants_failed: AtomicU64::new(0),
            invariants_failed: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            client_dropped: AtomicU64::new(0),
            redelivered: AtomicU64::new(0),
            names: Mutex::new(Names {
                scenario: String::new(),
                variant: String::new(),
                last_scrape: Vec::new(),
                at_variant_start: Vec::new(),
            }),
        }
    }
}

/// Turns live metrics on (a listener is about to serve them).
pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

fn bucket(ns: u64) -> usize {
    let us = (ns / 1_000).max(1) as f64;
    ((us.log2() * 4.0).ceil() as usize).min(BUCKETS - 1)
}

/// The upper bound of a bucket, in seconds.
fn bucket_top_s(b: usize) -> f64 {
    2f64.powf(b as f64 / 4.0) / 1e6
}

/// One delivery's end-to-end latency (from the intended send).
#[inline]
pub fn record_e2e(ns: u64) {
    if on() {
        LIVE.e2e[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }
}

/// A variant begins.
pub fn variant_started(scenario: &str, variant: &str) {
    if !on() {
        return;
    }
    let mut names = LIVE.names.lock().expect("not poisoned");
    names.scenario = scenario.to_string();
    names.variant = variant.to_string();
    names.at_variant_start = snapshot();
    LIVE.sent_now.store(0, Ordering::Relaxed);
    LIVE.received_now.store(0, Ordering::Relaxed);
    LIVE.in_flight.store(0, Ordering::Relaxed);
}

/// The running variant's counts so far (from its progress ticks).
pub fn progress(sent: u64, received: u64, in_flight: u64) {
    if on() {
        LIVE.sent_now.store(sent, Ordering::Relaxed);
        LIVE.received_now.store(received, Ordering::Relaxed);
        LIVE.in_flight.store(in_flight, Ordering::Relaxed);
    }
}

/// A variant is done: what it counted, and whether it passed.
pub fn variant_done(
    passed: bool,
    invariants_failed: u64,
    ledger: &crate::record::ledger::LedgerCounts,
) {
    if !on() {
        return;
    }
    let add = |a: &AtomicU64, v: u64| {
        a.fetch_add(v, Ordering::Relaxed);
    };
    add(&LIVE.sent_before, ledger.published);
    add(&LIVE.received_before, ledger.deliveries);
    LIVE.sent_now.store(0, Ordering::Relaxed);
    LIVE.received_now.store(0, Ordering::Relaxed);
    LIVE.in_flight.store(0, Ordering::Relaxed);
    add(
        if passed {
            &LIVE.variants_passed
        } else {
            &LIVE.variants_failed
        },
        1,
    );
    add(&LIVE.invariants_failed, invariants_failed);
    add(&LIVE.lost, ledger.lost);
    add(&LIVE.client_dropped, ledger.client_dropped);
    add(&LIVE.redelivered, ledger.redelivered);
}

fn snapshot() -> Vec<u64> {
    LIVE.e2e.iter().map(|b| b.load(Ordering::Relaxed)).collect()
}

/// The quantile (seconds, a bucket's upper bound) of `counts`.
fn quantile_of(counts: &[u64], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let target = ((q * total as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for (b, n) in counts.iter().enumerate() {
        seen += n;
        if seen >= target {
            return Some(bucket_top_s(b));
        }
    }
    None
}

/// The running variant's end-to-end p99 so far (seconds, within 19%),
/// and the invariant checks failed in the run so far: what the progress
/// bar shows beside the rate.
pub fn so_far() -> (Option<f64>, u64) {
    if !on() {
        return (None, 0);
    }
    let now = snapshot();
    let names = LIVE.names.lock().expect("not poisoned");
    let since: Vec<u64> = if names.at_variant_start.len() == now.len() {
        now.iter()
            .zip(&names.at_variant_start)
            .map(|(a, b)| a - b)
            .collect()
    } else {
        now
    };
    (
        quantile_of(&since, 0.99),
        LIVE.invariants_failed.load(Ordering::Relaxed),
    )
}

/// The Prometheus text exposition now; the latency quantiles cover the
/// deliveries since the previous call.
pub fn exposition() -> String {
    let counts = snapshot();
    let mut names = LIVE.names.lock().expect("not poisoned");
    let since: Vec<u64> = if names.last_scrape.len() == counts.len() {
        counts
            .iter()
            .zip(&names.last_scrape)
            .map(|(now, then)| now - then)
            .collect()
    } else {
        counts.clone()
    };
    names.last_scrape = counts;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, lines: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in lines {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let plain = |v: u64| vec![(String::new(), v as f64)];
    metric(
        "jsbench_messages_published_total",
        "counter",
        "Messages the load generator sent in this run.",
        &plain(load(&LIVE.sent_before) + load(&LIVE.sent_now)),
    );
    metric(
        "jsbench_messages_received_total",
        "counter",
        "Deliveries the consumers received in this run.",
        &plain(load(&LIVE.received_before) + load(&LIVE.received_now)),
    );
    metric(
        "jsbench_messages_in_flight",
        "gauge",
        "Deliveries the running variant's clients hold unanswered.",
        &plain(load(&LIVE.in_flight)),
    );
    let total: u64 = since.iter().sum();
    let latency: Vec<(String, f64)> = [0.5, 0.9, 0.99, 0.999]
        .iter()
        .filter_map(|&q| Some((format!("{{quantile=\"{q}\"}}"), quantile_of(&since, q)?)))
        .collect();
    metric(
        "jsbench_e2e_latency_seconds",
        "gauge",
        "End-to-end latency from the intended send, over the deliveries since the previous \
         scrape, as the upper bound of a log bucket (within 19%); exact figures are in the \
         results folder.",
        &latency,
    );
    metric(
        "jsbench_e2e_latency_samples",
        "gauge",
        "Deliveries behind jsbench_e2e_latency_seconds (since the previous scrape).",
        &plain(total),
    );
    metric(
        "jsbench_variants_total",
        "counter",
        "Variants finished, by verdict.",
        &[
            (
                "{result=\"passed\"}".into(),
                load(&LIVE.variants_passed) as f64,
            ),
            (
                "{result=\"failed\"}".into(),
                load(&LIVE.variants_failed) as f64,
            ),
        ],
    );
    metric(
        "jsbench_invariants_failed_total",
        "counter",
        "Invariant checks that failed in finished variants.",
        &plain(load(&LIVE.invariants_failed)),
    );
    metric(
        "jsbench_messages_lost_total",
        "counter",
        "Persisted messages no client saw and the stream no longer holds (the server's loss), in finished variants.",
        &plain(load(&LIVE.lost)),
    );
    metric(
        "jsbench_messages_dropped_by_client_total",
        "counter",
        "Messages the server delivered that no client saw, in finished variants.",
        &plain(load(&LIVE.client_dropped)),
    );
    metric(
        "jsbench_messages_redelivered_total",
        "counter",
        "Messages delivered more than once, in finished variants.",
        &plain(load(&LIVE.redelivered)),
    );
    let label = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let running = if names.variant.is_empty() {
        Vec::new()
    } else {
        vec![(
            format!(
                "{{scenario=\"{}\",variant=\"{}\"}}",
                label(&names.scenario),
                label(&names.variant)
            ),
            1.0,
        )]
    };
    metric(
        "jsbench_variant_running",
        "gauge",
        "The variant running now (1), by scenario and variant.",
        &running,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values_within_a_fifth() {
        for ns in [1_000u64, 5_000, 123_456, 10_000_000, 2_000_000_000] {
            let top = bucket_top_s(bucket(ns)) * 1e9;
            assert!(
                top >= ns as f64 && top < ns as f64 * 1.19 + 1.0,
                "{ns}: {top}"
            );
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }
}
