//! What a variant (or a group's setup) creates on the server, created
//! through one [`Scope`] and deleted by it when the variant ends, whatever
//! happened: a kind provisions, drives and records through its scope and
//! never deletes anything itself. The paced drive of one stream and one
//! durable most kinds run, with its hooks, lives here too.

use std::time::Duration;

use anyhow::{Context, Result};

use super::checks::{self, StreamCount};
use super::{ScenarioPlan, idempotence, shape};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, FaultPlan, RunContext, drive};
use crate::profile::{ConsumerPlan, PublishPlan};
use crate::streams::advisory::{Advisories, AdvisoryWatch};
use crate::streams::readback::{self, ReadBack};
use crate::variant::VariantResult;

/// How long the advisories of the last exhausted messages may follow the
/// drive: they come after their final deadline.
const ADVISORY_TAIL: Duration = Duration::from_millis(500);

/// How long a read-back waits for the next message before calling the
/// stream read.
const READ_IDLE: Duration = Duration::from_secs(5);

/// The names of a variant's stream, its subjects and its durable.
pub struct VariantNames {
    pub stream: String,
    /// Subjects are `<base>.<n>`.
    pub base: String,
    pub durable: String,
}

/// Whether the handlers' work is counted (was any of it applied twice?),
/// and whether they share a dedup store that makes it idempotent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Work {
    #[default]
    Uncounted,
    Counted,
    Idempotent,
}

/// What a durable variant's drive left for its measure and verify.
pub struct Driven {
    pub outcome: DriveOutcome,
    /// Messages the stream held after the drive, or why its info could
    /// not be read.
    pub stored: StreamCount,
    /// What the durable's advisories said; empty unless watched.
    pub advisories: Advisories,
    /// The stream read back, when asked.
    pub read: Option<ReadBack>,
}

/// What a variant (or a group's setup) creates on the server, deleted when
/// it ends whatever happened; the run's own and its names with it.
pub struct Scope<'a> {
    pub ctx: &'a RunContext,
    pub scenario: &'a ScenarioPlan,
    label: String,
    /// Streams created here (key-value buckets' included), in order.
    created: Vec<String>,
    /// Streams whose placement is in the result already.
    placed: Vec<String>,
    /// Streams created on another server's JetStream (a leafnode's),
    /// through its own context.
    elsewhere: Vec<(async_nats::jetstream::Context, String)>,
    /// Streams deleted even under `--keep` ([`Scope::stream_never_kept`]).
    never_kept: Vec<NeverKept>,
}

impl<'a> Scope<'a> {
    pub fn new(ctx: &'a RunContext, scenario: &'a ScenarioPlan, label: impl Into<String>) -> Self {
        Scope {
            ctx,
            scenario,
            label: label.into(),
            created: Vec::new(),
            placed: Vec::new(),
            elsewhere: Vec::new(),
            never_kept: Vec::new(),
        }
    }

    /// The variant's (or setup's) name.
    pub fn label(&self) -> String {
        self.label.clone()
    }

    /// The run-scoped names of the variant's stream, subjects and durable.
    pub fn names(&self) -> VariantNames {
        let (scenario, names) = (self.scenario.name(), &self.ctx.names);
        VariantNames {
            stream: names.stream(scenario, &self.label),
            base: names.subject(scenario, &self.label),
            durable: names.durable(scenario, &self.label),
        }
    }

    /// What the drive's progress bar and live counters call the variant.
    pub fn drive_label(&self) -> String {
        format!("{} {}", self.scenario.name(), self.label)
    }

    /// The variant's Nats-Msg-Id prefix: unique to the run.
    pub fn msg_id_prefix(&self) -> String {
        format!(
            "{}-{}-{}",
            self.ctx.names.token(),
            self.scenario.name(),
            self.label
        )
    }

    /// Creates a stream, deleted when the scope ends.
    pub async fn stream(
        &mut self,
        config: async_nats::jetstream::stream::Config,
    ) -> Result<async_nats::jetstream::stream::Stream> {
        let name = config.name.clone();
        let stream = self.ctx.provisioner.create_stream(config).await?;
        self.created.push(name);
        Ok(stream)
    }

    /// The variant's stream as the run and `[scenario.stream]` configure it,
    /// its subjects `<base>.>`-free: `<base>` itself, as every paced kind
    /// publishes to `<base>.0`.
    pub fn stream_config(&self) -> async_nats::jetstream::stream::Config {
        let n = self.names();
        crate::streams::provision::stream_config(
            &n.stream,
            &n.base,
            &self.ctx.server,
            &self.ctx.stream,
        )
    }

    /// Creates streams `at_once` at a time (a fan-out's hundred), each
    /// deleted when the scope ends; the first refusal, once all answered.
    pub async fn streams(
        &mut self,
        configs: Vec<async_nats::jetstream::stream::Config>,
        at_once: usize,
    ) -> Result<Vec<async_nats::jetstream::stream::Stream>> {
        use futures::StreamExt;
        let provisioner = &self.ctx.provisioner;
        let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
        let created: Vec<Result<_>> = futures::stream::iter(configs)
            .map(|config| provisioner.create_stream(config))
            .buffered(at_once)
            .collect()
            .await;
        for (name, made) in names.into_iter().zip(&created) {
            if made.is_ok() {
                self.created.push(name);
            }
        }
        created.into_iter().collect()
    }

    /// Creates a durable on one of the scope's streams (or the group's).
    pub async fn durable(
        &self,
        stream: &async_nats::jetstream::stream::Stream,
        config: async_nats::jetstream::consumer::Config,
        pedantic: bool,
    ) -> Result<()> {
        self.ctx
            .provisioner
            .create_consumer(stream, config, pedantic)
            .await
    }

    /// The topology most kinds have: the variant's stream and one durable
    /// reading it as `consumer` says.
    pub async fn stream_and_durable(&mut self, consumer: &ConsumerPlan) -> Result<VariantNames> {
        let names = self.names();
        let stream = self.stream(self.stream_config()).await?;
        let config =
            crate::streams::provision::durable_config(&names.durable, consumer, &names.base);
        self.durable(&stream, config, consumer.pedantic).await?;
        Ok(names)
    }

    /// A key-value bucket named for the variant and `suffix` (its stream
    /// `KV_<bucket>` deleted when the scope ends).
    pub async fn kv(&mut self, suffix: &str) -> Result<String> {
        let bucket = self
            .ctx
            .names
            .stream(self.scenario.name(), &format!("{}-{suffix}", self.label));
        self.ctx.provisioner.create_kv(&bucket).await?;
        self.created.push(format!("KV_{bucket}"));
        Ok(bucket)
    }

    /// How many messages `stream` holds now, its placement added to the
    /// result; the lookup's error when the server does not answer, which
    /// every check built on it must report as a failure naming it, never
    /// as "not applicable". A stream not placed here is placed (or warned
    /// of) when the scope closes.
    pub async fn stored(&mut self, r: &mut VariantResult, stream: &str) -> StreamCount {
        let info = self.ctx.provisioner.stream_info(stream).await;
        if let Ok(info) = &info
            && !self.placed.iter().any(|p| p == stream)
        {
            self.placed.push(stream.to_string());
            r.streams.push(crate::streams::provision::placement(info));
        }
        info.map(|i| i.state.messages).map_err(|e| format!("{e:#}"))
    }

    /// Records where `stream` was placed, or warns that its info could not
    /// be read.
    pub async fn place(&mut self, r: &mut VariantResult, stream: &str) {
        if let Err(e) = self.stored(r, stream).await {
            r.warnings.push(format!("{stream} was not placed: {e}"));
        }
    }

    /// Creates a stream on another server's JetStream (a leafnode's, its
    /// copy of a hub's stream), deleted when the scope ends like the rest.
    pub async fn stream_on(
        &mut self,
        on: &crate::streams::provision::Provisioner,
        config: async_nats::jetstream::stream::Config,
    ) -> Result<async_nats::jetstream::stream::Stream> {
        let name = config.name.clone();
        let stream = on.create_stream(config).await?;
        self.elsewhere.push((on.jetstream().clone(), name));
        Ok(stream)
    }

    /// Runs a load: in this process, or split with the run's workers.
    pub async fn drive(&self, spec: &DriveSpec) -> Result<DriveOutcome> {
        drive(self.ctx, spec).await
    }

    /// Records the placement of every stream created here not yet
    /// recorded (key-value buckets aside), then deletes them all, in
    /// reverse order; the first deletion's error.
    pub(super) async fn close(self, r: &mut VariantResult) -> Result<()> {
        let mut first_error = None;
        // Copies first: they read from the streams below.
        for (js, name) in self.elsewhere.iter().rev() {
            if self.ctx.provisioner.keeps() {
                break;
            }
            if let Err(e) = js.delete_stream(name).await
                && first_error.is_none()
            {
                first_error =
                    Some(anyhow::Error::new(e).context(format!("deleting stream {name}")));
            }
        }
        for name in self.created.iter().rev() {
            if !name.starts_with("KV_") && !self.placed.contains(name) {
                match self.ctx.provisioner.stream_info(name).await {
                    Ok(info) => r.streams.push(crate::streams::provision::placement(&info)),
                    Err(e) => r.warnings.push(format!("{name} was not placed: {e:#}")),
                }
            }
            if let Err(e) = self.delete(name, r).await
                && first_error.is_none()
            {
                first_error = Some(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The paced drive of the variant's stream and one durable: what it asks
/// of its life besides the load.
pub struct Paced<'p> {
    /// Total msg/s.
    pub rate: u64,
    pub publish: &'p PublishPlan,
    /// The durable's clients (its name is the scope's to fill in), whose
    /// plan provisions it.
    pub reader: ConsumerSpec,
    /// Watch the durable's MAX_DELIVERIES, MSG_TERMINATED and MSG_NAKED
    /// advisories from before the drive until after it.
    pub advisories: bool,
    /// Read the stream back after a drive that completed.
    pub read_back: bool,
    pub work: Work,
    /// A server killed, or its routes cut, mid-run.
    pub fault: Option<FaultPlan>,
}

impl<'p> Paced<'p> {
    /// `rate` msg/s of `publish` read by `reader`: no hook, no fault.
    pub fn new(rate: u64, publish: &'p PublishPlan, reader: ConsumerSpec) -> Self {
        Paced {
            rate,
            publish,
            reader,
            advisories: false,
            read_back: false,
            work: Work::Uncounted,
            fault: None,
        }
    }
}

impl Scope<'_> {
    /// The paced load most kinds drive: the variant's stream and durable
    /// provisioned (and the hooks `d` asks for started), the drive, the
    /// stream recorded, then `judge` (the kind's measure and verify) and
    /// what every such variant reports after it: the per-step figures of a
    /// step shape, the drive's records, the work's effects.
    pub async fn drive_durable<T>(
        &mut self,
        r: &mut VariantResult,
        d: Paced<'_>,
        judge: impl FnOnce(&Driven, &mut VariantResult) -> T,
    ) -> Result<T> {
        // Provision.
        let names = self.stream_and_durable(&d.reader.plan).await?;
        let client = self.ctx.provisioner.jetstream().client();
        let watch = match d.advisories {
            true => Some(AdvisoryWatch::start(&client, &names.stream, &names.durable).await?),
            false => None,
        };
        let mut reader = d.reader;
        reader.durable = names.durable.clone();
        if d.work == Work::Idempotent {
            // A dedup store every client shares, as a database outside the
            // client's process would be.
            reader.dedup = Some(self.kv("dedup").await?);
        }
        let (bucket, sample_every) = (reader.dedup.clone(), reader.sample_every);

        // Drive.
        let subject = format!("{}.0", names.base);
        let common = &self.scenario.common;
        let mut spec = DriveSpec::paced(
            self.drive_label(),
            &names.stream,
            subject,
            d.publish,
            common,
            d.rate,
            reader,
        );
        (spec.msg_id_prefix, spec.fault) = (self.msg_id_prefix(), d.fault);
        let outcome = self.drive(&spec).await;

        // Record and read back.
        let advisories = match watch {
            Some(w) => w.finish(ADVISORY_TAIL).await,
            None => Advisories::default(),
        };
        let stored = self.stored(r, &names.stream).await;
        let js = self.ctx.provisioner.jetstream();
        let read = match (&outcome, d.read_back) {
            (Ok(_), true) => Some(readback::read_stream(js, &names.stream, READ_IDLE).await),
            _ => None,
        };
        let store = match &bucket {
            Some(b) => Some(self.ctx.provisioner.stream_info(&format!("KV_{b}")).await),
            None => None,
        };
        let driven = Driven {
            outcome: outcome?,
            stored,
            advisories,
            read: read.transpose().context("reading the stream back")?,
        };

        // Measure and verify.
        let judged = judge(&driven, r);
        let o = &driven.outcome;
        shape::per_step(
            &o.e2e_intended,
            (o.t0_ns, o.record_from_ns),
            true,
            &d.publish.arrival,
            r,
        );
        checks::drive_records(o, sample_every, r);
        if d.work != Work::Uncounted {
            let store = store.map(|i| {
                (i.map(|i| (i.state.bytes, i.state.messages))).map_err(|e| format!("{e:#}"))
            });
            idempotence::measure(o, store, r);
        }
        Ok(judged)
    }
}

// What a kind needs of the Scope beyond the above (dlq): a stream that is
// deleted when its scope ends even under `--keep`.

/// A stream deleted even under `--keep`, and what the warning that says
/// so calls it and why.
struct NeverKept {
    name: String,
    what: String,
    why: String,
}

impl Scope<'_> {
    /// Creates a stream deleted when the scope ends even under `--keep`:
    /// one whose subjects every later variant needs for itself (an
    /// account-wide advisory capture), so that kept it would fail them all
    /// (`why`). When `--keep` is overridden the result says so, naming the
    /// stream as `what`.
    pub async fn stream_never_kept(
        &mut self,
        config: async_nats::jetstream::stream::Config,
        what: &str,
        why: &str,
    ) -> Result<async_nats::jetstream::stream::Stream> {
        let name = config.name.clone();
        let stream = self.stream(config).await?;
        self.never_kept.push(NeverKept {
            name,
            what: what.into(),
            why: why.into(),
        });
        Ok(stream)
    }

    /// Deletes one of the scope's streams: with `--keep` only one created
    /// by [`Scope::stream_never_kept`], with a warning in `r`.
    async fn delete(&self, name: &str, r: &mut VariantResult) -> Result<()> {
        let Some(n) = self.never_kept.iter().find(|n| n.name == name) else {
            return self.ctx.provisioner.delete_stream(name).await;
        };
        if self.ctx.provisioner.delete_stream_anyway(name).await? {
            r.warnings.push(format!(
                "--keep: stream {name} ({}) was deleted anyway; {}",
                n.what, n.why
            ));
        }
        Ok(())
    }
}

/// A variant on servers of its own (power's: started for it on mounts of
/// their own, cut, restarted and stopped after it) runs on a context of
/// its own; what it creates there is the scope's to delete all the same.
impl Scope<'_> {
    /// Runs `run` in a scope on `ctx` under this scope's scenario and
    /// label: the streams it creates on `ctx`'s servers are recorded and
    /// deleted there once `run` returns, whatever happened, while those
    /// servers still run. One the servers no longer know (a power cut can
    /// take a whole stream) is gone already and needs no deleting.
    pub async fn on<T>(
        &self,
        ctx: &RunContext,
        r: &mut VariantResult,
        run: impl AsyncFnOnce(&mut Scope<'_>, &mut VariantResult) -> Result<T>,
    ) -> Result<T> {
        let mut scope = Scope::new(ctx, self.scenario, self.label());
        let ran = run(&mut scope, r).await;
        let js = ctx.provisioner.jetstream();
        let mut known = Vec::new();
        for name in std::mem::take(&mut scope.created) {
            let asked = js.get_stream(&name).await;
            if !asked.is_err_and(|e| stream_not_found(&e)) {
                known.push(name);
            }
        }
        scope.created = known;
        let closed = scope.close(r).await;
        let value = ran?;
        closed.context("cleaning up after the variant")?;
        Ok(value)
    }
}

/// Whether asking for a stream found that the server does not have it.
pub(super) fn stream_not_found(e: &async_nats::jetstream::context::GetStreamError) -> bool {
    use async_nats::jetstream::context::GetStreamErrorKind;
    matches!(e.kind(), GetStreamErrorKind::JetStream(j)
        if j.error_code() == async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND)
}
