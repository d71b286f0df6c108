//! `fast_batch = [...]`: fast-ingest batch variants (ADR-50, nats-server
//! 2.14+) beside the windowed and atomic ones of the same run.
//!
//! A fast variant provisions a stream with `allow_batched`, publishes
//! batches of its size with one publisher ([`crate::load::fast_batch`]),
//! its outstanding-ack setting and gap mode, then reads the stream back and
//! holds every acknowledged message to "stored once, in order"
//! ([`crate::streams::fast_batches`]).

use std::time::Duration;

use anyhow::Result;

use super::Plan;
use super::batch::first_three;
use super::fast_keys::FastPlan;
use crate::load::batch::stored_rate;
use crate::load::fast_batch::{FastConfig, FastReport, GapMode, publish_fast};
use crate::profile::{MsgId, Rate};
use crate::record::clock;
use crate::record::names;
use crate::scenario::Scope;
use crate::scenario::checks::{self, StreamCount};
use crate::streams::fast_batches::{FastAudit, audit, read_stamps};
use crate::variant::{Invariant, VariantResult};

/// One variant's settings: rate, msg_id mode, batch size, acks
/// outstanding, flow asked for, gap mode.
#[derive(Debug, Clone, Copy)]
pub struct FastVariant {
    pub rate: Rate,
    pub msg_id: MsgId,
    pub size: u64,
    pub outstanding: u16,
    pub flow: u16,
    pub gap: GapMode,
}

impl FastVariant {
    pub fn name(&self, rate_label: &str, id_label: &str) -> String {
        format!(
            "rate-{rate_label}.id-{id_label}.fast-{}.acks-{}.flow-{}.gap-{}",
            self.size,
            self.outstanding,
            self.flow,
            self.gap.label()
        )
    }
}

/// Every variant `plan` asks for at `rate` and `msg_id`, sizes outermost.
pub fn variants(plan: &FastPlan, rate: Rate, msg_id: MsgId) -> Vec<FastVariant> {
    let mut all = Vec::with_capacity(plan.variants());
    for &size in &plan.sizes {
        for &outstanding in &plan.outstanding {
            for &flow in &plan.flows {
                for &gap in &plan.gaps {
                    all.push(FastVariant {
                        rate,
                        msg_id,
                        size,
                        outstanding,
                        flow,
                        gap,
                    });
                }
            }
        }
    }
    all
}

pub async fn run_variant(
    s: &mut Scope<'_>,
    plan: &Plan,
    v: FastVariant,
    r: &mut VariantResult,
) -> Result<()> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    let mut config = super::stream_config(s, plan.publish.duplicate_window);
    config.allow_batch_publish = true;
    let (stream_name, base) = (config.name.clone(), s.names().base);
    s.stream(config).await?;
    let client = ctx.connect.connect("fast batch publisher").await?;
    let t0 = clock::now_ns() + ctx.lead_in.as_nanos() as u64;
    let record_from = t0 + common.warmup.as_nanos() as u64;
    let fast = FastConfig {
        subject: format!("{base}.0"),
        size: v.size,
        flow: v.flow,
        outstanding: v.outstanding,
        gap: v.gap,
        rate: super::total_rate(plan, v.rate),
        t0_ns: t0,
        record_from_ns: record_from,
        end_ns: record_from + common.duration.as_nanos() as u64,
        message_size: plan.publish.message_size.max(),
        msg_id_prefix: (v.msg_id == MsgId::Unique).then(|| format!("{}-", s.label())),
        ack_timeout: plan.publish.pub_ack_timeout,
    };
    describe(plan, &fast, v, r);
    // The server's CPU from the end of the warm-up, as the client's runs
    // from the first message intended after it: both to the last PubAck.
    let server_cpu = ctx.server_cpu.clone();
    let meter = tokio::spawn(async move {
        tokio::time::sleep_until(clock::instant_at(record_from).into()).await;
        server_cpu.start()
    });
    let report = publish_fast(&client, &fast, &ctx.stop).await;
    let server_used = if meter.is_finished() {
        meter.await.ok().and_then(|m| m.stop())
    } else {
        meter.abort();
        None
    };
    let stored = s.stored(r, &stream_name).await;
    let js = ctx.provisioner.jetstream();
    let read = match &report {
        Ok(_) => Some(read_stamps(js, &stream_name, Duration::from_secs(5)).await),
        Err(_) => None,
    };
    let report = report?;
    measure(&report, &fast, server_used, r);
    let audited = read.map(|read| {
        read.map(|(messages, complete)| {
            (
                audit(&report.batches, report.messages_sent, &messages, complete),
                complete,
            )
        })
    });
    verify(&report, &stored, audited, r);
    Ok(())
}

fn describe(plan: &Plan, c: &FastConfig, v: FastVariant, r: &mut VariantResult) {
    super::describe_batches(plan, "fast-ingest batch", (v.rate, v.msg_id), r);
    r.param("batch", c.size);
    r.param("acks_outstanding", c.outstanding);
    r.param("flow_asked", c.flow);
    r.param("gap", c.gap.label());
    let from = if c.rate.is_some() {
        "intended"
    } else {
        "actual"
    };
    r.param(
        "fast_ack_timed",
        format!(
            "from the {from} send of the message a flow ack or the commit's PubAck names to the ack's arrival"
        ),
    );
    r.param(
        "batch_commit_timed",
        format!("from the batch's first message's {from} send to the commit's PubAck"),
    );
}

fn measure(
    report: &FastReport,
    c: &FastConfig,
    server_cpu: Option<Duration>,
    r: &mut VariantResult,
) {
    let rate = stored_rate(
        report.measured_messages,
        report.last_measured_ack_ns,
        c.record_from_ns,
        c.end_ns,
    );
    super::publish_rate(r, c.rate, rate, rate * c.message_size as f64);
    let mut recorders = vec![
        (names::FAST_ACK_LATENCY, &report.ack_latency),
        (names::BATCH_COMMIT_LATENCY, &report.commit_latency),
    ];
    if c.rate.is_some() {
        recorders.push((names::SEND_LAG, &report.send_lag));
    }
    for (name, latency) in recorders {
        r.latency_kept(name, latency);
    }
    // Per message sent after the warm-up: the whole jsbench process from
    // the first such message to the last PubAck, the server from the end
    // of the warm-up to the same instant.
    if let Some((cpu, messages)) = report.client_cpu
        && messages > 0
    {
        super::cpu_per_msg(cpu, server_cpu, messages, r);
    }
    let committed = report.batches.iter().filter(|b| b.commit.is_some());
    let acked: u64 = report
        .batches
        .iter()
        .map(|b| b.acked_through.min(b.sent))
        .sum();
    // The server's flow (acks every N messages): first granted, lowest,
    // highest.
    for (name, value) in [
        ("fast_batches_committed", committed.count() as u64),
        ("fast_messages_acked", acked),
        ("fast_flow_acks", report.flow_acks),
        ("fast_flow_first", u64::from(report.flow_first)),
        ("fast_flow_min", u64::from(report.flow_min)),
        ("fast_flow_max", u64::from(report.flow_max)),
        ("fast_waits", report.waits),
        ("fast_pings", report.pings),
        ("fast_gaps", report.gaps),
        ("fast_errors", report.errors),
    ] {
        r.count(name, value);
    }
    r.ledger.published = report.messages_sent;
    r.ledger.persisted = acked;
    r.ledger.publish_errors = report.failed().count() as u64;
    if report.interrupted {
        r.warnings.push(crate::scenario::checks::INTERRUPTED.into());
    }
    if let Some(why) = &report.stopped {
        r.warnings.push(format!("sending stopped: {why}"));
    }
    for stray in report.strays.iter().take(3) {
        r.warnings.push(format!("unplaced answer: {stray}"));
    }
}

pub const COMMITTED: &str = "every fast batch committed";
pub const ONCE_IN_ORDER: &str = "every acknowledged message stored once, in order (read back)";
pub const NOTHING_FOREIGN: &str = "nothing stored that was not sent (read back)";
pub const NO_GAPS: &str = "every message sent reached the server (no gap or error reported)";

fn verify(
    report: &FastReport,
    stored: &StreamCount,
    audited: Option<Result<(FastAudit, bool)>>,
    r: &mut VariantResult,
) {
    r.invariants.push(committed(report));
    r.invariants.push(no_gaps(report));
    let Some((a, complete)) = super::audited(audited, [ONCE_IN_ORDER, NOTHING_FOREIGN], r) else {
        return;
    };
    r.ledger.lost = a.lost_after_ack.len() as u64;
    let stalled = super::stalled(complete);
    let breaches: Vec<String> = [
        &a.lost_after_ack,
        &a.twice,
        &a.out_of_order,
        &a.commit_mismatch,
    ]
    .into_iter()
    .flatten()
    .cloned()
    .collect();
    let mut gaps = if a.in_reported_gaps > 0 {
        format!(
            "; {} acknowledged inside gaps the server reported (gap ok)",
            a.in_reported_gaps
        )
    } else {
        String::new()
    };
    if let Some(through) = a.read_through {
        gaps += &format!(
            "; {} acknowledged messages sent after message {through}, where jsbench's read-back \
             stopped, not read back (neither found nor lost)",
            a.unread
        );
    }
    r.invariants.push(Invariant::check(
        ONCE_IN_ORDER,
        a.held() && complete,
        format!(
            "{} of {} acknowledged messages stored once, in order (stream holds {}); \
             {} lost after their ack, {} stored twice, {} out of order, {} PubAcks misplaced{gaps}{stalled}{}",
            a.acked_stored,
            a.acked,
            checks::shown(stored),
            a.lost_after_ack.len(),
            a.twice.len(),
            a.out_of_order.len(),
            a.commit_mismatch.len(),
            first_three(&breaches)
        ),
    ));
    r.invariants.push(Invariant::check(
        NOTHING_FOREIGN,
        a.foreign.is_empty(),
        format!(
            "{} stored messages were never sent{}",
            a.foreign.len(),
            first_three(&a.foreign)
        ),
    ));
}

/// Every batch got a PubAck naming it; a refusal is named by its code.
fn committed(report: &FastReport) -> Invariant {
    let failed: Vec<_> = report.failed().collect();
    Invariant::check(
        COMMITTED,
        failed.is_empty() && !report.batches.is_empty(),
        match failed.first() {
            None if report.batches.is_empty() => "no batch was sent".to_string(),
            None => format!("{} batches sent, all committed", report.batches.len()),
            Some(b) => format!(
                "{} of {} batches have no PubAck; the first, batch {}: {}",
                failed.len(),
                report.batches.len(),
                b.batch,
                b.failure.as_ref().map_or("no PubAck", |f| f.1.as_str())
            ),
        },
    )
}

/// A gap is a message the client sent and the server never received: lost
/// between them, whatever the gap mode lets the batch do next.
fn no_gaps(report: &FastReport) -> Invariant {
    let missing: u64 = report
        .batches
        .iter()
        .flat_map(|b| &b.gaps)
        .map(|&(from, to)| to.saturating_sub(from))
        .sum();
    let first_error = report
        .batches
        .iter()
        .find_map(|b| b.errors.first().map(|e| (b.batch, *e)));
    Invariant::check(
        NO_GAPS,
        report.gaps == 0 && report.errors == 0,
        format!(
            "{} gaps reported ({missing} messages sent by the client, never received by the server), \
             {} messages refused{}",
            report.gaps,
            report.errors,
            first_error.map_or(String::new(), |(b, (seq, code))| format!(
                "; the first, batch {b} message {seq}, with {code}"
            ))
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::fast_batches::{FastBatchOutcome, StoredStamp};

    /// Two batches of 2, committed at sequences 2 and 4.
    fn report() -> FastReport {
        let batch = |batch: u64, last_seq: u64| FastBatchOutcome {
            batch,
            first_message: batch * 2,
            sent: 2,
            acked_through: 2,
            commit: Some((last_seq, 2)),
            ..Default::default()
        };
        FastReport {
            batches: vec![batch(0, 2), batch(1, 4)],
            messages_sent: 4,
            ..Default::default()
        }
    }

    fn clean() -> Vec<StoredStamp> {
        (0..4)
            .map(|n| StoredStamp {
                seq: n + 1,
                message: Some(n),
            })
            .collect()
    }

    fn verdicts(report: &FastReport, stored: &[StoredStamp]) -> Vec<(String, bool, String)> {
        verdicts_read(report, stored, true)
    }

    fn verdicts_read(
        report: &FastReport,
        stored: &[StoredStamp],
        complete: bool,
    ) -> Vec<(String, bool, String)> {
        let audited = audit(&report.batches, report.messages_sent, stored, complete);
        let mut r = VariantResult::new("v");
        verify(
            report,
            &Ok(stored.len() as u64),
            Some(Ok((audited, complete))),
            &mut r,
        );
        r.invariants
            .iter()
            .map(|i| (i.name.clone(), i.passed, i.detail.clone()))
            .collect()
    }

    fn verdict<'a>(all: &'a [(String, bool, String)], name: &str) -> &'a (String, bool, String) {
        all.iter().find(|v| v.0 == name).unwrap()
    }

    #[test]
    fn a_stalled_read_back_fails_the_check_without_blaming_the_server() {
        // Read through message 1 of 4: 2 and 3 are unread, not lost.
        let all = verdicts_read(&report(), &clean()[..2], false);
        let v = verdict(&all, ONCE_IN_ORDER);
        assert!(!v.1, "{v:?}");
        assert!(
            v.2.contains("0 lost after their ack")
                && v.2.contains("2 acknowledged messages sent after message 1")
                && v.2.contains("stalled"),
            "{v:?}"
        );
    }

    #[test]
    fn a_clean_run_holds_every_invariant() {
        let all = verdicts(&report(), &clean());
        assert!(all.iter().all(|v| v.1), "{all:?}");
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn a_refused_batch_fails_committed_with_its_code() {
        let mut report = report();
        report.batches[1].commit = None;
        report.batches[1].failure = Some((
            Some(10211),
            "refused with 10211: batch publish too many inflight".into(),
        ));
        let all = verdicts(&report, &clean());
        let v = verdict(&all, COMMITTED);
        assert!(
            !v.1 && v.2.contains("batch 1") && v.2.contains("10211"),
            "{v:?}"
        );
    }

    #[test]
    fn an_acknowledged_message_missing_from_the_read_back_fails_and_names_the_server() {
        let mut stored = clean();
        stored.remove(0);
        let all = verdicts(&report(), &stored);
        let v = verdict(&all, ONCE_IN_ORDER);
        assert!(
            !v.1 && v.2.contains("1 lost after their ack") && v.2.contains("server"),
            "{v:?}"
        );
    }

    #[test]
    fn a_message_stored_twice_or_out_of_order_fails_once_in_order() {
        let mut twice = clean();
        twice.push(StoredStamp {
            seq: 5,
            message: Some(3),
        });
        let all = verdicts(&report(), &twice);
        assert!(!verdict(&all, ONCE_IN_ORDER).1);
        let mut swapped = clean();
        swapped.swap(0, 1);
        swapped[0].seq = 1;
        swapped[1].seq = 2;
        let all = verdicts(&report(), &swapped);
        let v = verdict(&all, ONCE_IN_ORDER);
        assert!(!v.1 && v.2.contains("1 out of order"), "{v:?}");
    }

    #[test]
    fn a_stored_message_never_sent_fails_nothing_foreign() {
        let mut stored = clean();
        stored.push(StoredStamp {
            seq: 5,
            message: None,
        });
        let all = verdicts(&report(), &stored);
        let v = verdict(&all, NOTHING_FOREIGN);
        assert!(!v.1 && v.2.contains("sequence 5"), "{v:?}");
    }

    #[test]
    fn a_reported_gap_fails_no_gaps_naming_the_client_and_server() {
        let mut report = report();
        report.gaps = 1;
        report.batches[1].gaps = vec![(2, 3)];
        let all = verdicts(&report, &clean());
        let v = verdict(&all, NO_GAPS);
        assert!(
            !v.1 && v
                .2
                .contains("1 messages sent by the client, never received by the server"),
            "{v:?}"
        );
    }

    #[test]
    fn an_unreadable_stream_fails_the_read_back_checks() {
        let mut r = VariantResult::new("v");
        verify(
            &report(),
            &Err("stream gone".into()),
            Some(Err(anyhow::anyhow!("stream gone"))),
            &mut r,
        );
        let failed: Vec<_> = r
            .invariants
            .iter()
            .filter(|i| !i.passed)
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(failed, vec![ONCE_IN_ORDER, NOTHING_FOREIGN]);
    }
}
