//! Phase 1, connect: every client of this process's share is connected
//! before anything is timed, so a slow connect never eats into the
//! schedule; the CPU meters start just before the publishers connect.

use anyhow::{Context as _, Result};
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::{DriveSpec, RunContext, Share};
use crate::load::{Publisher, PublisherConfig, RetryPlan};
use crate::profile::late_retry_margin;
use crate::record::schedule::Schedule;
use crate::system::cpu::{self, CpuMeter};

/// This process's clients, connected and not started.
pub(super) struct Connected {
    pub consumer_clients: Vec<async_nats::Client>,
    /// Waiting for their [`crate::load::Timing`].
    pub publishers: Vec<Publisher>,
    /// Stops the publishers early: a failed consumer, a halted run.
    pub publish_stop: CancellationToken,
    pub meters: Meters,
    /// Messages the whole variant publishes (every process's publishers).
    pub messages: u64,
}

/// CPU meters, started before the publishers connect and read when the
/// drain has ended.
pub(super) struct Meters {
    pub client_cpu_start: cpu::ClientCpu,
    pub server_cpu: CpuMeter,
    /// Both sides again from the end of the warm-up, taken by the run
    /// loop: what the sends a rate counts cost.
    pub after_warmup: Option<(cpu::ClientCpu, CpuMeter)>,
}

pub(super) async fn connect(
    ctx: &RunContext,
    spec: &DriveSpec,
    share: &Share,
) -> Result<Connected> {
    let publishers = spec.publish.publishers;
    let arrivals = spec.arrivals();
    let messages = match &arrivals {
        Some(table) => table.len() as u64,
        None => spec.messages(),
    };

    let settings = match &spec.avoid_server {
        Some(url) => ctx
            .connect
            .avoiding(url)
            .with_context(|| format!("keeping the clients of {} off {url}", spec.label))?,
        None => ctx.connect.clone(),
    };
    let settings = &settings;
    let consumer_clients = join_all(share.consumers.iter().map(|i| async move {
        settings
            .connect_on(crate::system::runtimes::consume(), &format!("consumer-{i}"))
            .await
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;

    let retries = RetryPlan {
        in_window: spec.publish.duplicates,
        late: spec.publish.late_duplicates,
        window: spec.publish.duplicate_window,
        late_margin: late_retry_margin(spec.publish.duplicate_window),
    };
    let meters = Meters {
        client_cpu_start: cpu::ClientCpu::now(),
        server_cpu: ctx.server_cpu.start(),
        after_warmup: None,
    };
    let publish_stop = ctx.stop.child_token();
    let client = spec
        .publish
        .client
        .resolve(spec.fault.is_some(), ctx.connect.tls.required)?;
    let mut starting = Vec::new();
    for &i in &share.publishers {
        let config = PublisherConfig {
            index: i as u16,
            subjects: publisher_subjects(spec, i),
            message_size: spec.publish.message_size,
            schedule: Schedule {
                // Set by `go` once every publisher is connected.
                t0_ns: 0,
                total_rate: spec.rate,
                stride: publishers as u64,
                offset: i as u64,
                total_messages: messages,
                end_ns: u64::MAX,
                arrivals: arrivals.clone(),
            },
            window: spec.publish.pub_ack_window,
            msg_id: spec.publish.msg_id,
            msg_id_prefix: format!("{}-{i}-", spec.msg_id_prefix),
            headers: spec.publish.headers.clone(),
            retries,
            seed: spec.seed,
            record_from_ns: 0,
            pub_ack_timeout: spec.publish.pub_ack_timeout,
            timeline_origin_ns: 0,
            resend_after: spec.publish.resend_after,
            wake_every: spec.publish.wake_every,
            client,
            trace_every: spec.publish.trace_every,
            trace_prefix: super::trace::subject_prefix(&spec.msg_id_prefix, i),
            drop_pub_acks: 0,
        };
        let stop = publish_stop.clone();
        starting.push(async move {
            Publisher::start(settings, &format!("publisher-{i}"), config, stop).await
        });
    }
    let publishers = join_all(starting)
        .await
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Ok(Connected {
        consumer_clients,
        publishers,
        publish_stop,
        meters,
        messages,
    })
}

/// The subjects publisher `i` sends to: all of the spec's, round-robin, or
/// with [`crate::profile::PublishPlan::subject_per_publisher`] its one.
fn publisher_subjects(spec: &DriveSpec, i: usize) -> Vec<String> {
    match spec.subjects.len() {
        0 => Vec::new(),
        n if spec.publish.subject_per_publisher => vec![spec.subjects[i % n].clone()],
        _ => spec.subjects.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::publisher_subjects;
    use crate::drive::DriveSpec;
    use std::time::Duration;

    #[test]
    fn a_publisher_feeds_every_subject_or_its_own() {
        let subjects = vec!["a".to_string(), "b".to_string()];
        let mut spec = DriveSpec::fill("t".into(), "S", subjects, (4, 64), Duration::ZERO);
        assert_eq!(publisher_subjects(&spec, 1), ["a", "b"]);
        spec.publish.subject_per_publisher = true;
        assert_eq!(publisher_subjects(&spec, 0), ["a"]);
        assert_eq!(publisher_subjects(&spec, 3), ["b"]);
        spec.subjects.clear();
        assert!(publisher_subjects(&spec, 0).is_empty());
    }
}
