//! What a variant reads back after the load, before its streams go: the
//! pipeline's work, the DLQ stream, the originals, the other consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::Result;
use async_nats::jetstream::message::StreamMessage;

use super::other::{Other, OtherEnd};
use super::{Driven, INTERRUPTED_WAIT, Plan, Provisioned, WATCHED};
use crate::dlq::audit;
use crate::dlq::{Key, Outcome, Pipeline, PipelineReport, Watched};
use crate::profile::OriginHeaders;
use crate::scenario::Scope;
use crate::variant::VariantResult;

/// Everything read back after the load, before the streams go.
pub(super) struct Evidence {
    pub pipeline: PipelineReport,
    pub contents: Result<audit::DlqContents>,
    /// The expected originals as the source holds them now.
    pub now: Result<BTreeMap<u64, Option<StreamMessage>>>,
    /// Messages in the source stream at the end.
    pub stored: Option<u64>,
    pub other: Option<OtherEnd>,
    pub watched: Vec<Watched>,
    pub dlq_prefix: String,
    /// What the copies name their origin headers.
    pub origin_headers: OriginHeaders,
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
    driven: &Driven,
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
    let keys: BTreeSet<Key> = driven.expected.keys().copied().collect();
    let pipeline = pipeline.finish(js, &keys, deadline).await;
    // Originals the handler found gone have no copy to expect: the delivery article
    // warns that a stream limit may evict them first.
    let gone: BTreeSet<u64> = pipeline
        .attempts()
        .filter(|a| a.watched == Some(WATCHED) && matches!(a.outcome, Outcome::OriginalGone))
        .map(|a| a.seq)
        .collect();
    let other = match (other, &driven.outcome) {
        (Some(Ok(o)), Ok((out, _))) => Some(o.finish(out.counts.persisted, deadline).await),
        (Some(Ok(o)), Err(_)) => Some(o.finish(0, Instant::now()).await),
        (Some(Err(e)), _) => Some(Err(format!("{e:#}"))),
        (None, _) => None,
    };
    let source = &set.names.stream;
    Evidence {
        contents: audit::read(js, &set.spec.dlq_stream, Duration::from_secs(2)).await,
        now: audit::originals(js, source, driven.expected.keys().map(|k| k.1)).await,
        stored: s.stored(r, source).await,
        pipeline,
        other,
        watched: set.spec.watched.clone(),
        dlq_prefix: set.spec.dlq_prefix.clone(),
        origin_headers: plan.handler.origin_headers.clone(),
        gone,
    }
}
