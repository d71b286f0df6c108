//! `filtered`: what a subject filter costs a consumer. Users reported
//! consume rates falling to about 1% with a filter (nats-server issues
//! 7014 and 7852); this sweeps the filter's shape against the stream's
//! subject cardinality and max-per-subject. Each point fills a stream
//! once, nobody reading (so the consume is measured alone), then a fresh
//! durable per filter shape reads what its filter selects. Each shape's
//! rate is set against the unfiltered read of the same stream, and the
//! server's CPU is divided by the deliveries it made.
//!
//! jsbench computes the set each filter selects itself
//! ([`crate::streams::filter`]), so a consumer that skips a matching
//! message, delivers one twice or delivers one outside its filter fails
//! the variant.

pub mod plan;
mod verify;

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::jetstream::stream;

use super::lifecycle::variant;
use super::table::{self, Cell, Column, Show};
use super::{ScenarioKind, ScenarioPlan, checks};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec, RunContext, drive};
use crate::profile::{CommonPlan, ConsumerPlan, Problems, Section};
use crate::record::ledger::{Event, LedgerShard};
use crate::record::metrics::{Direction, Metric, rate_and_throughput};
use crate::record::names;
use crate::streams::filter::{self, Layout, Sequences};
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD, durable_config, stream_config};
use crate::variant::{Invariant, VariantResult, VariantSink};

pub use plan::{Plan, Shape};
pub use verify::{DELIVERED_ONCE, NOTHING_OUTSIDE, STREAM_KEPT};

/// The figures this scenario reports that its table and `[ab]` judges
/// read, by name.
/// A shape's consume rate over the unfiltered read of the same stream.
pub const VS_NONE_RATE: &str = "vs_none.rate_ratio";
/// The share of the stored messages the filter selects.
pub const MATCHED_SHARE: &str = "matched_share";

/// The least server CPU a read's per-delivery figure is reported from:
/// /proc counts a process's CPU in ticks of 10 ms, so under ten of them a
/// figure would be off by more than a tenth (a read of three messages
/// showed 0 µs or 3,333 µs).
const MIN_SERVER_CPU: Duration = Duration::from_millis(100);

/// How many stored sequences a fill's layout is checked at against the
/// server's own record of their subjects.
const LAYOUT_PROBES: u64 = 16;

/// The registry's row for `filtered`: filter shapes against subject
/// cardinality.
pub struct Filtered;

impl ScenarioKind for Filtered {
    const NAME: &'static str = "filtered";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column {
            header: "subjects",
            cell: Cell::Param("subjects"),
        },
        Column {
            header: "max/subject",
            cell: Cell::Param("max_per_subject"),
        },
        Column {
            header: "matched",
            cell: Cell::Metric(MATCHED_SHARE, Show::Percent),
        },
        Column {
            header: "consumed/s",
            cell: Cell::Metric(names::CONSUME.rate, Show::Rate),
        },
        Column {
            header: "vs none",
            cell: Cell::Metric(VS_NONE_RATE, Show::Times(2)),
        },
        Column {
            header: "server µs/msg",
            cell: Cell::Metric(names::SERVER_CPU_PER_MSG, Show::MicrosPerMsg),
        },
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
        plan::read(section, problems)
    }

    fn run<'a>(
        ctx: &'a RunContext,
        scenario: &'a ScenarioPlan,
        plan: &'a Plan,
        sink: &'a mut dyn VariantSink,
    ) -> impl Future<Output = Result<()>> + 'a {
        run(ctx, scenario, plan, sink)
    }

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        let bytes = plan.messages * (plan.message_size as u64 + PER_MESSAGE_OVERHEAD);
        Need {
            streams: 1,
            // Every shape's durable lives until its stream goes.
            consumers: plan.filters.len(),
            bytes,
            total_bytes: bytes,
            max_ack_pending: plan.consumer.max_ack_pending,
        }
    }

    fn estimated_duration(plan: &Plan, _common: &CommonPlan) -> Duration {
        // Count-based: about 100k messages a second to fill and to read,
        // but several filter subjects read at 4k-20k a second here
        // (docs/scenarios/filtered.md): a tenth of that, say.
        let each = Duration::from_secs_f64(plan.messages as f64 / 100_000.0);
        let reads: u32 = plan
            .filters
            .iter()
            .map(|&s| if s == Shape::Several { 10 } else { 1 })
            .sum();
        each * ((reads + 1) * plan.streams() as u32)
    }

    fn consumer(plan: &Plan) -> Option<&ConsumerPlan> {
        Some(&plan.consumer)
    }

    fn consumer_mut(plan: &mut Plan) -> Option<&mut ConsumerPlan> {
        Some(&mut plan.consumer)
    }
}

async fn run(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    for &max_per_subject in &plan.max_per_subject {
        for &cardinality in &plan.subjects {
            if ctx.stop.is_cancelled() {
                return Ok(());
            }
            let point = Point {
                cardinality,
                max_per_subject,
            };
            one_stream(ctx, scenario, plan, point, sink).await?;
        }
    }
    Ok(())
}

/// One stream of the sweep.
#[derive(Debug, Clone, Copy)]
struct Point {
    cardinality: u32,
    max_per_subject: u64,
}

impl Point {
    fn label(self) -> String {
        match self.max_per_subject {
            0 => format!("subjects-{}", self.cardinality),
            m => format!("subjects-{}.max-{m}", self.cardinality),
        }
    }
}

/// A filled stream every shape of a point reads.
struct Filled {
    stream: stream::Stream,
    name: String,
    layout: Layout,
    point: Point,
    /// The sequences the stream keeps of the fill.
    stored: Sequences,
    /// Whether it holds as many as `stored` says.
    kept: Invariant,
    drain_timeout: Duration,
}

/// Provision, fill, read once per shape, and the ratios against the
/// unfiltered read once all are done; the stream deleted whatever happens.
async fn one_stream(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    point: Point,
    sink: &mut dyn VariantSink,
) -> Result<()> {
    let name = ctx.names.stream(scenario.name(), &point.label());
    let filled = match provision_and_fill(ctx, scenario, plan, point, &name).await {
        Ok(filled) => filled,
        Err(e) => {
            let mut result = VariantResult::new(format!("fill.{}", point.label()));
            result.error = Some(format!("{e:#}"));
            sink.record(&scenario.common, result)?;
            return ctx
                .provisioner
                .delete_stream(&name)
                .await
                .context("cleaning up after a failed fill");
        }
    };
    let mut ran = Vec::new();
    for &shape in &plan.filters {
        if ctx.stop.is_cancelled() {
            break;
        }
        let label = format!("{}.{}", shape.label(), point.label());
        let (result, rate) = variant(label, async |r| {
            consume_shape(ctx, scenario.name(), plan, &filled, shape, r).await
        })
        .await;
        ran.push((shape, result, rate));
    }
    let none = ran
        .iter()
        .find(|(s, _, _)| *s == Shape::None)
        .and_then(|(_, _, rate)| *rate)
        .filter(|r| *r > 0.0);
    for (shape, mut result, rate) in ran {
        if let (Some(none), Some(rate), false) = (none, rate, shape == Shape::None) {
            result.metrics.push(Metric::new(
                VS_NONE_RATE,
                "ratio",
                rate / none,
                Direction::Higher,
            ));
        }
        sink.record(&scenario.common, result)?;
    }
    ctx.provisioner
        .delete_stream(&name)
        .await
        .context("cleaning up after the stream")
}

/// The point's stream, `<base>.>` with its max_msgs_per_subject, filled
/// by one publisher and checked to be laid out as jsbench computes it.
async fn provision_and_fill(
    ctx: &RunContext,
    scenario: &ScenarioPlan,
    plan: &Plan,
    point: Point,
    name: &str,
) -> Result<Filled> {
    let layout = Layout {
        base: ctx.names.subject(scenario.name(), &point.label()),
        cardinality: point.cardinality,
        rare_every: plan.rare_every,
    };
    let mut config = stream_config(name, &layout.base, &ctx.server, &ctx.stream);
    config.subjects = vec![format!("{}.>", layout.base)];
    config.max_messages_per_subject = match point.max_per_subject {
        0 => -1,
        m => i64::try_from(m).unwrap_or(i64::MAX),
    };
    let stream = ctx.provisioner.create_stream(config).await?;
    let spec = DriveSpec::fill(
        format!("{} fill {}", scenario.name(), point.label()),
        name,
        layout.subjects(),
        (plan.messages, plan.message_size),
        scenario.common.drain_timeout,
    );
    let outcome = drive(ctx, &spec).await?;
    check_fill(&outcome, plan.messages)?;
    let stored = filter::stored(&layout, plan.messages, point.max_per_subject);
    probe_layout(ctx, name, &layout, &stored).await?;
    let held = ctx.provisioner.stream_info(name).await;
    let kept = verify::stream_kept(
        held.map(|i| i.state.messages),
        stored.len(),
        point.max_per_subject,
    );
    Ok(Filled {
        stream,
        name: name.to_string(),
        layout,
        point,
        stored,
        kept,
        drain_timeout: scenario.common.drain_timeout,
    })
}

/// Every message stored once and nothing retried: only then is stream
/// sequence *m* + 1 message *m*, the premise of the layout.
fn check_fill(o: &DriveOutcome, messages: u64) -> Result<()> {
    let stored = o.counts.persisted;
    let retried: u64 = o
        .acks
        .iter()
        .map(|a| a.retries_stored + a.late_stored + a.resent_stored)
        .sum();
    if stored != messages || !o.errors.is_empty() || retried > 0 {
        return Err(anyhow!(
            "filling the stream stored {stored} of {messages} messages, {retried} of them \
             retried (the layout needs every message stored in order, once): {}",
            o.errors.join("; ")
        ));
    }
    Ok(())
}

/// Asks the stream for the subjects of a few kept sequences, spread over
/// the fill, and compares them with the layout: a fill stored out of order
/// would make every due set wrong.
async fn probe_layout(
    ctx: &RunContext,
    stream: &str,
    layout: &Layout,
    stored: &Sequences,
) -> Result<()> {
    let handle = ctx
        .provisioner
        .jetstream()
        .get_stream(stream)
        .await
        .with_context(|| format!("looking up stream {stream}"))?;
    let step = (stored.len() / LAYOUT_PROBES).max(1) as usize;
    let probes: Vec<u64> = stored.iter().step_by(step).collect();
    for seq in probes {
        let message = handle
            .get_raw_message(seq)
            .await
            .with_context(|| format!("reading back sequence {seq} of {stream}"))?;
        let expected = layout.subject_name(layout.subject_of(seq - 1));
        if message.subject.as_str() != expected {
            return Err(anyhow!(
                "sequence {seq} of {stream} is on {}, the layout says {expected}: the fill \
                 was not stored in publish order",
                message.subject
            ));
        }
    }
    Ok(())
}

/// The filter subjects of `shape` over `layout`; empty for none.
pub fn shape_filters(shape: Shape, layout: &Layout) -> Vec<String> {
    let data = layout.data_prefix();
    match shape {
        Shape::None => Vec::new(),
        Shape::Literal => vec![layout.rare_subject()],
        Shape::Star => vec![format!("{data}.*")],
        Shape::Tail => vec![format!("{data}.>")],
        Shape::All => vec![format!("{}.>", layout.base)],
        Shape::Several => vec![format!("{data}.*"), layout.rare_subject()],
    }
}

/// A fresh durable with `shape`'s filter reads everything it selects:
/// its rate from first to last delivery, the server's CPU per delivery,
/// and the guarantees. Returns the rate.
async fn consume_shape(
    ctx: &RunContext,
    scenario: &str,
    plan: &Plan,
    target: &Filled,
    shape: Shape,
    r: &mut VariantResult,
) -> Result<f64> {
    let filters = shape_filters(shape, &target.layout);
    describe(plan, target, shape, &filters, r);
    let due = filter::due(&target.layout, &target.stored, &filters);

    // Provision the durable.
    let durable = ctx.names.durable(scenario, &r.name);
    let mut config = durable_config(&durable, &plan.consumer, &target.layout.base);
    match filters.as_slice() {
        [] => {}
        [one] => config.filter_subject = one.clone(),
        several => config.filter_subjects = several.to_vec(),
    }
    ctx.provisioner
        .create_consumer(&target.stream, config, plan.consumer.pedantic)
        .await?;

    // Drive: read everything due.
    let spec = DriveSpec::consume_only(
        format!("{scenario} {}", r.name),
        target.name.clone(),
        ConsumerSpec::acking(durable, plan.consumer.clone()),
        due.len(),
        target.drain_timeout,
    );
    let outcome = drive(ctx, &spec).await?;

    // Measure, verify.
    let rate = measure(&outcome, plan, (&due, &target.stored), r);
    verify_consume(ctx, target, &due, &outcome, r).await;
    Ok(rate)
}

fn describe(plan: &Plan, target: &Filled, shape: Shape, filters: &[String], r: &mut VariantResult) {
    r.param("messages", plan.messages);
    r.param("message_size", plan.message_size);
    r.param("subjects", target.point.cardinality);
    r.param("max_per_subject", target.point.max_per_subject);
    r.param("rare_every", plan.rare_every);
    r.param("filter", shape.label());
    r.param("filter_subjects", filters);
    r.param("stored", target.stored.len());
    r.param("batch", plan.consumer.batch);
    r.param("consumers", plan.consumer.consumers);
}

/// The consume's figures: deliveries a second from the first delivery to
/// the last, the share of the stored messages selected, and the server's
/// CPU from the consumer clients' connect to the end of the drain over
/// the deliveries it made.
fn measure(
    o: &DriveOutcome,
    plan: &Plan,
    (due, stored): (&Sequences, &Sequences),
    r: &mut VariantResult,
) -> f64 {
    let rate = o.consume_rate();
    r.metrics.extend(rate_and_throughput(
        names::CONSUME,
        rate,
        rate * plan.message_size as f64,
    ));
    let share = match stored.len() {
        0 => 0.0,
        n => due.len() as f64 / n as f64,
    };
    r.metrics
        .push(Metric::new(MATCHED_SHARE, "ratio", share, Direction::None));
    let server = o.server_cpu.filter(|_| o.counts.deliveries > 0);
    match server {
        Some(cpu) if cpu >= MIN_SERVER_CPU => {
            r.metrics.push(Metric::new(
                names::SERVER_CPU_PER_MSG,
                "us",
                cpu.as_secs_f64() * 1e6 / o.counts.deliveries as f64,
                Direction::Lower,
            ));
            r.param(
                "server_cpu_per_msg_from",
                "server CPU from the consumer's connect to the end of the drain, over its deliveries",
            );
        }
        Some(cpu) => r.param(
            "server_cpu_per_msg_from",
            format!(
                "not reported: the read cost the server {} ms of CPU, under the {} ms a figure \
                 needs at a clock tick's resolution",
                cpu.as_millis(),
                MIN_SERVER_CPU.as_millis()
            ),
        ),
        None => {}
    }
    r.timelines
        .insert(names::DELIVERED.into(), o.delivered_timeline.clone());
    r.warnings.extend(o.errors.iter().cloned());
    // A withheld server figure stays withheld: the shared figures would
    // otherwise divide the same few ticks by the messages read.
    checks::client_figures_with(o, server.filter(|cpu| *cpu >= MIN_SERVER_CPU), r);
    rate
}

/// The due sequences as the ledger's persisted ones, the consumer's
/// deliveries merged in: the never-seen ones are attributed to the server
/// or the client as every other scenario's are, and the invariants judged.
async fn verify_consume(
    ctx: &RunContext,
    target: &Filled,
    due: &Sequences,
    o: &DriveOutcome,
    r: &mut VariantResult,
) {
    let mut ledger = LedgerShard::new();
    for seq in due.iter() {
        ledger.mark(seq, Event::Persisted);
    }
    ledger.merge(&o.ledger);
    let failure = o.consumers.iter().find_map(|c| c.first_error.clone());
    let js = ctx.provisioner.jetstream();
    let held = crate::drive::held_sequences(js, &target.name, &ledger, o.server_state).await;
    let attribution = crate::drive::attribute(&ledger, o.server_state, failure, &held, 0);
    let mut counts = ledger.counts();
    if let Some(a) = &attribution {
        counts.lost = a.lost;
        counts.client_dropped = a.client_dropped;
        counts.unattributed = a.unattributed;
    }
    r.ledger = counts;
    r.invariants.extend(verify::verify(&verify::Observed {
        due,
        ledger: &ledger,
        attribution: attribution.as_ref(),
    }));
    r.invariants.push(target.kept.clone());
    r.invariants.push(checks::nothing_pending(o));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shape_selects_what_its_doc_says() {
        let layout = Layout {
            base: "jsb.t".into(),
            cardinality: 10,
            rare_every: 10,
        };
        let stored = filter::stored(&layout, 1000, 0);
        let share = |s| filter::due(&layout, &stored, &shape_filters(s, &layout)).len();
        assert_eq!(share(Shape::None), 1000);
        assert_eq!(share(Shape::Literal), 100);
        assert_eq!(share(Shape::Star), 900);
        assert_eq!(share(Shape::Tail), 900);
        assert_eq!(share(Shape::All), 1000);
        assert_eq!(share(Shape::Several), 1000);
        assert_eq!(
            shape_filters(Shape::Several, &layout),
            ["jsb.t.d.*", "jsb.t.rare"]
        );
    }
}
