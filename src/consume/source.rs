//! Where deliveries come from: a continuous `consume` stream, or repeated
//! fetches of a batch. Both yield the same messages to the consumer loop.

use std::time::Duration;

use anyhow::{Context, Result};
use async_nats::jetstream::Message;
use async_nats::jetstream::consumer::{PullConsumer, pull};
use futures::StreamExt;

use crate::profile::ConsumerKind;

pub enum Source {
    Consume(Box<pull::Stream>),
    Fetch {
        consumer: Box<PullConsumer>,
        batch: usize,
        current: Option<Box<pull::Batch>>,
    },
}

/// How long one pull request may wait on the server. A fetch without an
/// expiry ends silently after 5 s (NOTES-async-nats.md); a long-lived
/// consume request is re-issued by the client before it expires.
const PULL_EXPIRES: Duration = Duration::from_secs(30);
const FETCH_EXPIRES: Duration = Duration::from_millis(500);

impl Source {
    pub async fn open(consumer: PullConsumer, kind: ConsumerKind, batch: usize) -> Result<Source> {
        Ok(match kind {
            ConsumerKind::Pull => Source::Consume(Box::new(
                consumer
                    .stream()
                    .max_messages_per_batch(batch)
                    .heartbeat(Duration::from_secs(5))
                    .expires(PULL_EXPIRES)
                    .messages()
                    .await
                    .context("starting to consume")?,
            )),
            ConsumerKind::Fetch => Source::Fetch {
                consumer: Box::new(consumer),
                batch,
                current: None,
            },
        })
    }

    /// The next delivery; `Err` for a problem the loop reports and survives
    /// (a missed heartbeat, a failed pull), `None` when the source is closed.
    pub async fn next(&mut self) -> Option<Result<Message, String>> {
        match self {
            Source::Consume(stream) => stream
                .next()
                .await
                .map(|r| r.map_err(|e| format!("consume: {e}"))),
            Source::Fetch {
                consumer,
                batch,
                current,
            } => loop {
                if let Some(messages) = current {
                    match messages.next().await {
                        Some(r) => return Some(r.map_err(|e| format!("fetch: {e}"))),
                        None => *current = None,
                    }
                }
                match consumer
                    .batch()
                    .max_messages(*batch)
                    .expires(FETCH_EXPIRES)
                    .messages()
                    .await
                {
                    Ok(messages) => *current = Some(Box::new(messages)),
                    Err(e) => return Some(Err(format!("fetch: {e}"))),
                }
            },
        }
    }
}
