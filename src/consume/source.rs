//! Where deliveries come from: a continuous `consume` stream, repeated
//! fetches of a batch, or a push consumer's deliver subject. All yield the
//! same messages to the consumer loop.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::{PullConsumer, PushConsumer, pull, push};
use futures::StreamExt;

use crate::profile::{ConsumerKind, ConsumerPlan, PullTuning};

pub enum Source {
    Consume {
        consumer: Box<PullConsumer>,
        batch: usize,
        pull: PullTuning,
        /// `None` after an error, until the next read re-opens it.
        stream: Option<Box<pull::Stream>>,
    },
    Fetch {
        consumer: Box<PullConsumer>,
        batch: usize,
        pull: PullTuning,
        current: Option<Box<pull::Batch>>,
    },
    Push {
        messages: Box<push::Messages>,
    },
}

/// A read that failed, which the consumer loop counts and survives (the
/// source starts afresh on its next read): which read, and why.
#[derive(Debug)]
pub struct ReadError {
    /// `consume`, `fetch` or `push`.
    read: &'static str,
    why: String,
}

impl ReadError {
    fn new(read: &'static str, why: impl std::fmt::Display) -> ReadError {
        ReadError {
            read,
            why: why.to_string(),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.read, self.why)
    }
}

impl std::error::Error for ReadError {}

/// How long one pull request may wait on the server. A fetch without an
/// expiry ends silently after 5 s (NOTES-async-nats.md); a consume request
/// is re-issued by the client before it expires.
pub(super) const PULL_EXPIRES: Duration = Duration::from_secs(10);
const FETCH_EXPIRES: Duration = Duration::from_millis(500);
/// Idle heartbeats on consume: two missed ones (2 s) say the pull request
/// is gone (its server died, a new consumer leader took over).
pub(super) const HEARTBEAT: Duration = Duration::from_secs(1);

async fn consume(
    consumer: &PullConsumer,
    batch: usize,
    pull: PullTuning,
) -> Result<Box<pull::Stream>> {
    let mut builder = consumer
        .stream()
        .max_messages_per_batch(batch)
        .heartbeat(pull.idle_heartbeat.unwrap_or(HEARTBEAT))
        .expires(pull.expires.unwrap_or(PULL_EXPIRES));
    if let Some(bytes) = pull.max_bytes {
        builder = builder.max_bytes_per_batch(bytes);
    }
    Ok(Box::new(
        builder.messages().await.context("starting to consume")?,
    ))
}

impl Source {
    /// Binds to the durable `durable` of `stream` as its plan's kind says:
    /// pull requests of its `batch` messages with the profile's pull tuning
    /// (max_bytes, expires, idle heartbeat) over jsbench's defaults, or a
    /// subscription to a push durable's deliver subject (its queue group,
    /// when it has one).
    pub async fn open(
        js: &async_nats::jetstream::Context,
        stream: &str,
        durable: &str,
        plan: &ConsumerPlan,
    ) -> Result<Source> {
        let (batch, pull) = (plan.batch, plan.pull);
        let bind_pull = || async {
            js.get_consumer_from_stream::<pull::Config, _, _>(durable, stream)
                .await
                .with_context(|| format!("binding to durable consumer {durable}"))
        };
        Ok(match plan.kind {
            ConsumerKind::Push => {
                let consumer: PushConsumer = js
                    .get_consumer_from_stream(durable, stream)
                    .await
                    .with_context(|| format!("binding to push consumer {durable}"))?;
                let messages = consumer
                    .messages()
                    .await
                    .with_context(|| format!("subscribing to push consumer {durable}"))?;
                Source::Push {
                    messages: Box::new(messages),
                }
            }
            ConsumerKind::Pull => {
                let consumer = bind_pull().await?;
                Source::Consume {
                    stream: Some(consume(&consumer, batch, pull).await?),
                    consumer: Box::new(consumer),
                    batch,
                    pull,
                }
            }
            ConsumerKind::Fetch => Source::Fetch {
                consumer: Box::new(bind_pull().await?),
                batch,
                pull,
                current: None,
            },
        })
    }

    /// The next delivery; `Err` for a problem the loop reports and survives
    /// (a missed heartbeat, a failed pull), `None` when the source is closed.
    pub async fn next(&mut self) -> Option<Result<Message, ReadError>> {
        match self {
            Source::Consume {
                consumer,
                batch,
                pull,
                stream,
            } => {
                // After an error the pull requests in flight may be gone with
                // a server: start a fresh consume rather than wait for them
                // to expire (async-nats reports the missed heartbeats but
                // keeps waiting).
                let messages = match stream {
                    Some(messages) => messages,
                    None => match consume(consumer, *batch, *pull).await {
                        Ok(messages) => stream.insert(messages),
                        Err(e) => {
                            tokio::time::sleep(pull.idle_heartbeat.unwrap_or(HEARTBEAT)).await;
                            return Some(Err(ReadError::new("consume", format!("{e:#}"))));
                        }
                    },
                };
                match messages.next().await {
                    Some(Ok(message)) => Some(Ok(message)),
                    Some(Err(e)) => {
                        *stream = None;
                        Some(Err(ReadError::new("consume", e)))
                    }
                    None => None,
                }
            }
            Source::Fetch {
                consumer,
                batch,
                pull,
                current,
            } => loop {
                if let Some(messages) = current {
                    match messages.next().await {
                        Some(r) => return Some(r.map_err(|e| ReadError::new("fetch", e))),
                        None => *current = None,
                    }
                }
                let mut request = consumer
                    .batch()
                    .max_messages(*batch)
                    .expires(pull.expires.unwrap_or(FETCH_EXPIRES));
                if let Some(bytes) = pull.max_bytes {
                    request = request.max_bytes(bytes);
                }
                match request.messages().await {
                    Ok(messages) => *current = Some(Box::new(messages)),
                    Err(e) => return Some(Err(ReadError::new("fetch", e))),
                }
            },
            // The subscription outlives a missed heartbeat: it is reported
            // and reading goes on.
            Source::Push { messages } => messages
                .next()
                .await
                .map(|r| r.map_err(|e| ReadError::new("push", e))),
        }
    }
}
