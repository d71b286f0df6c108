//! `dlq`: the dead-letter queue of the delivery article, under load. A stream takes a
//! fixed rate; its consumer follows a behaviour plan in which a fraction of
//! messages are poison (they fail every delivery and run out of
//! MaxDeliver); the [`crate::dlq`] pipeline captures the MAX_DELIVERIES
//! advisories and its handler copies each poison message into the DLQ
//! stream. One variant per retention of the source stream: limits (the
//! original stays), work queue (the handler deletes it once the copy is
//! persisted), interest (a second consumer acks everything; the original
//! stays for the one that gave up on it); and first, optionally, the same
//! load without poison, for the effect on healthy messages.
//!
//! Measures the time from a poison message's final delivery to its copy's
//! PubAck, and its parts: to the advisory's arrival at the handler, and the
//! handler's own work; the handler's throughput; and healthy messages'
//! end-to-end latency against the baseline. Checks, by reading the DLQ
//! stream back, that every poison message is there exactly once with its
//! original payload and headers (publish control dropped) and nothing else
//! is; that originals are deleted or kept as the retention says; that a
//! handler killed after a copy and before its ack still leaves one copy;
//! and that nothing is lost.

mod measure;
mod other;
pub mod plan;
mod readback;
mod redriven;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use async_nats::jetstream::stream;

use super::table::{self, Cell, ChartSpec, Column, Figures, Show, format_us};
use super::{Field, Kind, Scope, VariantNames, Variants};
use crate::consume::fates::Analysis;
use crate::dlq::{Pipeline, PipelineSpec, Watched};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec};
use crate::profile::{
    BehaviourPlan, Capture, CommonPlan, ConsumerPlan, OriginalGet, Retention, ServerPlan,
    StreamSettings, format_duration,
};
use crate::record::metrics::{Direction, ratio};
use crate::record::names;
use crate::streams::provision::{Need, durable_config, stream_config};
use crate::variant::VariantResult;
use other::Other;

pub use plan::Plan;

// The figures this scenario reports that its table, the charts and
// report.html read, by name.

/// Dead letters due, and those found in the DLQ.
pub const DEAD_LETTERS_EXPECTED: &str = "dead_letters.expected";
pub const DEAD_LETTERS_IN_DLQ: &str = "dead_letters.in_dlq";
/// From the final delivery to the copy's PubAck, a histogram.
pub const DLQ_LATENCY: &str = "dlq_latency";
pub const DLQ_AFTER_DEADLINE: &str = "dlq_after_deadline";
pub const ADVISORY_AFTER_DEADLINE: &str = "advisory_after_deadline";
pub const HANDLER_LATENCY: &str = "handler_latency";
pub const HANDLER_CAPACITY: &str = "handler_capacity";
pub const HANDLER_RESTARTS: &str = "handler.restarts";
pub const COPIES_DUPLICATES_FLAGGED: &str = "copies.duplicates_flagged";
/// Healthy messages against the poison-free baseline.
pub const VS_BASELINE_E2E_P50: &str = "vs_baseline.e2e_p50_ratio";
pub const VS_BASELINE_E2E_P99: &str = "vs_baseline.e2e_p99_ratio";

/// How often consumer info is sampled while a variant runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// After a Ctrl-C, how long the copies of what was exhausted may take.
const INTERRUPTED_WAIT: Duration = Duration::from_secs(2);

/// The watched consumer's index in the pipeline: the scenario watches one.
const WATCHED: usize = 0;

/// The registry's row for `dlq`: the advisory-built dead-letter queue.
pub struct Dlq;

impl Kind for Dlq {
    const NAME: &'static str = "dlq";
    const CHARTS: &'static [ChartSpec] = &[ChartSpec::Percentiles {
        stem: DLQ_LATENCY,
        title: "Dead-letter latency by percentile",
        caption: "Per variant (one colour each), time until a poison message's copy is persisted \
                  in the DLQ stream. Solid: from its final delivery, which includes the final ack \
                  deadline the server waits out before it gives up; dashed: from the expiry of \
                  that deadline, the part the advisory and the handler add.",
        families: &[
            (DLQ_LATENCY, "from final delivery", false),
            (DLQ_AFTER_DEADLINE, "from final deadline", true),
        ],
    }];
    const COORDINATOR_SIDE: Option<&'static str> = Some(
        "the dead-letter handler and the DLQ audit run on the coordinator; the load and its consumers are split",
    );
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::ACHIEVED,
        table::quantile("e2e p50", names::E2E_LATENCY, "p50"),
        table::quantile("p99", names::E2E_LATENCY, "p99"),
        Column::new(
            "in DLQ/dead",
            Cell::Counts(&[DEAD_LETTERS_IN_DLQ, DEAD_LETTERS_EXPECTED], "/"),
        ),
        table::quantile("DLQ p50", DLQ_LATENCY, "p50"),
        table::quantile("p99", DLQ_LATENCY, "p99"),
        table::quantile("after deadline p50", DLQ_AFTER_DEADLINE, "p50"),
        table::quantile("p99", DLQ_AFTER_DEADLINE, "p99"),
        Column::metric("handler/s", HANDLER_CAPACITY, Show::Rate),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need {
            // The source, the advisory capture and the DLQ stream; the
            // durable, the handler's and (interest) a second one.
            streams: 3,
            consumers: 3,
            ..Need::of_load(&plan.load, common)
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        (common.duration + common.warmup)
            * (plan.retentions.len() + usize::from(plan.baseline)) as u32
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.load.consumer, |p| &mut p.load.consumer));

    type Group = ();
    type Shared = ();
    type Variant = Variant;
    /// The retention variants' latency is set against the baseline's.
    const COMPARES: bool = true;

    /// The baseline first, when asked, then one variant per retention.
    fn variants(plan: &Plan, _: &()) -> Variants<Variant> {
        // The same load and pipeline, every message acked at once.
        let clean = BehaviourPlan {
            classes: Vec::new(),
            ..plan.load.behaviour.clone()
        };
        let baseline = plan.baseline.then_some(Variant {
            name: BASELINE,
            retention: Retention::Limits,
            behaviour: clean,
            restart_after: None,
        });
        let retentions = plan.retentions.iter().map(|&retention| Variant {
            name: retention.label(),
            retention,
            behaviour: plan.load.behaviour.clone(),
            restart_after: plan.handler.restart_after,
        });
        Variants::List(baseline.into_iter().chain(retentions).collect())
    }

    fn label(_plan: &Plan, v: &Variant) -> String {
        v.name.into()
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        v: &Variant,
    ) -> Result<()> {
        describe(&s.scenario.common, plan, v, r);
        super::checks::server_clock(s.ctx, r);
        run_variant(s, r, plan, v).await
    }

    /// Each retention variant's end-to-end latency as a ratio of the
    /// baseline's (what the pipeline running beside the load costs it),
    /// when the baseline ran through and the variant measured.
    fn compare(_plan: &Plan, _: &(), done: &mut [(Variant, VariantResult)]) {
        // Measured: its drive ran. A latency histogram that recorded
        // nothing reports no percentiles: 0, as its summary says.
        let e2e = |r: &VariantResult| {
            r.value(names::PUBLISH.rate)?;
            let q = |q| r.value(&names::quantile(names::E2E_LATENCY, q));
            Some([q("p50").unwrap_or(0.0), q("p99").unwrap_or(0.0)])
        };
        let baseline = done
            .iter()
            .find(|(v, r)| v.name == BASELINE && r.error.is_none())
            .and_then(|(_, r)| e2e(r));
        let Some(base) = baseline else {
            return;
        };
        for (_, r) in done.iter_mut().filter(|(v, _)| v.name != BASELINE) {
            let Some(mine) = e2e(r) else { continue };
            for (i, name) in [VS_BASELINE_E2E_P50, VS_BASELINE_E2E_P99]
                .into_iter()
                .enumerate()
            {
                r.metrics
                    .push(ratio(name, mine[i], base[i], Direction::Lower));
            }
        }
    }

    /// Where a dead letter's time goes, and healthy messages against the
    /// poison-free baseline.
    fn lines(v: &dyn Figures) -> Vec<String> {
        let mut lines = Vec::new();
        if let (Some(advisory), Some(handler)) = (
            v.value(&names::quantile(ADVISORY_AFTER_DEADLINE, "p50")),
            v.value(&names::quantile(HANDLER_LATENCY, "p50")),
        ) {
            lines.push(format!(
                "dead letters: advisory {} after the final deadline, handler {} to the DLQ PubAck \
                 (p50); handler capacity {}/s, {} restart(s), {} copies flagged duplicate",
                format_us(advisory),
                format_us(handler),
                v.shown(HANDLER_CAPACITY, Show::Rate),
                v.value(HANDLER_RESTARTS).unwrap_or(0.0),
                v.value(COPIES_DUPLICATES_FLAGGED).unwrap_or(0.0)
            ));
        }
        if let (Some(p50), Some(p99)) = (v.value(VS_BASELINE_E2E_P50), v.value(VS_BASELINE_E2E_P99))
        {
            lines.push(format!(
                "healthy messages vs the poison-free baseline: e2e p50 x{p50:.2}, p99 x{p99:.2}"
            ));
        }
        lines
    }
}

/// The poison-free variant the retention variants are set against.
const BASELINE: &str = "baseline";

/// One variant: the source stream's retention and the consumer's
/// behaviour (the baseline's acks everything at once).
pub struct Variant {
    name: &'static str,
    retention: Retention,
    behaviour: BehaviourPlan,
    restart_after: Option<u64>,
}

fn describe(common: &CommonPlan, plan: &Plan, v: &Variant, r: &mut VariantResult) {
    let c = &plan.load.consumer;
    let h = &plan.handler;
    r.param("retention", v.retention);
    super::shape::describe(plan.load.rate, &plan.load.publish.arrival, common, r);
    r.param("warmup", format_duration(common.warmup));
    r.param("publishers", plan.load.publish.publishers);
    r.param("msg_id", plan.load.publish.msg_id);
    r.param("consumers", c.consumers);
    r.param("ack_wait", format_duration(c.ack_wait));
    r.param(
        "backoff",
        c.backoff
            .iter()
            .map(|d| format_duration(*d))
            .collect::<Vec<_>>(),
    );
    r.param("max_deliver", c.max_deliver);
    r.param("classes", &v.behaviour.classes);
    r.param("seed", v.behaviour.seed);
    r.param("capture", plan.capture);
    r.param("terminated", plan.terminated);
    r.param("handler.ack_wait", format_duration(h.ack_wait));
    r.param("handler.retry_delay", format_duration(h.retry_delay));
    r.param("handler.concurrency", h.concurrency);
    r.param("handler.get", h.get);
    r.param("handler.erase", h.erase);
    r.param("handler.restart_after", v.restart_after);
    r.param("handler.origin_headers", &h.origin_headers);
}

/// One variant: provision, drive, read back, redrive, then measure and
/// verify what was read; its streams are the scope's to delete.
async fn run_variant(
    s: &mut Scope<'_>,
    result: &mut VariantResult,
    plan: &Plan,
    v: &Variant,
) -> Result<()> {
    let (set, pipeline) = provision(s, plan, v).await?;
    let (drive, other) = drive_load(s, plan, v.behaviour.clone(), &set).await;
    let evidence = readback::read_back(s, result, plan, &set, &drive, pipeline, other).await;
    let redriven = match plan.redrive {
        true => Some(redriven::redrive(s.ctx, &set.names, &evidence).await),
        false => None,
    };
    // Where the pipeline's streams were placed, after the source's.
    for stream in [&set.spec.advisory_stream, &set.spec.dlq_stream] {
        s.place(result, stream).await;
    }
    let (outcome, analysis) = drive?;
    measure::measure(&outcome, &analysis, &evidence, plan, result);
    super::shape::per_step(
        &outcome.e2e_intended,
        (outcome.t0_ns, outcome.record_from_ns),
        true,
        &plan.load.publish.arrival,
        result,
    );
    verify::verify(&outcome, &analysis, &evidence, v, result);
    if let Some(redriven) = &redriven {
        redriven::redrive_results(redriven, result);
    }
    Ok(())
}

/// What a variant provisioned, by name.
struct Provisioned {
    /// The source stream, its subjects and its durable.
    names: VariantNames,
    /// The interest variant's second durable, which acks everything.
    other: Option<String>,
    /// The pipeline's streams, durable and what it watches.
    spec: PipelineSpec,
}

/// The source stream and its durable, a second durable on an interest
/// stream, and the pipeline (advisory capture, DLQ stream, handler), all
/// created through the scope: a provision that fails halfway leaves
/// nothing behind, above all no account-wide capture that would overlap
/// the next variant's.
async fn provision(s: &mut Scope<'_>, plan: &Plan, v: &Variant) -> Result<(Provisioned, Pipeline)> {
    let names = s.names();
    let settings = StreamSettings {
        retention: Some(v.retention),
        ..s.ctx.stream.clone()
    };
    let config = stream_config(&names.stream, &names.base, &s.ctx.server, &settings);
    let allow_direct = config.allow_direct || plan.handler.get == OriginalGet::Direct;
    let stream = s
        .stream(stream::Config {
            allow_direct,
            ..config
        })
        .await?;
    let c = &plan.load.consumer;
    let durable = durable_config(&names.durable, c, &names.base);
    s.durable(&stream, durable, c.pedantic).await?;
    let other = if v.retention == Retention::Interest {
        let (scenario, variant) = (s.scenario.name(), s.label());
        let name = s.ctx.names.durable(scenario, &format!("{variant}_other"));
        let config = durable_config(&name, &ConsumerPlan::simple(), &names.base);
        s.durable(&stream, config, false).await?;
        Some(name)
    } else {
        None
    };
    let spec = PipelineSpec::named(
        &s.ctx.names,
        s.scenario.name(),
        &s.label(),
        plan.capture,
        plan.terminated,
        vec![Watched {
            stream: names.stream.clone(),
            consumer: names.durable.clone(),
            delete_original: v.retention == Retention::Workqueue,
        }],
        crate::profile::DlqHandlerPlan {
            restart_after: v.restart_after,
            ..plan.handler.clone()
        },
    );
    // The advisory capture and the DLQ live on the storage under test.
    let server = ServerPlan {
        storage: s.ctx.stream.storage.unwrap_or(s.ctx.server.storage),
        ..s.ctx.server
    };
    let capture = spec.advisory_config(&server);
    let advisories = match plan.capture {
        // It holds every MAX_DELIVERIES subject of the account: kept, it
        // would overlap the next variant's and fail it.
        Capture::Account => {
            let what = "the account-wide advisory capture";
            let why = "kept, it would overlap the next variant's capture";
            s.stream_never_kept(capture, what, why).await
        }
        Capture::Stream => s.stream(capture).await,
    };
    let advisories = advisories.map_err(|e| spec.capture_refused(e))?;
    s.stream(spec.dlq_config(&server)).await?;
    s.durable(&advisories, spec.handler_config(), false).await?;
    let pipeline = Pipeline::start(&s.ctx.connect, spec.clone());
    Ok((Provisioned { names, other, spec }, pipeline))
}

/// What the load did: the drive's outcome and the fates of what it read.
type Drive = Result<(DriveOutcome, Analysis)>;

/// The paced load through the variant's durable (and, on an interest
/// stream, the other consumer beside it), and the fates of what it read.
async fn drive_load(
    s: &Scope<'_>,
    plan: &Plan,
    behaviour: BehaviourPlan,
    set: &Provisioned,
) -> (Drive, Option<Result<Other>>) {
    let c = &plan.load.consumer;
    let behaviour = Arc::new(behaviour);
    let mut spec = DriveSpec::paced(
        s.drive_label(),
        &set.names.stream,
        format!("{}.0", set.names.base),
        &plan.load.publish,
        &s.scenario.common,
        plan.load.rate,
        ConsumerSpec {
            // The audit's record of originals that may be gone by then.
            keep_doomed: true,
            ..ConsumerSpec::observed(
                set.names.durable.clone(),
                c.clone(),
                behaviour.clone(),
                SAMPLE_EVERY,
            )
        },
    );
    spec.msg_id_prefix = s.label();
    let other = match &set.other {
        Some(name) => {
            let messages = spec.messages();
            Some(Other::start(s.ctx, &set.names.stream, name.clone(), messages).await)
        }
        None => None,
    };
    let outcome = s.drive(&spec).await.map(|o| {
        let analysis = super::checks::fates(&o, &behaviour, c);
        (o, analysis)
    });
    (outcome, other)
}
