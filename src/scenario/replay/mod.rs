//! `replay`: record a stream with a known, irregular arrival pattern, then
//! rewind it with fresh consumers, instantly or at the original pace, from
//! every deliver policy, through an ordered push consumer and a durable pull
//! consumer.
//!
//! Provision: one stream over several subjects for the whole scenario.
//! Drive: the record phase publishes the pattern (steady, Poisson, bursts or
//! explicit gaps) and reads the stream back as ground truth (server
//! timestamps); each replay variant then creates its consumer and reads
//! until the last selected message has arrived. `new` and the live tail
//! publish while they read (and the recording is extended by what they
//! added), so they run last.
//! Measure: instant replays their catch-up rate (msg/s, MB/s) and, for the
//! live tail, the time to reach it while publishing continues; original
//! replays their gap error, drift and duration ratio against the recorded
//! timestamps, per class of gap, and a sampled series for the chart.
//! Verify: the replayed set is exactly the set the deliver policy selects
//! from the recording (first message, count, order, nothing lost, nothing
//! extra), each delivery is the recorded message, and the server has nothing
//! left pending.
//!
//! - [`record`]: the record phase, the group's setup (recorded as the
//!   `record` variant).
//! - [`live`]: one replay read, and the live publisher beside it.
//! - [`measure`] and [`verify`]: what a replay's log is judged by.

mod live;
mod measure;
pub mod plan;
mod record;
mod verify;

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::Client;
use async_nats::jetstream;

use super::table::{self, Cell, Column, Figures, Show, format_us};
use super::{Kind, Scope, Variants};
use crate::drive::DriveSpec;
use crate::profile::{
    CommonPlan, PublishPlan, REPLAY_MAX_ACK_PENDING, ReplayDeliver, ReplayPace, ReplayReader,
    format_duration,
};
use crate::record::names;
use crate::replay::recording::Recorded;
use crate::streams::provision::{Need, PER_MESSAGE_OVERHEAD};
use crate::variant::VariantResult;

pub use plan::Plan;

/// The figures this scenario reports that its table, the charts and
/// report.html read, by name.
/// Messages a replay delivered, and the first sequence.
pub const MESSAGES: &str = "messages";
pub const FIRST_SEQ: &str = "first_seq";
pub const TIME_TO_LIVE_TAIL: &str = "time_to_live_tail";
pub use crate::replay::pacing::{
    GAP_ERROR, GAP_ERROR_BY_GAP, GAP_ERROR_EARLY, GAP_ERROR_LATE, SMALLEST_GAP_WITHIN_1MS,
};
pub const DRIFT_FINAL: &str = "drift.final";
pub const DURATION_RATIO: &str = "duration_ratio";

/// How long reading the recording back may go without a message.
const READ_IDLE: Duration = Duration::from_secs(10);

/// One replay variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneReplay {
    pace: ReplayPace,
    deliver: ReplayDeliver,
    reader: ReplayReader,
    /// Reads while a publisher appends to the stream.
    live: Live,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Live {
    No,
    /// Deliver `new`: the consumer exists before the publisher starts.
    New,
    /// Deliver all, instantly, created while the publisher runs.
    Tail,
}

impl OneReplay {
    fn name(&self) -> String {
        let deliver = match self.live {
            Live::Tail => "live_tail",
            _ => self.deliver.label(),
        };
        format!("{}.{deliver}.{}", self.pace.label(), self.reader.label())
    }
}

/// The variants in the order they run: replays of the recording first,
/// then those that append to the stream.
fn variants(plan: &Plan) -> Vec<OneReplay> {
    let listed = [
        (ReplayPace::Instant, &plan.instant),
        (ReplayPace::Original, &plan.original),
    ]
    .into_iter()
    .flat_map(|(pace, list)| list.iter().map(move |&deliver| (pace, deliver)))
    .map(|(pace, deliver)| match deliver {
        ReplayDeliver::New => (pace, deliver, Live::New),
        _ => (pace, deliver, Live::No),
    });
    let tail = plan
        .live_tail
        .then_some((ReplayPace::Instant, ReplayDeliver::All, Live::Tail));
    let mut all: Vec<OneReplay> = (listed.chain(tail))
        .flat_map(|(pace, deliver, live)| {
            (plan.readers.iter()).map(move |&reader| OneReplay {
                pace,
                deliver,
                reader,
                live,
            })
        })
        .collect();
    // Stable: each part keeps its order.
    all.sort_by_key(|v| v.live != Live::No);
    all
}

/// What every replay shares: the recorded stream (the group's, deleted
/// once every replay has run), the connection replays read on, and the
/// recording itself, which the live variants extend.
pub struct Recording {
    stream: String,
    base: String,
    subjects: Vec<String>,
    client: Client,
    js: jetstream::Context,
    /// The stream as the server stored it, in sequence order: the record
    /// phase's messages, then what each live variant's publisher added.
    messages: Vec<Recorded>,
}

/// The registry's row for `replay`: instant catch-up against original pacing.
pub struct Replay;

impl Kind for Replay {
    const NAME: &'static str = "replay";
    const COORDINATOR_SIDE: Option<&'static str> = Some(
        "the replay readers (the measured part) run on the coordinator; the recording's and the live tail's publishers and consumers are split",
    );
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        Column::metric("msgs", MESSAGES, Show::Whole),
        Column::metric("first", FIRST_SEQ, Show::Whole),
        Column {
            header: "msg/s",
            cell: Cell::FirstOf(
                &[
                    names::CATCH_UP.rate,
                    names::PUBLISH.rate,
                    names::DELIVERY_RATE,
                ],
                Show::Rate,
            ),
        },
        Column {
            header: "MB/s",
            cell: Cell::FirstOf(
                &[names::CATCH_UP.throughput, names::PUBLISH.throughput],
                Show::Decimals(1),
            ),
        },
        Column::metric("to tail", TIME_TO_LIVE_TAIL, Show::Ms),
        Column::new(
            "gap err p50",
            Cell::Quantile(GAP_ERROR, "p50", Show::SignedUs),
        ),
        Column::new("p99", Cell::Quantile(GAP_ERROR, "p99", Show::SignedUs)),
        Column::metric("drift end", DRIFT_FINAL, Show::SignedUs),
        Column::metric("ratio", DURATION_RATIO, Show::Times(3)),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, _common: &CommonPlan) -> Need {
        // One stream: the recording, plus what the live variants append.
        let live_variants = plan.readers.len() * plan.live_variants();
        let live = plan.live_rate as f64 * plan.live_duration.as_secs_f64() * live_variants as f64;
        let per_message = plan.publish.message_size.mean() as u64 + PER_MESSAGE_OVERHEAD;
        let bytes = (plan.planned_messages + live as u64) * per_message;
        Need {
            // A replay's own consumer, and an ordered one the server may still hold.
            consumers: 2,
            max_ack_pending: REPLAY_MAX_ACK_PENDING,
            ..Need::one_stream(bytes)
        }
    }

    fn estimated_duration(plan: &Plan, common: &CommonPlan) -> Duration {
        plan.estimated_duration(common)
    }

    type Group = ();
    /// The recording, once made.
    type Shared = Option<Recording>;
    type Variant = OneReplay;
    /// The record phase measures and checks the recording: a variant.
    const SETUP_RECORDED: bool = true;

    fn setup_label(_plan: &Plan, _: &()) -> String {
        "record".into()
    }

    /// The recorded stream, in the group's scope, and the pattern
    /// published into it and read back as the recording.
    async fn setup(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &(),
    ) -> Result<Option<Recording>> {
        record::record(s, r, plan).await.map(Some)
    }

    fn variants(plan: &Plan, _: &()) -> Variants<OneReplay> {
        Variants::List(variants(plan))
    }

    fn label(_plan: &Plan, v: &OneReplay) -> String {
        v.name()
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        recording: &mut Option<Recording>,
        v: &OneReplay,
    ) -> Result<()> {
        let recording = recording.as_mut().context("nothing was recorded")?;
        describe_replay(plan, v, r);
        super::checks::server_clock(s.ctx, r);
        live::replay(s, r, plan, recording, *v).await
    }

    /// How closely original pacing held, by the size of the gap.
    fn lines(v: &dyn Figures) -> Vec<String> {
        if v.value(&names::quantile(GAP_ERROR, "p50")).is_none() {
            return Vec::new();
        }
        let within = |q: &str| match v.value(&format!("{SMALLEST_GAP_WITHIN_1MS}.{q}")) {
            Some(0.0) => "every gap".to_string(),
            Some(gap) => format!("gaps above {}", format_us(gap)),
            None => "no gap size".to_string(),
        };
        vec![format!(
            "original pacing within 1 ms: {} by the median, {} at p99; gaps of 1 ms and less \
             are not paced (median error {})",
            within("p50"),
            within("p99"),
            v.shown(&format!("{GAP_ERROR_BY_GAP}.le_1ms.p50"), Show::SignedUs)
        )]
    }
}

/// A publisher of the recorded stream at `rate` msg/s for `duration`,
/// nobody reading: no warm-up, as everything it stores is replayed.
fn publisher(
    s: &Scope<'_>,
    t: &Recording,
    publish: &PublishPlan,
    (rate, duration): (u64, Duration),
    seed: u64,
) -> DriveSpec {
    let (label, subjects) = (s.drive_label(), t.subjects.clone());
    let common = &s.scenario.common;
    DriveSpec {
        warmup: Duration::ZERO,
        duration,
        seed,
        ..DriveSpec::publish_only(label, &t.stream, subjects, publish, common, rate)
    }
}

fn describe_replay(plan: &Plan, v: &OneReplay, r: &mut VariantResult) {
    r.param("replay_policy", v.pace.label());
    r.param("deliver_policy", v.deliver.label());
    r.param("consumer", v.reader.label());
    match v.deliver {
        ReplayDeliver::ByStartSequence => r.param("start_sequence", plan.start_sequence),
        ReplayDeliver::ByStartTime => r.param("start_time", format_duration(plan.start_time)),
        _ => {}
    }
    if v.live != Live::No {
        r.param("live_rate", plan.live_rate);
        r.param("live_duration", format_duration(plan.live_duration));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_replay_the_recording_first_and_append_last() {
        let plan = crate::scenario::parse(
            "t",
            "name = \"t\"\n[[scenario]]\nkind = \"replay\"\nduration = \"1s\"\nrate = 100\n\
             instant = [\"new\", \"all\"]\noriginal = [\"last\"]\nconsumers = [\"pull\"]\nlive_tail = true\n",
        )
        .unwrap();
        let super::super::KindPlan::Replay(plan) = &plan.scenarios[0].kind else {
            panic!("replay")
        };
        let names: Vec<String> = variants(plan).iter().map(OneReplay::name).collect();
        assert_eq!(
            names,
            [
                "instant.all.pull",
                "original.last.pull",
                "instant.new.pull",
                "instant.live_tail.pull"
            ]
        );
        assert_eq!(plan.variant_count(), 1 + names.len());
    }
}
