//! What scenarios that drive a durable report and check alike: planned
//! against observed fates (redelivery, dlq), nothing lost, every publish
//! persisted, the stream holding it, the server showing nothing pending,
//! and the records of the drive itself.

use std::time::Duration;

use crate::consume::fates::Analysis;
use crate::drive::DriveOutcome;
use crate::profile::{BehaviourPlan, ConsumerPlan};
use crate::record::ledger::LedgerCounts;
use crate::record::metrics::{Direction, rate_and_throughput};
use crate::record::names;
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
/// a redelivery held early beyond the tolerance the drive's own
/// first-delivery reads measure.
pub fn fates(o: &DriveOutcome, behaviour: &BehaviourPlan, consumer: &ConsumerPlan) -> Analysis {
    crate::consume::fates::analyse(
        &o.events,
        &o.ledger,
        behaviour,
        consumer,
        Duration::from_nanos(crate::record::clock::resolution_ns()),
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
/// analysis used with the read delays it was measured from.
pub fn fate_metrics(a: &Analysis, r: &mut VariantResult) {
    early_tolerance(a, r);
    r.count(PLANNED_ACKED, a.planned.acked);
    r.count(OBSERVED_ACKED, a.observed.acked);
    r.count(PLANNED_TERMED, a.planned.termed);
    r.count(OBSERVED_TERMED, a.observed.termed);
    r.count(PLANNED_EXHAUSTED, a.planned.exhausted);
    r.count(OBSERVED_EXHAUSTED, a.observed.exhausted);
}

/// The early tolerance a fates analysis used, in words (the
/// `early_tolerance` param) and as figures: `early_tolerance` and the
/// first-delivery read delays it was measured from, `first_read_delay.*`.
pub fn early_tolerance(a: &Analysis, r: &mut VariantResult) {
    r.param("early_tolerance", a.tolerance.describe());
    r.metrics.extend(a.tolerance_metrics());
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
            first_refusal(o)
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
/// server's losses; the clients' are `nothing_dropped`'s). Never seen
/// messages nothing could attribute fail it too, named as such: that
/// nothing was lost cannot be shown, nor that the server lost them.
pub fn nothing_lost(o: &DriveOutcome) -> Invariant {
    let c = &o.counts;
    let mut detail = if c.lost == 0 {
        format!("0 of {} persisted messages undelivered", c.persisted)
    } else {
        format!(
            "{} of {} persisted messages never delivered (first sequences: {:?})",
            c.lost,
            c.persisted,
            o.ledger.lost_sequences(10)
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

/// A stream's message count as its info gave it, or the lookup's error
/// (its whole chain): every check built on it fails with that error,
/// never reads as "not applicable" nor counts it as a number.
pub type StreamCount = Result<u64, String>;

/// The stream's message count (from stream info) equals what PubAcks
/// confirmed, less what its own limits evicted: nothing stored behind
/// jsbench's back, nothing missing.
pub fn stream_holds(stored: &StreamCount, c: &LedgerCounts) -> Invariant {
    const NAME: &str = STREAM_HOLDS;
    match *stored {
        Err(ref e) => Invariant::check(NAME, false, unread(e)),
        Ok(n) if c.evicted > 0 || c.removed_by_ack > 0 => Invariant::check(
            NAME,
            n + c.evicted + c.removed_by_ack == c.persisted,
            format!(
                "holds {n}; {} persisted, {} evicted by the stream's limits, {} removed on ack by its retention",
                c.persisted, c.evicted, c.removed_by_ack
            ),
        ),
        Ok(n) => Invariant::equal(NAME, n, c.persisted),
    }
}

/// A failed check's detail when the stream's count could not be read.
pub fn unread(error: &str) -> String {
    format!("the stream's count could not be read: {error}")
}

/// The stream's count equals `expected`; a count that could not be read
/// fails the check.
pub fn count_is(name: &str, stored: &StreamCount, expected: u64) -> Invariant {
    match stored {
        Ok(n) => Invariant::equal(name, *n, expected),
        Err(e) => Invariant::check(name, false, format!("{} ({expected} expected)", unread(e))),
    }
}

/// A count for a check's detail: the number, or why there is none.
pub fn shown(stored: &StreamCount) -> String {
    match stored {
        Ok(n) => n.to_string(),
        Err(e) => format!("(unknown: {e})"),
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
        first_refusal(o)
    ));
}

/// The first publish the stream refused at its limits, as the server
/// worded the refusal.
fn first_refusal(o: &DriveOutcome) -> &str {
    let mut refusals = o.acks.iter().filter_map(|a| a.first_refusal.as_deref());
    refusals.next().unwrap_or("?")
}

/// No persisted message was missed by the clients: delivered by the
/// server and never seen, or held for a client that had stopped asking.
/// The load generator's failure, not the server's: it fails the variant
/// with its cause, apart from `lost = 0`.
pub fn nothing_dropped(o: &DriveOutcome) -> Invariant {
    let dropped = o.counts.client_dropped;
    Invariant::check(
        "no message dropped by the client",
        dropped == 0,
        match o.client_drop_cause.as_deref() {
            Some(cause) if dropped > 0 => format!("{dropped} dropped: {cause}"),
            _ => format!("{dropped} dropped"),
        },
    )
    .client_side()
}

/// What a paced drive's publishers did: their rate and throughput, and
/// their [`pub_acks`].
pub fn publishing(o: &DriveOutcome, r: &mut VariantResult) {
    r.metrics.extend(rate_and_throughput(
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

/// The publishers' rate, beside a kind's own figures: shown, not judged.
pub fn publish_rate(o: &DriveOutcome, r: &mut VariantResult) {
    let rate = o.publish_rate();
    r.metric(names::PUBLISH.rate, "msg/s", rate, Direction::None);
}

/// From the last publish to the end of the drain: how long the consumers
/// took to finish.
pub fn completion_time(o: &DriveOutcome, r: &mut VariantResult) {
    let ms = o.drain_time.as_secs_f64() * 1e3;
    r.metric("completion_time", "ms", ms, Direction::Lower);
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

/// The ledger, the per-second and sampled timelines, the drive's warnings,
/// the server's figures, and whether every publisher finished.
pub fn drive_records(o: &DriveOutcome, sample_every: Option<Duration>, r: &mut VariantResult) {
    server_figures(o, r);
    super::client_cost::client_figures(o, r);
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
mod held_tests {
    use super::*;

    /// A stream count that could not be read checks nothing: each check
    /// built on it fails naming the lookup's error, and a detail that
    /// shows the count says why there is none.
    #[test]
    fn a_failed_stream_lookup_fails_the_count_checks_with_its_error() {
        let lookup: StreamCount = Err("reading stream JSB_P's info: timed out".into());
        let c = LedgerCounts {
            persisted: 5,
            ..Default::default()
        };
        for check in [stream_holds(&lookup, &c), count_is("count", &lookup, 5)] {
            assert!(check.applicable && !check.passed, "{check:?}");
            assert!(
                check.detail.contains("JSB_P's info: timed out"),
                "{check:?}"
            );
        }
        assert!(shown(&lookup).contains("JSB_P's info: timed out"));
        assert!(stream_holds(&Ok(5), &c).passed && count_is("count", &Ok(5), 5).passed);
        assert_eq!(shown(&Ok(5)), "5");
    }
}
