//! `filtered`: what a subject filter costs a consumer. Users reported
//! consume rates falling to about 1% with a filter (nats-server issues
//! 7014 and 7852); this sweeps the filter's shape against the stream's
//! subject cardinality and max-per-subject. Each point fills a stream
//! once, nobody reading (so the consume is measured alone), then a fresh
//! durable per filter shape reads what its filter selects. Each shape's
//! rate is set against the unfiltered read of the same stream, and the
//! server's CPU is divided by the deliveries it made.
//!
//! jsbench computes the set each filter selects itself ([`layout`]), so a
//! consumer that skips a matching message, delivers one twice or delivers
//! one outside its filter fails the variant.

mod layout;
pub mod plan;
mod verify;

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::stream;

use super::checks;
use super::table::{self, Column, Show};
use super::{Field, Kind, Scope, Variants};
use crate::drive::{ConsumerSpec, DriveOutcome, DriveSpec};
use crate::profile::CommonPlan;
use crate::record::ledger::SeqSet;
use crate::record::metrics::{Direction, rate_and_throughput};
use crate::record::names::{self, SERVER_CPU_PER_MSG};
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD, durable_config};
use crate::variant::VariantResult;

use layout::Layout;
pub use plan::{Plan, Shape};
pub use verify::{DELIVERED_ONCE, NOTHING_OUTSIDE, STREAM_KEPT};

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

impl Kind for Filtered {
    const NAME: &'static str = "filtered";
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::param("subjects", "subjects"),
        Column::param("max/subject", "max_per_subject"),
        Column::metric("matched", MATCHED_SHARE, Show::Percent),
        Column::metric("consumed/s", names::CONSUME.rate, Show::Rate),
        Column::metric("vs none", VS_NONE_RATE, Show::Times(2)),
        Column::metric("server µs/msg", SERVER_CPU_PER_MSG, Show::MicrosPerMsg),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        let bytes = plan.messages * (plan.message_size as u64 + PER_MESSAGE_OVERHEAD);
        Need {
            // Every shape's durable lives until its stream goes.
            consumers: plan.filters.len(),
            max_ack_pending: plan.consumer.max_ack_pending,
            ..Need::one_stream(bytes)
        }
    }

    fn estimated_duration(plan: &Plan, _common: &CommonPlan) -> Duration {
        // Count-based: about 100k messages a second to fill and to read,
        // but several filter subjects read at 4k-20k a second here
        // (docs/scenarios/filtered.md): a tenth of that, say.
        // (The plan lists each shape once.)
        let each = Duration::from_secs_f64(plan.messages as f64 / 100_000.0);
        let several = u32::from(plan.filters.contains(&Shape::Several));
        let reads = plan.filters.len() as u32 + 9 * several;
        each * ((reads + 1) * (plan.subjects.len() * plan.max_per_subject.len()) as u32)
    }

    const CONSUMER: Option<Field<Plan>> = Some((|p| &p.consumer, |p| &mut p.consumer));

    type Group = Point;
    /// The point's filled stream, once set up.
    type Shared = Option<Filled>;
    type Variant = (Point, Shape);
    const COMPARES: bool = true;

    fn groups(plan: &Plan) -> Vec<Point> {
        let points = plan.max_per_subject.iter().flat_map(|&max_per_subject| {
            plan.subjects.iter().map(move |&cardinality| Point {
                cardinality,
                max_per_subject,
            })
        });
        points.collect()
    }

    fn setup_label(_plan: &Plan, point: &Point) -> String {
        format!("fill.{}", point.label())
    }

    /// The point's stream, `<base>.>` with its max_msgs_per_subject,
    /// filled by one publisher and checked to be laid out as jsbench
    /// computes it.
    async fn setup(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        point: &Point,
    ) -> Result<Option<Filled>> {
        let (names, label) = (&s.ctx.names, point.label());
        let name = names.stream(s.scenario.name(), &label);
        let layout = Layout {
            base: names.subject(s.scenario.name(), &label),
            cardinality: point.cardinality,
            rare_every: plan.rare_every,
        };
        let mut config = s.stream_config();
        (config.name, config.subjects) = (name.clone(), vec![format!("{}.>", layout.base)]);
        // The plan bounds max_per_subject far below i64::MAX.
        let max = point.max_per_subject;
        config.max_messages_per_subject = if max == 0 { -1 } else { max as i64 };
        let stream = s.stream(config).await?;
        let spec = DriveSpec::fill(
            s.drive_label(),
            &name,
            layout.subjects(),
            (plan.messages, plan.message_size),
            s.scenario.common.drain_timeout,
        );
        checks::filled_in_order(&s.drive(&spec).await?, plan.messages)?;
        let stored = layout::stored(&layout, plan.messages, point.max_per_subject);
        probe_layout(&stream, &layout, &stored).await?;
        Ok(Some(Filled {
            stream,
            layout,
            stored,
            held: s.stored(r, &name).await,
        }))
    }

    fn variants(plan: &Plan, point: &Point) -> Variants<(Point, Shape)> {
        Variants::List(plan.filters.iter().map(|&shape| (*point, shape)).collect())
    }

    fn label(_plan: &Plan, (point, shape): &(Point, Shape)) -> String {
        format!("{}.{}", shape.label(), point.label())
    }

    /// A fresh durable with the shape's filter reads everything it
    /// selects: its rate from first to last delivery, the server's CPU per
    /// delivery, and the guarantees.
    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        filled: &mut Option<Filled>,
        &(point, shape): &(Point, Shape),
    ) -> Result<()> {
        let filled = filled
            .as_ref()
            .context("the point's stream was never filled")?;
        let filters = filled.layout.filters(shape);
        r.param("messages", plan.messages);
        r.param("message_size", plan.message_size);
        r.param("subjects", point.cardinality);
        r.param("max_per_subject", point.max_per_subject);
        r.param("rare_every", plan.rare_every);
        r.param("filter", shape.label());
        r.param("filter_subjects", &filters);
        r.param("stored", filled.stored.len());
        r.param("batch", plan.consumer.batch);
        r.param("consumers", plan.consumer.consumers);
        let due = layout::due(&filled.layout, &filled.stored, &filters);

        // Provision the durable.
        let durable = s.names().durable;
        let mut config = durable_config(&durable, &plan.consumer, &filled.layout.base);
        match filters.as_slice() {
            [] => {}
            [one] => config.filter_subject = one.clone(),
            several => config.filter_subjects = several.to_vec(),
        }
        s.durable(&filled.stream, config, plan.consumer.pedantic)
            .await?;

        // Drive: read everything due.
        let spec = DriveSpec::consume_only(
            s.drive_label(),
            filled.stream.cached_info().config.name.clone(),
            ConsumerSpec::acking(durable, plan.consumer.clone()),
            due.clone(),
            s.scenario.common.drain_timeout,
        );
        let o = s.drive(&spec).await?;

        // Measure: deliveries a second from the first delivery to the
        // last, the share of the stored messages selected, the server's CPU
        // and the client's.
        let (rate, size) = (o.consume_rate(), plan.message_size as f64);
        r.metrics
            .extend(rate_and_throughput(names::CONSUME, rate, rate * size));
        let share = due.len() as f64 / filled.stored.len().max(1) as f64;
        r.metric(MATCHED_SHARE, "ratio", share, Direction::None);
        r.timelines
            .insert(names::DELIVERED.into(), o.delivered_timeline.clone());
        r.warnings.extend(o.errors.iter().cloned());
        // A withheld server figure stays withheld: the shared figures would
        // otherwise divide the same few ticks by the messages read.
        super::client_cost::client_figures_with(&o, server_cpu(&o, r), r);

        // Verify.
        r.ledger = o.counts;
        let kept = verify::stream_kept(&filled.held, filled.stored.len(), point.max_per_subject);
        r.invariants.extend(verify::verify(&due, &o));
        r.invariants.extend([kept, checks::nothing_pending(&o)]);
        Ok(())
    }

    /// Each shape's rate against the unfiltered read of the same stream.
    fn compare(_plan: &Plan, _point: &Point, done: &mut [((Point, Shape), VariantResult)]) {
        let rate = |r: &VariantResult| r.value(names::CONSUME.rate).filter(|&v| v > 0.0);
        let none = done.iter().find(|((_, s), _)| *s == Shape::None);
        let Some(none) = none.and_then(|(_, r)| rate(r)) else {
            return;
        };
        for (_, r) in done.iter_mut().filter(|((_, s), _)| *s != Shape::None) {
            if let Some(rate) = rate(r) {
                r.metric(VS_NONE_RATE, "ratio", rate / none, Direction::Higher);
            }
        }
    }
}

/// One stream of the sweep: its subject cardinality and max-per-subject.
#[derive(Debug, Clone, Copy, Default)]
pub struct Point {
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
pub struct Filled {
    /// Its name in its cached info.
    stream: stream::Stream,
    layout: Layout,
    /// The sequences the stream keeps of the fill.
    stored: SeqSet,
    /// How many it held when asked, or why its info could not be read.
    held: super::checks::StreamCount,
}

/// Asks the stream for the subjects of a few kept sequences, spread over
/// the fill, and compares them with the layout: a fill stored out of order
/// would make every due set wrong.
async fn probe_layout(stream: &stream::Stream, layout: &Layout, stored: &SeqSet) -> Result<()> {
    let step = (stored.len() / LAYOUT_PROBES).max(1) as usize;
    for seq in stored.iter().step_by(step) {
        let message = stream
            .get_raw_message(seq)
            .await
            .with_context(|| format!("reading back sequence {seq}"))?;
        let expected = layout.subject_name(layout.subject_of(seq - 1));
        anyhow::ensure!(
            message.subject.as_str() == expected,
            "sequence {seq} is on {}, the layout says {expected}: the fill was not stored in \
             publish order",
            message.subject
        );
    }
    Ok(())
}

/// The server's CPU from the consumer clients' connect to the end of the
/// drain over the deliveries it made, reported from [`MIN_SERVER_CPU`] on
/// (under it, the result says why not); the figure as judged.
fn server_cpu(o: &DriveOutcome, r: &mut VariantResult) -> Option<Duration> {
    let cpu = o.server_cpu.filter(|_| o.counts.deliveries > 0)?;
    let from = match cpu < MIN_SERVER_CPU {
        true => format!(
            "not reported: the read cost the server {} ms of CPU, under the {} ms a figure needs \
             at a clock tick's resolution",
            cpu.as_millis(),
            MIN_SERVER_CPU.as_millis()
        ),
        false => {
            let per = cpu.as_secs_f64() * 1e6 / o.counts.deliveries as f64;
            r.metric(SERVER_CPU_PER_MSG, "us", per, Direction::Lower);
            "server CPU from the consumer's connect to the end of the drain, over its deliveries"
                .into()
        }
    };
    r.param("server_cpu_per_msg_from", from);
    (cpu >= MIN_SERVER_CPU).then_some(cpu)
}
