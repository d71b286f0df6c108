//! One replay: its consumer created and read until its selection has
//! arrived, and, for `new` and the live tail, a publisher appending to the
//! stream meanwhile, whose messages the recording then holds too.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::consumer::DeliverPolicy;
use tokio::sync::watch;

use super::{Live, OneReplay, Plan, READ_IDLE, Recording, measure, verify};
use crate::drive::{DriveOutcome, DriveSpec};
use crate::profile::{ArrivalPlan, ReplayDeliver};
use crate::replay::read::{self, ReplaySpec};
use crate::replay::recording::{self, Start, select};
use crate::scenario::Scope;
use crate::variant::VariantResult;

/// How long a replay keeps reading after its last selected message, to
/// catch a delivery that should not come.
const SETTLE: Duration = Duration::from_millis(250);

/// One replay variant: its consumer is created by the reader; here, what
/// it must deliver, the read (beside the live publisher, if any), and the
/// judgement.
pub(super) async fn replay(
    s: &mut Scope<'_>,
    r: &mut VariantResult,
    plan: &Plan,
    recording: &mut Recording,
    v: OneReplay,
) -> Result<()> {
    if v.live != Live::No {
        // What an earlier live variant appended but could not read back.
        catch_up(recording).await?;
    }
    let start = Start {
        sequence: plan.start_sequence,
        time_ns: recording.messages[0].published_ns + plan.start_time.as_nanos() as u64,
    };
    let deliver = match v.deliver {
        ReplayDeliver::All => DeliverPolicy::All,
        ReplayDeliver::ByStartSequence => DeliverPolicy::ByStartSequence {
            start_sequence: start.sequence,
        },
        ReplayDeliver::ByStartTime => DeliverPolicy::ByStartTime {
            start_time: time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(start.time_ns))
                .context("the start time is out of range")?,
        },
        ReplayDeliver::Last => DeliverPolicy::Last,
        ReplayDeliver::LastPerSubject => DeliverPolicy::LastPerSubject,
        ReplayDeliver::New => DeliverPolicy::New,
    };
    let before = last_seq(recording);
    let selected_now = select(&recording.messages, v.deliver, start);
    let (target_tx, target_rx) = watch::channel(match v.live {
        Live::No => selected_now.last().copied().unwrap_or(0),
        Live::New | Live::Tail => u64::MAX,
    });
    let live_messages = (plan.live_rate as f64 * plan.live_duration.as_secs_f64()) as usize;
    let spec = ReplaySpec {
        reader: v.reader,
        stream: recording.stream.clone(),
        name: s.names().durable,
        deliver,
        pace: v.pace,
        // The server refuses last_per_subject without one (pinned in tests).
        filter: (v.deliver == ReplayDeliver::LastPerSubject)
            .then(|| format!("{}.*", recording.base)),
        until_seq: target_rx,
        settle: SETTLE,
        idle: s.scenario.common.drain_timeout,
        capacity: selected_now.len()
            + match v.live {
                Live::No => 0,
                Live::New | Live::Tail => live_messages + 1024,
            },
    };

    // Drive, metering both sides' CPU over the whole read.
    let client_start = crate::system::cpu::ClientCpu::now();
    let server_meter = s.ctx.server_cpu.start();
    let stop = s.ctx.stop.clone();
    let t = &*recording;
    let (log, live) = match v.live {
        Live::No => (read::replay(&t.client, &t.js, spec, stop).await?, None),
        Live::New | Live::Tail => {
            let publishing = async {
                let outcome = s.drive(&live_spec(s, plan, t)).await;
                // Now the last sequence is known: the reader may finish. A
                // lookup that failed lets it finish at once and fails the
                // variant with its error, where the reader stopped short
                // would read as messages never replayed.
                let last = (s.ctx.provisioner.stream_info(&t.stream).await)
                    .map(|i| i.state.last_sequence)
                    .context("asking the stream's last sequence after the live publishing");
                let _ = target_tx.send(*last.as_ref().unwrap_or(&before));
                outcome.and_then(|o| last.map(|_| o))
            };
            let (outcome, log) = if v.live == Live::New {
                // The consumer must exist before the first new message.
                let opened = read::open(&t.client, &t.js, spec).await?;
                tokio::join!(publishing, opened.read(stop))
            } else {
                let reading = async {
                    // Let the publisher get going first: the consumer then
                    // catches up with a stream that keeps growing.
                    tokio::time::sleep(live_lead(plan)).await;
                    read::replay(&t.client, &t.js, spec, stop).await
                };
                tokio::join!(publishing, reading)
            };
            // Extend the recording by what was appended, whatever became
            // of this variant: later variants replay those messages too.
            let added = catch_up(recording).await;
            let (outcome, log) = (outcome?, log?);
            added?;
            (log, Some(outcome))
        }
    };
    let expected = match v.live {
        Live::No => selected_now,
        Live::New => recording
            .messages
            .iter()
            .filter(|m| m.seq > before)
            .map(|m| m.seq)
            .collect(),
        Live::Tail => select(&recording.messages, ReplayDeliver::All, start),
    };

    // Measure and verify.
    let client = crate::system::cpu::ClientCpu::since(client_start).total();
    // The reader runs on the run's own runtime: what the live publishers
    // (if any) did not use is the reading's.
    let publisher = live.as_ref().map(DriveOutcome::publisher_cpu);
    let split = crate::scenario::client_cost::CpuSplit {
        client,
        publisher,
        consumer: Some(client.saturating_sub(publisher.unwrap_or_default())),
        server: server_meter.stop(),
    };
    crate::scenario::client_cost::cpu_per_message(&split, log.deliveries.len() as u64, r);
    r.param("selected", expected.len());
    r.param("recording_messages", recording.messages.len());
    measure::measure(&v, &log, live.as_ref(), r);
    verify::verify(&v, &log, &expected, &recording.messages, live.as_ref(), r);
    Ok(())
}

/// The last sequence the recording holds.
fn last_seq(recording: &Recording) -> u64 {
    recording.messages.last().map_or(0, |m| m.seq)
}

/// Reads what the stream holds beyond the recording into it: what the
/// live publishers stored, whether or not their variant succeeded.
async fn catch_up(recording: &mut Recording) -> Result<()> {
    let from = last_seq(recording) + 1;
    let added = recording::read(&recording.js, &recording.stream, from, READ_IDLE).await?;
    recording.messages.extend(added);
    Ok(())
}

/// When the live-tail consumer is created: a quarter into the live
/// publishing, after the drive's 200 ms lead-in.
fn live_lead(plan: &Plan) -> Duration {
    Duration::from_millis(200) + plan.live_duration / 4
}

/// The publisher of the live variants: steady at `live_rate`.
fn live_spec(s: &Scope<'_>, plan: &Plan, t: &Recording) -> DriveSpec {
    let mut publish = plan.publish.clone();
    publish.arrival = ArrivalPlan::Steady;
    super::publisher(s, t, &publish, (plan.live_rate, plan.live_duration), 0x11fe)
}
