//! What scenarios that drive a durable report and check alike: planned
//! against observed fates (redelivery, dlq), nothing lost, every publish
//! persisted, the stream holding it, the server showing nothing pending,
//! and the records of the drive itself.

use std::time::Duration;

use crate::consume::fates::Analysis;
use crate::drive::DriveOutcome;
use crate::profile::{BehaviourPlan, ConsumerPlan};
use crate::record::histogram::INTERVAL_BYTES_PER_SECOND;
use crate::record::ledger::{LedgerCounts, LedgerShard};
use crate::record::names;
use crate::system::cpu::MemoryTrace;
use crate::variant::{Invariant, VariantResult};

/// Every persisted message delivered at least once.
pub const NOTHING_LOST: &str = "lost = 0";
/// The stream's count equals what PubAcks confirmed, less its limits'.
pub const STREAM_HOLDS: &str = "stream holds every persisted message";
/// Every publish stored, or refused by the stream's own limits.
pub const PERSISTED: &str = "every publish persisted";
/// The durable shows nothing pending once the drive has settled.
pub const NOTHING_PENDING: &str = "server reports nothing pending";

/// Every message's fate in a drive against the behaviour planned for it,
/// a redelivery held early beyond a tolerance the drive does not set.
pub fn fates(o: &DriveOutcome, behaviour: &BehaviourPlan, consumer: &ConsumerPlan) -> Analysis {
    crate::consume::fates::analyse(
        &o.events,
        &o.ledger,
        behaviour,
        consumer,
        crate::consume::fates::EarlyTolerance::measured(),
    )
}

/// How many messages were planned to end, and did end, acked, termed or
/// exhausted after MaxDeliver deliveries.
pub const PLANNED_ACKED: &str = "planned.acked";
pub const PLANNED_TERMED: &str = "planned.termed";
pub const PLANNED_EXHAUSTED: &str = "planned.exhausted";
pub const OBSERVED_ACKED: &str = "observed.acked";
pub const OBSERVED_TERMED: &str = "observed.termed";
pub const OBSERVED_EXHAUSTED: &str = "observed.exhausted";

/// The planned and observed fate counts, and the early tolerance the
/// analysis used.
pub fn fate_metrics(a: &Analysis, r: &mut VariantResult) {
    r.param("early_tolerance", a.tolerance.describe());
    for (names, planned, observed) in [
        (
            (PLANNED_ACKED, OBSERVED_ACKED),
            a.planned.acked,
            a.observed.acked,
        ),
        (
            (PLANNED_TERMED, OBSERVED_TERMED),
            a.planned.termed,
            a.observed.termed,
        ),
        (
            (PLANNED_EXHAUSTED, OBSERVED_EXHAUSTED),
            a.planned.exhausted,
            a.observed.exhausted,
        ),
    ] {
        r.count(names.0, planned);
        r.count(names.1, observed);
    }
}

/// Every message ended as planned, none was lost, every publish persisted.
pub fn fate_invariants(o: &DriveOutcome, a: &Analysis, r: &mut VariantResult) {
    r.invariants.push(Invariant::check(
        "every message ends as planned",
        a.mismatches == 0,
        if a.mismatches == 0 {
            format!(
                "{} messages: {} acked, {} termed, {} exhausted after max_deliver deliveries",
                a.messages, a.observed.acked, a.observed.termed, a.observed.exhausted
            )
        } else {
            format!(
                "{} of {} differ: {}",
                a.mismatches,
                a.messages,
                a.examples.join("; ")
            )
        },
    ));
    // Never delivered, as the server's loss; what the clients missed is
    // their own count.
    r.invariants.push(nothing_lost(o));
    r.invariants.push(nothing_dropped(o));
    r.invariants.push(every_publish_persisted(PERSISTED, o));
}

/// Every publish got a PubAck that stored it, or was refused by the
/// stream's own limits (discard new at a limit, above max_msg_size), which
/// is what the stream was configured to do: counted, named, not a failure.
pub fn every_publish_persisted(name: &str, o: &DriveOutcome) -> Invariant {
    let c = &o.counts;
    let other_errors = c.publish_errors - c.refused_by_limit.min(c.publish_errors);
    let refused = if c.refused_by_limit > 0 {
        format!(
            ", {} refused by the stream's limits (first: {})",
            c.refused_by_limit,
            o.acks
                .iter()
                .find_map(|a| a.first_refusal.as_deref())
                .unwrap_or("?")
        )
    } else {
        String::new()
    };
    Invariant::check(
        name,
        other_errors == 0 && c.persisted + c.refused_by_limit == c.published,
        format!(
            "{} published, {} persisted, {other_errors} PubAck errors or timeouts{refused}",
            c.published, c.persisted
        ),
    )
}

/// A fill ([`DriveSpec::fill`](crate::drive::DriveSpec::fill)) stored
/// every message once and retried none: only then is stream sequence
/// *m* + 1 message *m*, which every read checked against the fill assumes.
pub fn filled_in_order(o: &DriveOutcome, messages: u64) -> anyhow::Result<()> {
    let stored = o.counts.persisted;
    let retried: u64 = o
        .acks
        .iter()
        .map(|a| a.retries_stored + a.late_stored + a.resent_stored)
        .sum();
    if stored != messages || !o.errors.is_empty() || retried > 0 {
        anyhow::bail!(
            "filling the stream stored {stored} of {messages} messages, {retried} of them \
             retried (what reads it needs every message stored in order, once): {}",
            o.errors.join("; ")
        );
    }
    Ok(())
}

/// Every persisted message delivered at least once (`lost` counts the
/// server's losses; the clients' are `nothing_dropped_by_client`'s). Never
/// seen messages nothing could attribute fail it too, named as such: that
/// nothing was lost cannot be shown, nor that the server lost them.
pub fn nothing_lost(o: &DriveOutcome) -> Invariant {
    nothing_lost_of(&o.counts, &o.ledger)
}

/// [`nothing_lost`] of counts and a ledger a scenario merged itself.
pub fn nothing_lost_of(c: &LedgerCounts, ledger: &LedgerShard) -> Invariant {
    let mut detail = if c.lost == 0 {
        format!("0 of {} persisted messages undelivered", c.persisted)
    } else {
        format!(
            "{} of {} persisted messages never delivered (first sequences: {:?})",
            c.lost,
            c.persisted,
            ledger.lost_sequences(10)
        )
    };
    if c.unattributed > 0 {
        detail.push_str(&format!(
            "; {} more never seen by a client and unattributed, not counted lost: beyond the \
             {} looked up one by one, the stream's state could not tell whether it still holds them",
            c.unattributed,
            crate::drive::HELD_LOOKUPS
        ));
    }
    Invariant::check(NOTHING_LOST, c.lost == 0 && c.unattributed == 0, detail)
}

/// One invariant over many parts of a variant (each durable, each
/// stream): it holds when it held for every part; the evidence names how
/// many parts it covered and the first parts it failed for. Not
/// applicable when it applied to none; client-side when every part's was.
/// `None` without parts.
pub fn across(parts: &[(String, Invariant)], what: &str) -> Option<Invariant> {
    let (_, first) = parts.first()?;
    let name = first.name.as_str();
    let applied: Vec<&(String, Invariant)> = parts.iter().filter(|(_, i)| i.applicable).collect();
    let Some((example, example_check)) = applied.first() else {
        return Some(Invariant::not_applicable(name, first.detail.clone()));
    };
    let failed: Vec<&&(String, Invariant)> = applied.iter().filter(|(_, i)| !i.passed).collect();
    let detail = if failed.is_empty() {
        format!(
            "held for all {} {what}; {example}: {}",
            applied.len(),
            example_check.detail
        )
    } else {
        let shown: Vec<String> = failed
            .iter()
            .take(3)
            .map(|(part, i)| format!("{part}: {}", i.detail))
            .collect();
        format!(
            "failed for {} of {} {what}; {}{}",
            failed.len(),
            applied.len(),
            shown.join("; "),
            if failed.len() > 3 { "; ..." } else { "" }
        )
    };
    let invariant = Invariant::check(name, failed.is_empty(), detail);
    Some(if applied.iter().all(|(_, i)| i.client_side) {
        invariant.client_side()
    } else {
        invariant
    })
}

/// The stream's message count (from stream info) equals what PubAcks
/// confirmed, less what its own limits evicted: nothing stored behind
/// jsbench's back, nothing missing.
pub fn stream_holds(stored: Option<u64>, c: &crate::record::ledger::LedgerCounts) -> Invariant {
    const NAME: &str = STREAM_HOLDS;
    match stored {
        Some(n) if c.evicted > 0 || c.removed_by_ack > 0 => Invariant::check(
            NAME,
            n + c.evicted + c.removed_by_ack == c.persisted,
            format!(
                "holds {n}; {} persisted, {} evicted by the stream's limits, {} removed on ack by its retention",
                c.persisted, c.evicted, c.removed_by_ack
            ),
        ),
        Some(n) => Invariant::equal(NAME, n, c.persisted),
        None => Invariant::check(NAME, false, "stream info unavailable"),
    }
}

/// What the stream's limits did: the invariant that its evictions are its
/// limits' (it ended at one of them), and the metrics and the warning
/// that say which limit and when. Not applicable to a stream without a
/// limit that evicts.
pub fn evictions(o: &DriveOutcome, r: &mut VariantResult) {
    const NAME: &str = "evictions explained by the stream's limits";
    let Some(e) = &o.eviction else {
        r.invariants.push(Invariant::not_applicable(
            NAME,
            "the stream has no limit that evicts (max_msgs, max_bytes, max_age with discard old)",
        ));
        return;
    };
    r.count("evicted", e.evicted);
    if e.evicted > 0 && e.explained() {
        let when = o
            .eviction_began_s()
            .map(|s| format!(", from about {s:.2} s after the first send"))
            .unwrap_or_default();
        r.warnings.push(format!(
            "the stream reached a limit: {}{when}",
            e.describe()
        ));
    }
    r.invariants
        .push(Invariant::check(NAME, e.explained(), e.describe()));
}

/// Publishes refused by the stream's limits, as a metric and a warning
/// that names the refusal; nothing when there were none.
pub fn refusals(o: &DriveOutcome, r: &mut VariantResult) {
    let c = &o.counts;
    if c.refused_by_limit == 0 {
        return;
    }
    r.count("refused_by_limit", c.refused_by_limit);
    r.warnings.push(format!(
        "the stream refused {} publish(es) at its limits: {}",
        c.refused_by_limit,
        o.acks
            .iter()
            .find_map(|a| a.first_refusal.as_deref())
            .unwrap_or("?")
    ));
}

/// No persisted message was missed by the clients: delivered by the
/// server and never seen, or held for a client that had stopped asking.
/// The load generator's failure, not the server's: it fails the variant
/// with its cause, apart from `lost = 0`.
pub fn nothing_dropped_by_client(dropped: u64, cause: Option<&str>) -> Invariant {
    Invariant::check(
        "no message dropped by the client",
        dropped == 0,
        match cause {
            Some(cause) if dropped > 0 => format!("{dropped} dropped: {cause}"),
            _ => format!("{dropped} dropped"),
        },
    )
    .client_side()
}

/// [`nothing_dropped_by_client`] of a drive's counts and their cause.
pub fn nothing_dropped(o: &DriveOutcome) -> Invariant {
    nothing_dropped_by_client(o.counts.client_dropped, o.client_drop_cause.as_deref())
}

/// What a paced drive's publishers did: their rate and throughput, and
/// their [`pub_acks`].
pub fn publishing(o: &DriveOutcome, r: &mut VariantResult) {
    r.metrics
        .extend(crate::record::metrics::rate_and_throughput(
            names::PUBLISH,
            o.publish_rate(),
            o.publish_throughput(),
        ));
    pub_acks(o, r);
}

/// The PubAck latency from the intended and from the actual send, and the
/// generator's send lag.
pub fn pub_acks(o: &DriveOutcome, r: &mut VariantResult) {
    r.latency(names::PUB_ACK_LATENCY, &o.pub_ack_intended);
    r.latency(names::PUB_ACK_LATENCY_ACTUAL, &o.pub_ack_sent);
    r.latency(names::SEND_LAG, &o.send_lag);
}

/// Every delivery carried the stamp jsbench's publisher wrote in it.
pub fn stamped(o: &DriveOutcome) -> Invariant {
    let malformed = o.consumers.iter().map(|c| c.malformed).sum();
    Invariant::equal("every payload carries its stamp", malformed, 0)
}

/// Says, for a server jsbench did not start, that the server's time
/// stamps (store times, advisory times) are compared with jsbench's clock
/// as they are: another host's clock may be off by its offset, which no
/// exchange measures yet. A server jsbench started shares its clock.
pub fn server_clock(ctx: &crate::drive::RunContext, r: &mut VariantResult) {
    if ctx.faults.is_none() {
        r.param(
            "server_timestamps",
            "another host's clock, compared uncorrected with jsbench's",
        );
    }
}

/// The durable shows nothing pending once the drive has settled.
pub fn nothing_pending(o: &DriveOutcome) -> Invariant {
    Invariant::check(
        NOTHING_PENDING,
        o.server_state
            .is_some_and(|s| s.num_pending == 0 && s.num_ack_pending == 0),
        match o.server_state {
            Some(s) => format!(
                "num_pending {}, num_ack_pending {}, num_redelivered {}",
                s.num_pending, s.num_ack_pending, s.num_redelivered
            ),
            None => "consumer info unavailable".into(),
        },
    )
}

/// Every publisher sent its whole schedule. One that stopped on a publish
/// error or a stall left messages unsent, which no count of what was sent
/// can show: the variant fails, with the publisher's own words.
pub fn publishers_finished(o: &DriveOutcome) -> Invariant {
    const NAME: &str = "every publisher finished its schedule";
    if o.sends.is_empty() {
        return Invariant::not_applicable(NAME, "nothing was published");
    }
    let stopped: Vec<String> = o
        .sends
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            s.first_error
                .as_ref()
                .or(s.stalled.as_ref())
                .map(|e| format!("publisher {i} stopped: {e}"))
        })
        .collect();
    Invariant::check(
        NAME,
        stopped.is_empty(),
        if stopped.is_empty() {
            format!("{} publisher(s), none stopped early", o.sends.len())
        } else {
            stopped.join("; ")
        },
    )
}

/// The server's side of a variant, from its monitoring endpoints: peak
/// memory, CPU per stored message, slow consumers and API errors, memory
/// and CPU over time, and the meta leader when it moved. Nothing when no
/// endpoint is known (a server jsbench did not start, without --monitor).
pub fn server_figures(o: &DriveOutcome, r: &mut VariantResult) {
    use crate::record::metrics::Direction;
    let stored = o.counts.persisted;
    if let Some(cpu) = o.server_cpu.filter(|_| stored > 0)
        && !r
            .metrics
            .iter()
            .any(|m| m.name == names::SERVER_CPU_PER_MSG)
    {
        r.metric(
            names::SERVER_CPU_PER_MSG,
            "us",
            cpu.as_secs_f64() * 1e6 / stored as f64,
            Direction::Lower,
        );
    }
    let Some(t) = &o.telemetry else {
        return;
    };
    r.param(
        "server_telemetry",
        format!(
            "{} sample(s) of {} node(s) every {} ms, {} failed",
            t.samples.len(),
            t.nodes.len(),
            crate::server::telemetry::SAMPLE_EVERY.as_millis(),
            t.failed
        ),
    );
    let mb = |bytes: u64| bytes as f64 / 1e6;
    for (name, value, direction) in [
        ("server_peak_mem", t.peak_mem_bytes(), Direction::Lower),
        ("server_mem_growth", t.mem_growth_bytes(), Direction::Lower),
        ("server_js_memory", t.peak(|s| s.js_memory), Direction::None),
        (
            "server_js_storage",
            t.peak(|s| s.js_storage),
            Direction::None,
        ),
    ] {
        if let Some(v) = value {
            r.metric(name, "MB", mb(v), direction);
        }
    }
    let slow = t.growth(|s| s.slow_consumers);
    let api_errors = t.growth(|s| s.api_errors);
    r.count("server_slow_consumers", slow);
    r.count("server_api_errors", api_errors);
    if slow > 0 {
        r.warnings.push(format!(
            "the server counted {slow} slow consumer(s) during the variant (/varz slow_consumers): \
             a client could not keep up with what the server sent it"
        ));
    }
    if api_errors > 0 {
        r.warnings.push(format!(
            "the server's JetStream API answered {api_errors} request(s) with an error during the variant (/jsz api.errors)"
        ));
    }
    let leaders = t.meta_leaders(o.t0_ns);
    if leaders.len() > 1 {
        r.warnings.push(format!(
            "the meta leader moved: {}",
            leaders
                .iter()
                .map(|(at, l)| format!("{l} at {at:.1} s"))
                .collect::<Vec<_>>()
                .join(", then ")
        ));
    }
    for moved in t.stream_leader_moves(o.t0_ns) {
        r.warnings
            .push(format!("a stream leader moved during the variant: {moved}"));
    }
    for lost in t.routes_lost(o.t0_ns) {
        r.warnings
            .push(format!("a route went down during the variant: {lost}"));
    }
    r.timelines.extend(t.timelines(o.t0_ns));
}

/// What the ledgers cost: the bytes every task's shard and their merge
/// held at the end, with the per-message records beside them (each
/// consumer's set of first deliveries, each publisher's stored count per
/// message), per persisted message.
pub fn ledger_cost(o: &DriveOutcome, r: &mut VariantResult) {
    use crate::record::metrics::Direction;
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
    r.metric(
        names::LEDGER_BYTES_PER_MSG,
        "bytes",
        shards as f64 / stored as f64,
        Direction::Lower,
    );
}

/// The warning of a variant stopped early.
pub const INTERRUPTED: &str =
    "interrupted: the variant stopped early; its counts cover what was sent";

/// The drive's warnings: a variant stopped early, and the tasks' errors.
pub fn warnings(o: &DriveOutcome, r: &mut VariantResult) {
    if o.interrupted {
        r.warnings.push(INTERRUPTED.into());
    }
    r.warnings.extend(o.errors.iter().cloned());
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
    use crate::record::metrics::Direction;
    let load = o
        .sends
        .iter()
        .filter(|s| s.last_sent_ns > s.first_sent_ns)
        .map(|s| s.thread_cpu.as_secs_f64() * 1e9 / (s.last_sent_ns - s.first_sent_ns) as f64)
        .reduce(f64::max);
    if let Some(load) = load {
        r.metric(names::SENDER_THREAD_LOAD, "cores", load, Direction::None);
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
    use crate::record::metrics::Direction;
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
        r.metric(
            names::CLIENT_CPU_SHARE,
            "ratio",
            client / (client + server),
            Direction::None,
        );
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
    use crate::record::metrics::Direction;
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
    r.metric("histogram_bytes", "KB", fixed as f64 / 1e3, Direction::None);
    r.metric(
        "interval_log_bytes",
        "KB",
        intervals as f64 / 1e3,
        Direction::None,
    );
    let g = growth(&o.memory);
    if let Some(slope) = g.and_then(|g| g.slope) {
        r.metric("client_rss_slope", "MB/Mmsg", slope, Direction::Lower);
    }
    let allowance = g.map_or(0.0, |g| kept_by_design(o, g.seconds));
    r.invariants.push(memory_flat(g, allowance));
    let (seconds, bytes) = recorders
        .iter()
        .map(|h| h.interval_seconds())
        .fold((0, 0), |(s, b), (a, c)| (s + a, b + c));
    r.invariants.push(intervals_within_design(seconds, bytes));
}

const MEMORY_FLAT: &str = "client memory flat";

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

/// The ledger, the per-second and sampled timelines, the drive's warnings,
/// the server's figures, and whether every publisher finished.
pub fn drive_records(o: &DriveOutcome, sample_every: Option<Duration>, r: &mut VariantResult) {
    server_figures(o, r);
    client_figures(o, r);
    r.invariants.push(publishers_finished(o));
    r.ledger = o.counts;
    r.timelines
        .insert(names::PUBLISHED.into(), o.published_timeline.clone());
    r.timelines
        .insert(names::DELIVERED.into(), o.delivered_timeline.clone());
    if let Some(every) = sample_every {
        r.timelines.extend(o.sample_timelines(every));
    }
    warnings(o, r);
    // Which client published: direct, or async-nats (TLS, a planned fault,
    // or asked for).
    if let Some(sends) = o.sends.first() {
        r.param("publisher_client", sends.client.name());
    }
}

#[cfg(test)]
mod across_tests {
    use super::*;

    #[test]
    fn one_part_failing_fails_the_whole_and_is_named() {
        let parts = vec![
            ("d-0".to_string(), Invariant::equal("n", 0, 0)),
            ("d-1".to_string(), Invariant::equal("n", 2, 0)),
            ("d-2".to_string(), Invariant::not_applicable("n", "no ids")),
        ];
        let i = across(&parts, "durables").unwrap();
        assert!(!i.passed && i.applicable);
        assert_eq!(i.detail, "failed for 1 of 2 durables; d-1: 2 (expected 0)");
        let held = across(&parts[..1], "durables").unwrap();
        assert!(held.passed);
        assert_eq!(held.detail, "held for all 1 durables; d-0: 0 (expected 0)");
        let none = across(&parts[2..], "durables").unwrap();
        assert!(!none.applicable);
        assert!(across(&[], "durables").is_none());
        let client = vec![("d".to_string(), Invariant::equal("n", 1, 1).client_side())];
        assert!(across(&client, "durables").unwrap().client_side);
    }
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
