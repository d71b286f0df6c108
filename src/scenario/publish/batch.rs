//! `batch = [...]`: atomic batch variants (ADR-50) beside the windowed ones
//! of the same run, so the two ways of publishing are compared on one
//! server, one after the other.
//!
//! A batch variant provisions a stream with `allow_atomic`, publishes
//! batches of its size with one publisher ([`crate::load::batch`]), reads
//! the stream back and audits every batch against its commit's PubAck
//! ([`crate::streams::batches`]): a committed batch stored whole,
//! contiguous and once, nothing stored from a refused one.

use std::time::Duration;

use anyhow::Result;

use super::Plan;
use crate::load::batch::{BatchConfig, BatchReport, publish_batches, stored_rate};
use crate::profile::{MsgId, Rate};
use crate::record::clock;
use crate::record::names;
use crate::scenario::Scope;
use crate::scenario::checks::{self, StreamCount};
use crate::streams::batches::{BatchAudit, audit, read_batches};
use crate::variant::{Invariant, VariantResult};

/// Committed batches, with the messages they hold, and batches refused or
/// left unanswered.
pub const BATCHES_COMMITTED: &str = "batches_committed";
pub const BATCH_MESSAGES_COMMITTED: &str = "batch_messages_committed";
pub const BATCHES_FAILED: &str = "batches_failed";

/// Commits outstanding at once: below the server's 50 atomic batches in
/// flight per stream, with room for a straggler.
const COMMIT_WINDOW: usize = 32;

/// One variant: batches of `size` at `rate` with `msg_id`.
pub async fn run_variant(
    s: &mut Scope<'_>,
    plan: &Plan,
    (rate, msg_id, size): (Rate, MsgId, usize),
    r: &mut VariantResult,
) -> Result<()> {
    let (ctx, common) = (s.ctx, &s.scenario.common);
    describe(plan, (rate, msg_id, size), r);
    let mut config = super::stream_config(s, plan.publish.duplicate_window);
    config.allow_atomic_publish = true;
    let (stream_name, base) = (config.name.clone(), s.names().base);
    s.stream(config).await?;
    let client = ctx.connect.connect("batch publisher").await?;
    let t0 = clock::now_ns() + ctx.lead_in.as_nanos() as u64;
    let record_from = t0 + common.warmup.as_nanos() as u64;
    let batches = BatchConfig {
        subject: format!("{base}.0"),
        size,
        rate: super::total_rate(plan, rate),
        t0_ns: t0,
        record_from_ns: record_from,
        end_ns: record_from + common.duration.as_nanos() as u64,
        message_size: plan.publish.message_size.max(),
        msg_id,
        window: COMMIT_WINDOW,
        ack_timeout: plan.publish.pub_ack_timeout,
    };
    let report = publish_batches(&client, &batches, &ctx.stop).await;
    let stored = s.stored(r, &stream_name).await;
    let js = ctx.provisioner.jetstream();
    let read = match &report {
        Ok(_) => Some(read_batches(js, &stream_name, Duration::from_secs(5)).await),
        Err(_) => None,
    };
    let report = report?;
    measure(&report, &batches, r);
    let audited = read.map(|read| {
        read.map(|(messages, complete)| {
            let audited = audit(
                size as u64,
                &report.committed,
                &report.unanswered(),
                &messages,
                complete,
            );
            (audited, complete)
        })
    });
    verify(&report, &stored, audited, r);
    Ok(())
}

fn describe(plan: &Plan, (rate, msg_id, size): (Rate, MsgId, usize), r: &mut VariantResult) {
    super::describe_batches(plan, "atomic batch", (rate, msg_id), r);
    r.param("batch", size);
    r.param("commit_window", COMMIT_WINDOW);
    r.param(
        "batch_commit_timed",
        if rate == Rate::Max {
            "from the first message's send, once a commit slot was free, to the commit's \
             PubAck, read when the sender next polls"
        } else {
            "from the first message's intended send (a wait for a commit slot past it \
             charged) to the commit's PubAck"
        },
    );
}

fn measure(report: &BatchReport, config: &BatchConfig, r: &mut VariantResult) {
    let rate = stored_rate(
        report.measured_messages,
        report.last_measured_ack_ns,
        config.record_from_ns,
        config.end_ns,
    );
    let throughput = rate * config.message_size as f64;
    super::publish_rate(r, config.rate, rate, throughput);
    r.latency_kept(names::BATCH_COMMIT_LATENCY, &report.commit_latency);
    r.count(BATCHES_COMMITTED, report.committed.len() as u64);
    r.count(
        BATCH_MESSAGES_COMMITTED,
        report.committed.iter().map(|c| c.count).sum(),
    );
    r.count(BATCHES_FAILED, report.failed.len() as u64);
    r.ledger.published = report.messages_sent;
    r.ledger.persisted = report.committed.iter().map(|c| c.count).sum();
    r.ledger.publish_errors = report.failed.len() as u64;
    if report.interrupted {
        r.warnings.push(crate::scenario::checks::INTERRUPTED.into());
    }
    for f in report.failed.iter().take(5) {
        r.warnings.push(format!("batch {}: {}", f.batch, f.detail));
    }
}

fn verify(
    report: &BatchReport,
    stored: &StreamCount,
    audited: Option<Result<(BatchAudit, bool)>>,
    r: &mut VariantResult,
) {
    let committed: u64 = report.committed.iter().map(|c| c.count).sum();
    r.invariants.push(Invariant::check(
        "every batch committed",
        report.failed.is_empty(),
        match report.failed.first() {
            None => format!("{} batches sent, all committed", report.batches_sent),
            Some(f) => format!(
                "{} of {} batches failed; the first, batch {}: {}",
                report.failed.len(),
                report.batches_sent,
                f.batch,
                f.detail
            ),
        },
    ));
    let Some((audited, complete)) = super::audited(audited, [WHOLE, NOTHING_FAILED], r) else {
        return;
    };
    r.ledger.lost = audited.lost;
    let mut stalled = super::stalled(complete).to_string();
    if let Some(through) = audited.read_through {
        stalled += &format!(
            " at sequence {through}: {} committed batches past it not read back (neither found nor lost)",
            audited.unread
        );
    }
    r.invariants.push(Invariant::check(
        WHOLE,
        audited.broken.is_empty() && complete,
        format!(
            "{} of {} committed batches whole ({committed} messages; stream holds {}){stalled}{}",
            audited.whole,
            report.committed.len(),
            checks::shown(stored),
            first_three(&audited.broken)
        ),
    ));
    r.invariants.push(Invariant::check(
        NOTHING_FAILED,
        audited.leaked.is_empty(),
        format!(
            "{} refused or uncommitted batches left messages{}{}",
            audited.leaked.len(),
            if audited.unanswered_stored > 0 {
                format!(
                    "; {} messages of unanswered commits stored",
                    audited.unanswered_stored
                )
            } else {
                String::new()
            },
            first_three(&audited.leaked)
        ),
    ));
}

const WHOLE: &str = "every committed batch stored whole, contiguous and once (read back)";
const NOTHING_FAILED: &str = "nothing stored from a failed batch (read back)";

/// The first three breaches of a check, for its evidence: atomic and fast
/// batch variants both list theirs this way.
pub(super) fn first_three(list: &[String]) -> String {
    if list.is_empty() {
        return String::new();
    }
    format!(
        ": {}",
        list.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::batch::FailedBatch;
    use crate::streams::batches::{CommittedBatch, StoredBatchMessage};

    /// Two committed batches of 2 and the stream read back as `stored`.
    fn verdicts(
        failed: Vec<FailedBatch>,
        stored: &[StoredBatchMessage],
    ) -> Vec<(String, bool, String)> {
        let committed = vec![
            CommittedBatch {
                batch: 0,
                last_seq: 2,
                count: 2,
            },
            CommittedBatch {
                batch: 1,
                last_seq: 4,
                count: 2,
            },
        ];
        let report = BatchReport {
            batches_sent: 2 + failed.len() as u64,
            committed,
            failed,
            ..Default::default()
        };
        let audited = audit(2, &report.committed, &report.unanswered(), stored, true);
        let mut r = VariantResult::new("v");
        verify(&report, &Ok(4), Some(Ok((audited, true))), &mut r);
        r.invariants
            .iter()
            .map(|i| (i.name.clone(), i.passed, i.detail.clone()))
            .collect()
    }

    fn message(seq: u64, batch: u64, index: u64) -> StoredBatchMessage {
        StoredBatchMessage {
            seq,
            batch: Some(batch),
            index: Some(index),
        }
    }

    fn clean() -> Vec<StoredBatchMessage> {
        vec![
            message(1, 0, 1),
            message(2, 0, 2),
            message(3, 1, 1),
            message(4, 1, 2),
        ]
    }

    fn verdict<'a>(all: &'a [(String, bool, String)], name: &str) -> &'a (String, bool, String) {
        all.iter().find(|v| v.0 == name).unwrap()
    }

    #[test]
    fn a_clean_run_passes_every_check() {
        let all = verdicts(Vec::new(), &clean());
        assert!(all.iter().all(|v| v.1), "{all:?}");
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn a_refused_batch_fails_every_batch_committed_with_its_code() {
        let refused = FailedBatch {
            batch: 2,
            code: Some(10071),
            detail: "refused with 10071: wrong last sequence".into(),
        };
        let all = verdicts(vec![refused], &clean());
        let v = verdict(&all, "every batch committed");
        assert!(
            !v.1 && v.2.contains("batch 2") && v.2.contains("10071"),
            "{v:?}"
        );
    }

    #[test]
    fn a_committed_batch_missing_a_message_fails_whole_and_names_it() {
        let mut stored = clean();
        stored.remove(3);
        let all = verdicts(Vec::new(), &stored);
        let v = verdict(&all, WHOLE);
        assert!(!v.1 && v.2.contains("batch 1 "), "{v:?}");
    }

    #[test]
    fn a_message_of_a_refused_batch_in_the_stream_fails_nothing_stored() {
        let refused = FailedBatch {
            batch: 2,
            code: Some(10199),
            detail: String::new(),
        };
        let mut stored = clean();
        stored.push(message(5, 2, 1));
        let all = verdicts(vec![refused], &stored);
        let v = verdict(&all, NOTHING_FAILED);
        assert!(!v.1 && v.2.contains("batch 2 was not committed"), "{v:?}");
    }
}
