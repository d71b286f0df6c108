//! What a variant reads back after the load, before its streams go: the
//! pipeline's work, the DLQ stream, the originals, the other consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::jetstream::message::StreamMessage;

use super::other::{Other, OtherEnd};
use super::{Drive, INTERRUPTED_WAIT, Plan, Provisioned, WATCHED};
use crate::dlq::audit;
use crate::dlq::{Key, Outcome, Pipeline, PipelineReport};
use crate::scenario::Scope;
use crate::scenario::checks::StreamCount;
use crate::streams::advisory::Kind;
use crate::variant::VariantResult;

/// Everything read back after the load, before the streams go.
pub(super) struct Evidence {
    /// A copy is due for every dead letter whose original the handler got:
    /// the messages the fates say must reach the DLQ, by their advisory,
    /// but those in `gone`.
    pub expected: BTreeMap<Key, Kind>,
    /// The pipeline's work, and its spec.
    pub pipeline: PipelineReport,
    pub contents: Result<audit::DlqContents>,
    /// The expected originals as the source holds them now, or why they
    /// could not be read.
    pub now: Result<BTreeMap<u64, Option<StreamMessage>>, String>,
    /// Messages in the source stream at the end, or why its info could
    /// not be read.
    pub stored: StreamCount,
    pub other: Option<OtherEnd>,
    /// Sequences whose original the handler found gone.
    pub gone: BTreeSet<u64>,
}

/// Waits for the pipeline to copy what the fates expect (or the drain
/// timeout; after a Ctrl-C, a short wait) and for the other consumer to
/// ack what was persisted, then reads the DLQ and the originals.
pub(super) async fn read_back(
    s: &mut Scope<'_>,
    r: &mut VariantResult,
    plan: &Plan,
    set: &Provisioned,
    drive: &Drive,
    pipeline: Pipeline,
    other: Option<Result<Other>>,
) -> Evidence {
    let js = s.ctx.provisioner.jetstream();
    let deadline = Instant::now()
        + if s.ctx.stop.is_cancelled() {
            INTERRUPTED_WAIT
        } else {
            s.scenario.common.drain_timeout
        };
    // Every message the fates say must reach the DLQ, by its advisory.
    let due: BTreeMap<Key, Kind> = match drive {
        Ok((_, a)) => {
            let termed = a.termed.iter().filter(|_| plan.terminated);
            (a.exhausted.iter().map(|&seq| (seq, Kind::MaxDeliveries)))
                .chain(termed.map(|&seq| (seq, Kind::Terminated)))
                .map(|(seq, kind)| ((WATCHED, seq), kind))
                .collect()
        }
        Err(_) => BTreeMap::new(),
    };
    let keys: BTreeSet<Key> = due.keys().copied().collect();
    let pipeline = pipeline.finish(js, &keys, deadline).await;
    // Originals the handler found gone have no copy to expect: the delivery article
    // warns that a stream limit may evict them first.
    let gone: BTreeSet<u64> = pipeline
        .attempts()
        .filter(|a| a.watched == Some(WATCHED) && matches!(a.outcome, Outcome::OriginalGone(_)))
        .map(|a| a.seq)
        .collect();
    let other = match (other, drive) {
        (Some(Ok(o)), Ok((out, _))) => Some(o.finish(out.counts.persisted, deadline).await),
        (Some(Ok(o)), Err(_)) => Some(o.finish(0, Instant::now()).await),
        (Some(Err(e)), _) => Some(Err(format!("{e:#}"))),
        (None, _) => None,
    };
    let source = &set.names.stream;
    let contents = audit::read(js, &set.spec.dlq_stream, Duration::from_secs(2)).await;
    let now = audit::originals(js, source, due.keys().map(|k| k.1)).await;
    Evidence {
        expected: (due.into_iter())
            .filter(|(k, _)| !gone.contains(&k.1))
            .collect(),
        contents,
        now: now.map_err(|err| format!("{err:#}")),
        stored: s.stored(r, source).await,
        pipeline,
        other,
        gone,
    }
}
