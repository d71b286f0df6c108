//! Phase 1, connect: every client of this process's share is connected
//! before anything is timed, so a slow connect never eats into the
//! schedule; the CPU meters start just before the publishers connect.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::StreamExt;
use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::launch::Launcher;
use super::{DriveSpec, RunContext, Share};
use crate::consume;
use crate::load::{Publisher, PublisherConfig, RetryPlan};
use crate::profile::late_retry_margin;
use crate::record::schedule::Schedule;
use crate::system::cpu::{self, CpuMeter};

/// This process's clients, connected and not started.
pub(super) struct Connected {
    pub consumer_clients: Vec<async_nats::Client>,
    /// Each consumer client bound to its durable already, with how long
    /// binding them all took: a load whose readers share connections.
    pub bound: Option<(Vec<consume::Bound>, Duration)>,
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
    let (consumer_clients, bound) = match spec.shared_connections {
        None => {
            let clients = join_all(share.consumers.iter().map(|i| async move {
                settings
                    .connect_on(crate::system::runtimes::consume(), &format!("consumer-{i}"))
                    .await
            }))
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
            (clients, None)
        }
        Some(connections) => {
            let (clients, bound) = bind_shared(ctx, spec, share, connections).await?;
            (clients, Some(bound))
        }
    };

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
            subject_stride: spec.streams.len().max(1) as u64,
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
        bound,
        publishers,
        publish_stop,
        meters,
        messages,
    })
}

/// Durables bound at once: more only queue at the server's API.
const BIND_AT_ONCE: usize = 32;
/// How long binding every durable may take.
const BIND_TIMEOUT: Duration = Duration::from_secs(120);

/// The connections the readers' clients share, round-robin, and every
/// client bound to its durable before anything is timed: binding a
/// thousand takes the server seconds.
async fn bind_shared(
    ctx: &RunContext,
    spec: &DriveSpec,
    share: &Share,
    connections: usize,
) -> Result<(Vec<async_nats::Client>, (Vec<consume::Bound>, Duration))> {
    // Many durables share each connection here: async-nats' job.
    if spec
        .readers
        .iter()
        .any(|r| r.consumer.plan.client == crate::profile::ConsumerClient::Direct)
    {
        anyhow::bail!(
            "scenario.consumer.client = \"direct\" cannot apply to {}: its durables share \
             connections, which the direct client does not",
            spec.label
        );
    }
    let connections = connections.min(share.consumers.len()).max(1);
    let shared = join_all((0..connections).map(|i| async move {
        ctx.connect
            .connect_on(crate::system::runtimes::consume(), &format!("shared-{i}"))
            .await
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let clients: Vec<_> = (0..share.consumers.len())
        .map(|k| shared[k % connections].clone())
        .collect();
    let launcher = Launcher::new(ctx, spec, (0, 0), 0, CancellationToken::new());
    let configs: Vec<_> = share
        .consumers
        .iter()
        .map(|&i| launcher.config(spec.reader_of(i), i, None))
        .collect();
    let binding = Instant::now();
    let binds: Vec<_> = (configs.iter().zip(&clients))
        .map(|(config, client)| {
            let (config, client) = (config.clone(), client.clone());
            async move { consume::bind(&client, &config).await }
        })
        .collect();
    let bound = futures::stream::iter(binds)
        .buffered(BIND_AT_ONCE)
        .collect::<Vec<_>>();
    let bound = tokio::time::timeout(BIND_TIMEOUT, bound)
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "binding {} durables took longer than {} s",
                configs.len(),
                BIND_TIMEOUT.as_secs()
            )
        })?
        .into_iter()
        .collect::<Result<Vec<_>>>()?;
    Ok((clients, (bound, binding.elapsed())))
}

/// The subjects publisher `i` sends to, round-robin: its stream's
/// (publisher *i* feeds stream *i* mod *S*).
fn publisher_subjects(spec: &DriveSpec, i: usize) -> Vec<String> {
    let streams = spec.streams.len().max(1);
    spec.streams
        .get(i % streams)
        .map(|s| s.subjects.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::publisher_subjects;
    use crate::drive::{DriveSpec, StreamLoad};
    use std::time::Duration;

    #[test]
    fn a_publisher_feeds_every_subject_of_its_stream() {
        let subjects = vec!["a".to_string(), "b".to_string()];
        let mut spec = DriveSpec::fill("t".into(), "S", subjects, (4, 64), Duration::ZERO);
        assert_eq!(publisher_subjects(&spec, 1), ["a", "b"]);
        spec.streams.push(StreamLoad::new("T", vec!["c".into()]));
        assert_eq!(publisher_subjects(&spec, 0), ["a", "b"]);
        assert_eq!(publisher_subjects(&spec, 3), ["c"]);
        spec.streams.truncate(1);
        spec.streams[0].subjects.clear();
        assert!(publisher_subjects(&spec, 0).is_empty());
    }
}
