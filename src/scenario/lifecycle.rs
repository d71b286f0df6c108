//! One variant's life, the same for every scenario: described, provisioned,
//! driven, its stream recorded (and read back, its advisories and dedup
//! store finished), its streams deleted, measured and verified. The timer,
//! the error kept beside what was measured, and the clean-up's error live
//! here once; a scenario says only what is its own: its variants, how its
//! durable's clients read, its measure and its verify.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::{ScenarioPlan, checks, idempotence, shape};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, FaultPlan, RunContext, drive};
use crate::profile::{CommonPlan, ConsumerPlan, PublishPlan};
use crate::streams::advisory::{Advisories, AdvisoryWatch};
use crate::streams::readback::{self, ReadBack};
use crate::variant::{VariantResult, VariantSink};

/// How long the advisories of the last exhausted messages may follow the
/// drive: they come after their final deadline.
const ADVISORY_TAIL: Duration = Duration::from_millis(500);

/// How long a read-back waits for the next message before calling the
/// stream read.
const READ_IDLE: Duration = Duration::from_secs(5);

/// One variant: `run` describes it and does the rest; an error is kept in
/// the result beside what was measured, and the time it took is set.
pub async fn variant<T>(
    name: impl Into<String>,
    run: impl AsyncFnOnce(&mut VariantResult) -> Result<T>,
) -> (VariantResult, Option<T>) {
    let started = Instant::now();
    let mut result = VariantResult::new(name);
    let value = match run(&mut result).await {
        Ok(value) => Some(value),
        Err(e) => {
            result.error = Some(format!("{e:#}"));
            None
        }
    };
    result.elapsed = started.elapsed();
    (result, value)
}

/// Runs `variants` in turn until the run is stopped, each recorded as
/// soon as it is done, so a later failure or a Ctrl-C loses none.
pub async fn each<V>(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    sink: &mut dyn VariantSink,
    variants: impl IntoIterator<Item = V>,
    mut run: impl AsyncFnMut(V) -> VariantResult,
) -> Result<()> {
    for v in variants {
        if ctx.stop.is_cancelled() {
            break;
        }
        let result = run(v).await;
        sink.record(&scenario.common, result)?;
    }
    Ok(())
}

/// The names of a variant's stream, its subjects and its durable.
pub struct VariantNames {
    pub stream: String,
    /// Subjects are `<base>.<n>`.
    pub base: String,
    pub durable: String,
}

/// The provision step most scenarios share: the variant's stream (storage
/// and replicas from the server plan) and one pull durable reading it.
pub async fn provision_durable(
    ctx: &RunContext,
    scenario: &str,
    variant: &str,
    consumer: &ConsumerPlan,
) -> Result<VariantNames> {
    let names = VariantNames {
        stream: ctx.names.stream(scenario, variant),
        base: ctx.names.subject(scenario, variant),
        durable: ctx.names.durable(scenario, variant),
    };
    let stream = ctx
        .provisioner
        .create_stream(crate::streams::provision::stream_config(
            &names.stream,
            &names.base,
            &ctx.server,
            &ctx.stream,
        ))
        .await?;
    ctx.provisioner
        .create_consumer(
            &stream,
            crate::streams::provision::durable_config(&names.durable, consumer, &names.base),
            consumer.pedantic,
        )
        .await?;
    Ok(names)
}

/// How many messages a variant's stream holds after its drive, with its
/// placement (leader, replicas) added to the results: asked whatever the
/// drive's fate, so a failed variant still says where it ran. `None` when
/// stream info is unavailable, which the stream-holds check reports.
pub async fn record_stream(ctx: &RunContext, stream: &str, r: &mut VariantResult) -> Option<u64> {
    let info = ctx.provisioner.stream_info(stream).await;
    r.streams
        .extend(info.as_ref().map(crate::streams::provision::placement));
    info.map(|i| i.state.messages)
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

/// A variant that publishes into one stream read by one durable: what it
/// asks of its life besides the load.
pub struct Durable<'a, R> {
    pub common: &'a CommonPlan,
    /// Total msg/s.
    pub rate: u64,
    pub publish: &'a PublishPlan,
    pub consumer: &'a ConsumerPlan,
    /// How the durable's clients read, from the durable's name.
    pub reader: R,
    /// Watch the durable's MAX_DELIVERIES, MSG_TERMINATED and MSG_NAKED
    /// advisories from before the drive until after it.
    pub advisories: bool,
    /// Read the stream back after a drive that completed.
    pub read_back: bool,
    pub work: Work,
    /// A server killed, or its routes cut, mid-run.
    pub fault: Option<FaultPlan>,
}

impl<'a, R: FnOnce(String) -> ConsumerSpec> Durable<'a, R> {
    /// The paced drive of one durable, with no hook and no fault.
    pub fn new(
        common: &'a CommonPlan,
        (rate, publish): (u64, &'a PublishPlan),
        consumer: &'a ConsumerPlan,
        reader: R,
    ) -> Self {
        Durable {
            common,
            rate,
            publish,
            consumer,
            reader,
            advisories: false,
            read_back: false,
            work: Work::Uncounted,
            fault: None,
        }
    }
}

/// What a durable variant's drive left for its measure and verify.
pub struct Driven {
    pub outcome: DriveOutcome,
    /// Messages the stream held after the drive; `None` when stream info
    /// was unavailable.
    pub stored: Option<u64>,
    /// What the durable's advisories said; empty unless watched.
    pub advisories: Advisories,
    /// The stream read back, when asked.
    pub read: Option<ReadBack>,
}

/// A durable variant's life: its stream and durable provisioned (and the
/// hooks it asks for started), the drive, the stream recorded and deleted,
/// then `judge` (the scenario's measure and verify) and what every such
/// variant reports: the per-step figures of a step shape, the drive's
/// records, the work's effects. The drive's error is returned once the
/// streams are gone; a clean-up's error once everything is measured.
pub async fn drive_durable<T, R: FnOnce(String) -> ConsumerSpec>(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    r: &mut VariantResult,
    d: Durable<'_, R>,
    judge: impl FnOnce(&Driven, &mut VariantResult) -> T,
) -> Result<T> {
    // Provision.
    let variant = r.name.clone();
    let names = provision_durable(ctx, scenario.name(), &variant, d.consumer).await?;
    let watch = match d.advisories {
        true => Some(
            AdvisoryWatch::start(
                &ctx.provisioner.jetstream().client(),
                &names.stream,
                &names.durable,
            )
            .await?,
        ),
        false => None,
    };
    let mut reader = (d.reader)(names.durable.clone());
    if d.work == Work::Idempotent {
        // A dedup store every client shares, as a database outside the
        // client's process would be.
        reader.dedup = Some(idempotence::store(ctx, scenario.name(), &variant).await?);
    }
    let bucket = reader.dedup.clone();
    let sample_every = reader.sample_every;

    // Drive.
    let mut spec = DriveSpec::paced(
        format!("{} {variant}", scenario.name()),
        &names.stream,
        format!("{}.0", names.base),
        d.publish,
        d.common,
        d.rate,
        reader,
    );
    spec.msg_id_prefix = format!("{}-{}-{variant}", ctx.names.token(), scenario.name());
    spec.fault = d.fault;
    let outcome = drive(ctx, &spec).await;

    // Record, read back, delete.
    let advisories = match watch {
        Some(w) => w.finish(ADVISORY_TAIL).await,
        None => Advisories::default(),
    };
    let stored = record_stream(ctx, &names.stream, r).await;
    let read = match (&outcome, d.read_back) {
        (Ok(_), true) => {
            Some(readback::read_stream(ctx.provisioner.jetstream(), &names.stream, READ_IDLE).await)
        }
        _ => None,
    };
    let deleted = ctx.provisioner.delete_stream(&names.stream).await;
    let (store, dropped) = idempotence::finish(ctx, bucket.as_deref()).await;
    let deleted = deleted.and(dropped);
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
        idempotence::measure(o, store, r);
    }
    deleted.context("cleaning up after the variant")?;
    Ok(judged)
}
