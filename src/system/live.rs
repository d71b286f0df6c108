//! What a run is doing right now, for `run --metrics-listen`: counters the
//! drive and the results writer update as a run goes on, and their
//! Prometheus text exposition (version 0.0.4, which OpenMetrics scrapers
//! read too).
//!
//! One process-wide instance, off until a listener is asked for: the hot
//! path then pays one relaxed load per delivery. When on, each delivery's
//! end-to-end latency also lands in a lock-free log histogram (four
//! buckets per power of two, so a quantile read from it is within 19% of
//! the exact one) whose change since a scraper's previous scrape gives
//! that scraper's percentiles "over the last interval": each scraper keeps
//! its own window, so a second one (a person with curl beside Prometheus)
//! does not shorten the first one's. The exact figures stay those of the
//! results folder.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Four buckets per power of two from 1 µs: bucket `b` holds values up to
/// 2^(b/4) µs; the last one everything beyond an hour.
const BUCKETS: usize = 4 * 32 + 1;

/// Scrapers whose windows are kept; beyond that, the one that scraped
/// longest ago is forgotten and its next scrape covers the run so far.
const WINDOWS: usize = 16;

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

/// The variant running, and what each scraper last saw of the histogram.
/// Every baseline here is taken while this lock is held, so a snapshot
/// taken under it is never older than one: counts only grow, and a window
/// never subtracts past zero.
struct Names {
    scenario: String,
    variant: String,
    windows: Vec<Window>,
    /// Scrapes so far: orders the windows by when they were last used.
    scrapes: u64,
    /// The histogram when the running variant began.
    at_variant_start: Vec<u64>,
}

/// One scraper's view: the histogram at its previous scrape.
struct Window {
    scraper: String,
    counts: Vec<u64>,
    scraped: u64,
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
                windows: Vec::new(),
                scrapes: 0,
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
    // In fractions of a µs: whole µs would put 1.9 µs under a 1 µs top.
    let us = (ns as f64 / 1_000.0).max(1.0);
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
    names.at_variant_start = snapshot(&names);
    progress(0, 0, 0);
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
    progress(0, 0, 0);
    add(&LIVE.variants_passed, u64::from(passed));
    add(&LIVE.variants_failed, u64::from(!passed));
    add(&LIVE.invariants_failed, invariants_failed);
    add(&LIVE.lost, ledger.lost);
    add(&LIVE.client_dropped, ledger.client_dropped);
    add(&LIVE.redelivered, ledger.redelivered);
}

/// The histogram now. Callers hold the `names` lock (the `_held` guard):
/// taken outside it, a scrape could read the counts, lose the race for
/// the lock to a later scrape by the same scraper, and then subtract that
/// later baseline from its older counts.
fn snapshot(_held: &Names) -> Vec<u64> {
    LIVE.e2e.iter().map(|b| b.load(Ordering::Relaxed)).collect()
}

/// Counts since `then` (all of them when there was no `then`).
fn since(now: &[u64], then: Option<&[u64]>) -> Vec<u64> {
    match then {
        Some(then) if then.len() == now.len() => {
            now.iter().zip(then).map(|(now, then)| now - then).collect()
        }
        _ => now.to_vec(),
    }
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
    let names = LIVE.names.lock().expect("not poisoned");
    let since = since(&snapshot(&names), Some(&names.at_variant_start));
    (
        quantile_of(&since, 0.99),
        LIVE.invariants_failed.load(Ordering::Relaxed),
    )
}

/// Who is scraping, from a request's head: its `window` query parameter
/// when given (two scrapers of one kind tell themselves apart with it),
/// else its User-Agent; each gets its own window.
pub fn scraper_of(request: &str) -> String {
    let mut lines = request.lines();
    let target = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .unwrap_or("");
    let named = target
        .split_once('?')
        .into_iter()
        .flat_map(|(_, query)| query.split('&'))
        .find_map(|pair| pair.strip_prefix("window="));
    if let Some(name) = named {
        return format!("window={name}");
    }
    lines
        .take_while(|line| !line.is_empty())
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("user-agent")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default()
}

/// The deliveries since `scraper`'s previous scrape (since the run began
/// for its first), its window moved to now.
fn scraper_window(names: &mut Names, scraper: &str) -> Vec<u64> {
    let counts = snapshot(names);
    names.scrapes += 1;
    let scraped = names.scrapes;
    let index = names.windows.iter().position(|w| w.scraper == scraper);
    let window = match index {
        Some(i) => &mut names.windows[i],
        None => {
            if names.windows.len() >= WINDOWS
                && let Some(oldest) =
                    (0..names.windows.len()).min_by_key(|&i| names.windows[i].scraped)
            {
                names.windows.swap_remove(oldest);
            }
            names.windows.push(Window {
                scraper: scraper.to_string(),
                counts: Vec::new(),
                scraped,
            });
            names.windows.last_mut().expect("just pushed")
        }
    };
    let since = since(&counts, Some(&window.counts));
    window.counts = counts;
    window.scraped = scraped;
    since
}

/// The Prometheus text exposition now; the latency quantiles cover the
/// deliveries since `scraper`'s previous scrape ([`scraper_of`]).
pub fn exposition(scraper: &str) -> String {
    let mut names = LIVE.names.lock().expect("not poisoned");
    let since = scraper_window(&mut names, scraper);
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
        "End-to-end latency from the intended send, over the deliveries since this scraper's \
         previous scrape, as the upper bound of a log bucket (within 19%); exact figures are \
         in the results folder.",
        &latency,
    );
    metric(
        "jsbench_e2e_latency_samples",
        "gauge",
        "Deliveries behind jsbench_e2e_latency_seconds (since this scraper's previous scrape).",
        &plain(total),
    );
    metric(
        "jsbench_variants_total",
        "counter",
        "Variants finished, by verdict.",
        &[
            ("passed", &LIVE.variants_passed),
            ("failed", &LIVE.variants_failed),
        ]
        .map(|(v, count)| (format!("{{result=\"{v}\"}}"), load(count) as f64)),
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

    #[test]
    fn a_bucket_top_is_never_below_its_values() {
        // Every nanosecond value up to 100 µs, and around each power of
        // two's quarters beyond: a top below the value would report a
        // latency smaller than any delivery in its bucket.
        let mut values: Vec<u64> = (0..100_000).collect();
        for b in 0..BUCKETS - 1 {
            let top = (bucket_top_s(b) * 1e9) as u64;
            values.extend([top.saturating_sub(1), top, top + 1]);
        }
        for ns in values {
            let top_ns = bucket_top_s(bucket(ns)) * 1e9;
            assert!(
                top_ns >= ns as f64,
                "{ns} ns in a bucket topped at {top_ns} ns"
            );
            assert!(
                top_ns < (ns.max(1_000) as f64) * 1.19 + 1e-6,
                "{ns} ns in a bucket topped at {top_ns} ns"
            );
        }
    }

    #[test]
    fn concurrent_scrapes_never_see_counts_go_backwards() {
        // Two scrapers and a recorder at once: a scrape whose snapshot is
        // older than the window another scrape just stored would subtract
        // past zero (a panic here, garbage quantiles in a release build).
        enable();
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let recorder = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    record_e2e(5_000);
                }
            })
        };
        let scrapers: Vec<_> = (0..2)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..5_000 {
                        let out = exposition("one scraper");
                        assert!(out.contains("jsbench_e2e_latency_samples"));
                    }
                })
            })
            .collect();
        let results: Vec<_> = scrapers.into_iter().map(|s| s.join()).collect();
        stop.store(true, Ordering::Relaxed);
        recorder.join().unwrap();
        for r in results {
            assert!(r.is_ok(), "a scrape panicked");
        }
    }

    fn names() -> Names {
        Names {
            scenario: String::new(),
            variant: String::new(),
            windows: Vec::new(),
            scrapes: 0,
            at_variant_start: Vec::new(),
        }
    }

    #[test]
    fn each_scraper_keeps_its_own_window() {
        // The global histogram is shared with the other tests here (which
        // may add to it, never take away), so the counts are lower bounds:
        // b's scrape in between must not move a's window.
        enable();
        let mut names = names();
        let total = |v: &[u64]| v.iter().sum::<u64>();
        scraper_window(&mut names, "a");
        scraper_window(&mut names, "b");
        for _ in 0..10 {
            record_e2e(2_000);
        }
        let b = total(&scraper_window(&mut names, "b"));
        for _ in 0..10 {
            record_e2e(2_000);
        }
        let a = total(&scraper_window(&mut names, "a"));
        assert!(b >= 10, "b saw its 10: {b}");
        assert!(
            a >= 20,
            "a saw all 20, b's scrape between them notwithstanding: {a}"
        );
    }

    #[test]
    fn the_oldest_window_goes_when_too_many_scrapers_come() {
        let mut names = names();
        for i in 0..WINDOWS + 1 {
            scraper_window(&mut names, &format!("s{i}"));
        }
        assert_eq!(names.windows.len(), WINDOWS);
        assert!(!names.windows.iter().any(|w| w.scraper == "s0"));
        assert!(names.windows.iter().any(|w| w.scraper == "s1"));
    }

    #[test]
    fn a_scraper_is_told_by_its_window_parameter_else_its_user_agent() {
        let request = |target: &str, agent: &str| {
            format!("GET {target} HTTP/1.1\r\nHost: x\r\nUser-Agent: {agent}\r\n\r\n")
        };
        assert_eq!(
            scraper_of(&request("/metrics", "Prometheus/3.0")),
            "Prometheus/3.0"
        );
        assert_eq!(scraper_of(&request("/metrics", "curl/8")), "curl/8");
        assert_eq!(
            scraper_of(&request("/metrics?window=grafana", "Prometheus/3.0")),
            "window=grafana"
        );
        assert_eq!(
            scraper_of(&request("/metrics?x=1&window=b", "Prometheus/3.0")),
            "window=b"
        );
        assert_eq!(scraper_of("GET /metrics HTTP/1.1\r\n\r\n"), "");
    }
}
