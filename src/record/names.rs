//! The names that figures several layers read are reported under, in one
//! typed home: the scenarios that write them, the variant's own records,
//! the terminal table, the charts and report.html read them from here, so
//! renaming one fails to compile where it is read instead of going quiet.
//! A scenario's own figures are named beside it (`scenario::dlq`, ...).

/// A phase that moves messages: `<what>_rate` (msg/s) and
/// `<what>_throughput` (MB/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub rate: &'static str,
    pub throughput: &'static str,
}

pub const PUBLISH: Pace = Pace {
    rate: "publish_rate",
    throughput: "publish_throughput",
};
pub const CONSUME: Pace = Pace {
    rate: "consume_rate",
    throughput: "consume_throughput",
};
/// A replay catching up with what is stored.
pub const CATCH_UP: Pace = Pace {
    rate: "catch_up_rate",
    throughput: "catch_up_throughput",
};

/// The offered load, msg/s.
pub const TARGET_RATE: &str = "target_rate";
/// Deliveries a second, redeliveries included.
pub const DELIVERY_RATE: &str = "delivery_rate";

/// Latency histograms, each also reported as `<name>.p50` ... `<name>.max`
/// ([`quantile`]): from the intended send (open loop), and from the actual
/// send (`_actual`).
pub const E2E_LATENCY: &str = "e2e_latency";
pub const E2E_LATENCY_ACTUAL: &str = "e2e_latency_actual";
pub const PUB_ACK_LATENCY: &str = "pub_ack_latency";
pub const PUB_ACK_LATENCY_ACTUAL: &str = "pub_ack_latency_actual";
/// How late the generator sent each message against its schedule.
pub const SEND_LAG: &str = "send_lag";
/// An atomic batch's first message's intended send to its commit's PubAck:
/// what a batch costs its writer, beside [`PUB_ACK_LATENCY`] per message.
pub const BATCH_COMMIT_LATENCY: &str = "batch_commit_latency";
/// A fast-ingest batch message's intended send to the flow ack naming it:
/// how far behind the sender the server's persistence runs.
pub const FAST_ACK_LATENCY: &str = "fast_ack_latency";

/// The suffixes of a latency histogram's metrics, as
/// [`crate::record::metrics::latency_metrics`] writes them.
pub const QUANTILES: &[&str] = &["p50", "p90", "p99", "p99.9", "p99.99", "max", "mean"];

/// The metric of one of a histogram's [`QUANTILES`]: `e2e_latency.p99`.
pub fn quantile(histogram: &str, q: &str) -> String {
    format!("{histogram}.{q}")
}

/// The per-second timelines of a latency histogram (µs), as the results
/// writer adds them for [`E2E_LATENCY`] and [`PUB_ACK_LATENCY`].
pub const PER_SECOND: [(&str, &str); 3] = [("p50", "p50_us"), ("p99", "p99_us"), ("max", "max_us")];

/// The timeline of one of a histogram's [`PER_SECOND`] quantiles:
/// `e2e_latency.p99_us`.
pub fn per_second(histogram: &str, q: &str) -> String {
    format!("{histogram}.{q}_us")
}

/// CPU per message (µs) on each side of the wire, and the client's share.
pub const CLIENT_CPU_PER_MSG: &str = "client_cpu_per_msg";
pub const PUBLISHER_CPU_PER_MSG: &str = "publisher_cpu_per_msg";
pub const CONSUMER_CPU_PER_MSG: &str = "consumer_cpu_per_msg";
pub const SERVER_CPU_PER_MSG: &str = "server_cpu_per_msg";
pub const CLIENT_CPU_SHARE: &str = "client_cpu_share";
/// The busiest publisher's sending thread: its CPU over its sending span,
/// in cores (near 1, that thread is what limits the rate).
pub const SENDER_THREAD_LOAD: &str = "sender_thread_load";
/// The sending thread that waited most to be scheduled: its time runnable
/// without a CPU over its sending span (near 0, a thread that fell behind
/// while not busy slept through it; high, the host was too busy to run it).
pub const SENDER_THREAD_WAITING: &str = "sender_thread_waiting";
/// What the ledgers cost, bytes per persisted message.
pub const LEDGER_BYTES_PER_MSG: &str = "ledger_bytes_per_msg";
/// How far latencies between processes may be off (worker clocks), µs.
pub const CLOCK_UNCERTAINTY: &str = "clock_uncertainty";

/// Timelines: messages published and delivered per second.
pub const PUBLISHED: &str = "published";
pub const DELIVERED: &str = "delivered";

/// Every plain figure named here, for the checks that a name a profile
/// judges by (`[ab] judge`) is one jsbench reports.
#[cfg(test)]
pub const VALUES: &[&str] = &[
    PUBLISH.rate,
    PUBLISH.throughput,
    CONSUME.rate,
    CONSUME.throughput,
    CATCH_UP.rate,
    CATCH_UP.throughput,
    TARGET_RATE,
    DELIVERY_RATE,
    CLIENT_CPU_PER_MSG,
    PUBLISHER_CPU_PER_MSG,
    CONSUMER_CPU_PER_MSG,
    SERVER_CPU_PER_MSG,
    CLIENT_CPU_SHARE,
    LEDGER_BYTES_PER_MSG,
    CLOCK_UNCERTAINTY,
];

/// Every histogram named here.
#[cfg(test)]
pub const HISTOGRAMS: &[&str] = &[
    E2E_LATENCY,
    E2E_LATENCY_ACTUAL,
    PUB_ACK_LATENCY,
    PUB_ACK_LATENCY_ACTUAL,
    SEND_LAG,
    BATCH_COMMIT_LATENCY,
    FAST_ACK_LATENCY,
];
