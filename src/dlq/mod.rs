//! The dead-letter queue NATS does not ship, built as the delivery article builds it:
//! MaxDeliver bounds redelivery, the server's MAX_DELIVERIES advisory (and,
//! as an option, MSG_TERMINATED) is captured in a stream, and a handler
//! reads each captured advisory, gets the original by stream sequence and
//! republishes it into a DLQ stream. A reusable pipeline: any scenario
//! names the consumers whose exhausted messages it wants dead-lettered.
//!
//! # Names on a shared cluster
//!
//! Everything is run-scoped. The advisory stream and the DLQ stream are
//! `JSB_<token>_<scenario>_<variant>-ADVISORIES` and `...-DLQ`; copies go to
//! `jsb.<token>.<scenario>.<variant>.dlq.<stream>.<consumer>`, the delivery article's
//! `dlq.<stream>.<consumer>` under the run's own subject prefix, so neither
//! another run nor a team's own `dlq.>` stream ever captures jsbench's dead
//! letters (or the other way round). The one subject jsbench cannot scope
//! is the advisory's: with `capture = "account"` (the delivery article's
//! `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>`) the capture stream
//! collects every advisory in the account, the handler acks and counts the
//! ones about streams it does not watch and never touches those streams;
//! a second capture of that subject in the account (someone's real DLQ)
//! makes the server refuse jsbench's, and `capture = "stream"` captures
//! only the watched consumers' advisories instead.
//!
//! - [`copy`]: what a dead-letter copy holds, and which headers it drops.
//! - [`handler`]: the handler, a durable consumer of the advisory stream.
//! - [`audit`]: the DLQ stream read back and checked against the originals.
//! - [`redrive`]: the dead letters sent back onto their original subjects.

pub mod audit;
pub mod copy;
pub mod handler;
pub mod redrive;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use async_nats::jetstream::{self, consumer, stream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::connect::ConnectSettings;
use crate::profile::{Capture, DlqHandlerPlan, ServerPlan};
use crate::streams::advisory::Kind;
use crate::streams::provision::Names;
pub use handler::{Attempt, HandlerReport, Outcome};

/// A consumer whose exhausted messages the pipeline dead-letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub stream: String,
    pub consumer: String,
    /// Delete the original once its copy is persisted: a work-queue stream
    /// keeps a MaxDeliver'd message until something deletes it.
    pub delete_original: bool,
}

/// Which message a pipeline result is about: (index into the watched
/// list, stream sequence).
pub type Key = (usize, u64);

/// Everything a pipeline is made of.
#[derive(Debug, Clone)]
pub struct PipelineSpec {
    pub advisory_stream: String,
    pub dlq_stream: String,
    /// The DLQ stream captures `<prefix>.>`; copies go to
    /// `<prefix>.<stream>.<consumer>`.
    pub dlq_prefix: String,
    pub handler_durable: String,
    pub capture: Capture,
    /// Dead-letter termed messages too (MSG_TERMINATED advisories).
    pub terminated: bool,
    pub watched: Vec<Watched>,
    pub handler: DlqHandlerPlan,
}

impl PipelineSpec {
    /// Run-scoped names for one variant of a scenario.
    pub fn named(
        names: &Names,
        scenario: &str,
        variant: &str,
        capture: Capture,
        terminated: bool,
        watched: Vec<Watched>,
        handler: DlqHandlerPlan,
    ) -> Self {
        PipelineSpec {
            advisory_stream: names.stream(scenario, &format!("{variant}-advisories")),
            dlq_stream: names.stream(scenario, &format!("{variant}-dlq")),
            dlq_prefix: format!("{}.dlq", names.subject(scenario, variant)),
            handler_durable: names.durable(scenario, &format!("{variant}_dlq_handler")),
            capture,
            terminated,
            watched,
            handler,
        }
    }

    /// What the advisory stream captures.
    pub fn advisory_subjects(&self) -> Vec<String> {
        let terminated = self.terminated.then_some(Kind::Terminated);
        let mut subjects = Vec::new();
        for kind in [Kind::MaxDeliveries].into_iter().chain(terminated) {
            let kind = kind.event();
            match self.capture {
                Capture::Account => subjects.push(format!("$JS.EVENT.ADVISORY.CONSUMER.{kind}.>")),
                Capture::Stream => subjects.extend(self.watched.iter().map(|w| {
                    format!(
                        "$JS.EVENT.ADVISORY.CONSUMER.{kind}.{}.{}",
                        w.stream, w.consumer
                    )
                })),
            }
        }
        subjects
    }

    /// The advisory capture's stream, on `server`'s storage and replicas.
    pub fn advisory_config(&self, server: &ServerPlan) -> stream::Config {
        stream::Config {
            name: self.advisory_stream.clone(),
            subjects: self.advisory_subjects(),
            storage: crate::streams::provision::storage_type(server.storage),
            num_replicas: server.replicas,
            ..Default::default()
        }
    }

    /// Why the advisory stream was refused, with a hint when another
    /// capture of the account's advisories is in the way.
    pub fn capture_refused(&self, e: anyhow::Error) -> anyhow::Error {
        let hint = if self.capture == Capture::Account && format!("{e:#}").contains("overlap") {
            "; another stream in the account already captures MAX_DELIVERIES advisories \
             (a DLQ of someone else's, or another jsbench run): set capture = \"stream\""
        } else {
            ""
        };
        anyhow!("{e:#}{hint}")
    }

    /// The DLQ stream, on `server`'s storage and replicas.
    pub fn dlq_config(&self, server: &ServerPlan) -> stream::Config {
        stream::Config {
            name: self.dlq_stream.clone(),
            subjects: vec![format!("{}.>", self.dlq_prefix)],
            storage: crate::streams::provision::storage_type(server.storage),
            num_replicas: server.replicas,
            // Longer than any advisory's redelivery: a copy republished
            // by a restarted handler must still be recognised.
            duplicate_window: Duration::from_secs(120).max(self.handler.ack_wait * 10),
            ..Default::default()
        }
    }

    /// The handler's durable on the advisory stream.
    pub fn handler_config(&self) -> consumer::Config {
        consumer::Config {
            durable_name: Some(self.handler_durable.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: self.handler.ack_wait,
            max_ack_pending: 10_000,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        }
    }
}

#[cfg(test)]
impl PipelineSpec {
    /// A spec of fixed names (DLQ prefix `p.dlq`, default origin headers)
    /// for the unit tests of the handler and the audit.
    pub(crate) fn for_tests(watched: Vec<Watched>, terminated: bool) -> Self {
        PipelineSpec {
            advisory_stream: "ADV".into(),
            dlq_stream: "DLQ".into(),
            dlq_prefix: "p.dlq".into(),
            handler_durable: "handler".into(),
            capture: Capture::Stream,
            terminated,
            watched,
            handler: DlqHandlerPlan {
                ack_wait: Duration::from_secs(1),
                retry_delay: Duration::from_millis(100),
                concurrency: 1,
                get: crate::profile::OriginalGet::Raw,
                erase: false,
                restart_after: None,
                origin_headers: Default::default(),
                start_after: Duration::ZERO,
            },
        }
    }
}

/// A running pipeline: its streams exist and the handler reads advisories.
pub struct Pipeline {
    pub spec: PipelineSpec,
    shared: Arc<handler::Shared>,
    stop: CancellationToken,
    task: JoinHandle<(Vec<HandlerReport>, Vec<String>)>,
}

/// What a pipeline did, across every incarnation of its handler.
#[derive(Debug)]
pub struct PipelineReport {
    /// What it was made of.
    pub spec: PipelineSpec,
    pub incarnations: Vec<HandlerReport>,
    /// Incarnations that could not start or failed.
    pub errors: Vec<String>,
    /// The handler durable at the end: (num_pending, num_ack_pending).
    pub handler_state: Option<(u64, usize)>,
}

/// One dead-lettered message's story across its advisory's deliveries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Story {
    /// First receipt of its advisory by a handler.
    pub advisory_ns: u64,
    /// When the server gave up on it: its advisory's own time stamp.
    pub gave_up_ns: Option<u64>,
    /// First PubAck of its copy.
    pub persisted_ns: Option<u64>,
    /// Copies published (a redelivered advisory publishes again).
    pub published: u64,
    /// Of those, flagged duplicate by the DLQ stream.
    pub duplicates: u64,
    /// Advisory deliveries the handler received for it.
    pub deliveries: u64,
    /// Whether its advisory was acked after the copy persisted.
    pub done: bool,
}

impl Pipeline {
    /// Starts the handler on its own connection, once the advisory stream
    /// ([`PipelineSpec::advisory_config`]), the DLQ stream
    /// ([`PipelineSpec::dlq_config`]) and the handler durable
    /// ([`PipelineSpec::handler_config`]) exist: the caller creates them,
    /// and deletes them whatever happens. Call before any load: advisories
    /// are transient.
    pub fn start(connect: &ConnectSettings, spec: PipelineSpec) -> Pipeline {
        let shared = Arc::new(handler::Shared::new(spec.clone()));
        let stop = CancellationToken::new();
        let task = tokio::spawn(supervise(connect.clone(), shared.clone(), stop.clone()));
        Pipeline {
            spec,
            shared,
            stop,
            task,
        }
    }

    /// Waits until every message in `expected` is dead-lettered and the
    /// handler durable has nothing left (foreign advisories included), or
    /// until `deadline`; then stops the handler.
    pub async fn finish(
        self,
        js: &jetstream::Context,
        expected: &BTreeSet<Key>,
        deadline: Instant,
    ) -> PipelineReport {
        let state = loop {
            let all_done = expected.iter().all(|k| self.shared.is_done(k));
            if all_done {
                let state = handler_state(js, &self.spec).await;
                if state.is_some_and(|(pending, ack_pending)| pending == 0 && ack_pending == 0) {
                    break state;
                }
            }
            if Instant::now() >= deadline || self.task.is_finished() {
                break handler_state(js, &self.spec).await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.stop.cancel();
        let (incarnations, mut errors) = match self.task.await {
            Ok(result) => result,
            Err(e) => (Vec::new(), vec![format!("the handler task failed: {e}")]),
        };
        for r in &incarnations {
            if let Some(e) = &r.first_error {
                errors.push(format!("handler {}: {e}", r.incarnation));
            }
        }
        PipelineReport {
            spec: self.spec,
            incarnations,
            errors,
            handler_state: state,
        }
    }
}

async fn handler_state(js: &jetstream::Context, spec: &PipelineSpec) -> Option<(u64, usize)> {
    let stream = js.get_stream(&spec.advisory_stream).await.ok()?;
    let consumer: consumer::PullConsumer = stream.get_consumer(&spec.handler_durable).await.ok()?;
    let info = consumer.get_info().await.ok()?;
    Some((info.num_pending, info.num_ack_pending))
}

/// Runs the handler, and a new one (on a new connection) each time one is
/// killed as planned, until `stop`.
async fn supervise(
    connect: ConnectSettings,
    shared: Arc<handler::Shared>,
    stop: CancellationToken,
) -> (Vec<HandlerReport>, Vec<String>) {
    let prefix = connect.js_api.prefix();
    let mut reports = Vec::new();
    let mut errors = Vec::new();
    // A handler that starts late (a backlog, a deploy): the advisories wait
    // in their stream, the originals in theirs, unless its limits evict them.
    tokio::select! {
        _ = stop.cancelled() => return (reports, errors),
        _ = tokio::time::sleep(shared.spec.handler.start_after) => {}
    }
    for incarnation in 0u32.. {
        let client = match connect.connect(&format!("dlq-handler-{incarnation}")).await {
            Ok(c) => c,
            Err(e) => {
                errors.push(format!("handler {incarnation}: {e:#}"));
                break;
            }
        };
        match handler::run(client, &prefix, &shared, incarnation, stop.clone())
            .await
            .with_context(|| format!("handler {incarnation}"))
        {
            Ok(report) => {
                let killed = report.killed;
                reports.push(report);
                if !killed || stop.is_cancelled() {
                    break;
                }
            }
            Err(e) => {
                errors.push(format!("{e:#}"));
                break;
            }
        }
    }
    (reports, errors)
}

impl PipelineReport {
    pub fn attempts(&self) -> impl Iterator<Item = &Attempt> {
        self.incarnations.iter().flat_map(|r| r.attempts.iter())
    }

    /// Incarnations after the first.
    pub fn restarts(&self) -> usize {
        self.incarnations.len().saturating_sub(1)
    }

    /// Time with at least one advisory in hand, summed over incarnations.
    pub fn busy(&self) -> Duration {
        self.incarnations.iter().map(|r| r.busy).sum()
    }

    /// Attempts whose outcome satisfies `f`.
    pub fn count(&self, f: impl Fn(&Outcome) -> bool) -> u64 {
        self.attempts().filter(|a| f(&a.outcome)).count() as u64
    }

    /// Each watched message's story, by key.
    pub fn stories(&self) -> BTreeMap<Key, Story> {
        let mut out: BTreeMap<Key, Story> = BTreeMap::new();
        for a in self.attempts() {
            let Some(w) = a.watched else { continue };
            let s = out.entry((w, a.seq)).or_default();
            if s.deliveries == 0 || a.received_ns < s.advisory_ns {
                s.advisory_ns = a.received_ns;
            }
            s.gave_up_ns = s.gave_up_ns.or(a.server_ns);
            s.deliveries += 1;
            if let Some(p) = a.persisted_ns {
                s.published += 1;
                s.persisted_ns = Some(s.persisted_ns.map_or(p, |q| q.min(p)));
            }
            match a.outcome {
                Outcome::Copied { duplicate, .. } => {
                    s.duplicates += u64::from(duplicate);
                    s.done |= a.answer_error.is_none();
                }
                Outcome::Killed { duplicate } => s.duplicates += u64::from(duplicate),
                _ => {}
            }
        }
        out
    }
}
