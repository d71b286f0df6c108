//! A pinned-client consumer's pins as the server announces them (ADR-42):
//! the PINNED and UNPINNED advisories, watched from before any load, and
//! the unpin API that releases the pin by hand.

use anyhow::{Context, Result, bail};
use async_nats::Client;
use futures::StreamExt;
use serde::Deserialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::record::clock;

/// What an advisory said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinChange {
    /// A client was pinned with this id.
    Pinned { id: String },
    /// The pin was released: `timeout` (the pinned client stopped pulling
    /// for priority_timeout) or `admin` (the unpin API).
    Unpinned { reason: String },
}

/// One advisory, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinEvent {
    pub received_ns: u64,
    pub change: PinChange,
}

#[derive(Deserialize)]
struct Wire {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    pinned_id: String,
    #[serde(default)]
    reason: String,
}

/// Reads one advisory; `None` for one of another type.
pub fn parse(received_ns: u64, payload: &[u8]) -> Option<PinEvent> {
    let w: Wire = serde_json::from_slice(payload).ok()?;
    let change = match w.kind.as_str() {
        "io.nats.jetstream.advisory.v1.consumer_group_pinned" => {
            PinChange::Pinned { id: w.pinned_id }
        }
        "io.nats.jetstream.advisory.v1.consumer_group_unpinned" => {
            PinChange::Unpinned { reason: w.reason }
        }
        _ => return None,
    };
    Some(PinEvent {
        received_ns,
        change,
    })
}

/// The watch on one consumer's pin advisories.
pub struct PinWatch {
    stop: CancellationToken,
    task: JoinHandle<Vec<PinEvent>>,
}

impl PinWatch {
    /// Subscribes before returning, so no advisory after it is missed.
    pub async fn start(client: &Client, stream: &str, consumer: &str) -> Result<PinWatch> {
        let mut subs = Vec::new();
        for kind in ["PINNED", "UNPINNED"] {
            subs.push(
                client
                    .subscribe(format!(
                        "$JS.EVENT.ADVISORY.CONSUMER.{kind}.{stream}.{consumer}"
                    ))
                    .await
                    .context("subscribing to pin advisories")?,
            );
        }
        client.flush().await.context("flushing pin advisories")?;
        let stop = CancellationToken::new();
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let mut all = futures::stream::select_all(subs);
            let mut events = Vec::new();
            let collect = async {
                while let Some(m) = all.next().await {
                    events.extend(parse(clock::now_ns(), &m.payload));
                }
            };
            until.run_until_cancelled(collect).await;
            events
        });
        Ok(PinWatch { stop, task })
    }

    /// The advisories seen, in order of arrival.
    pub async fn finish(self) -> Result<Vec<PinEvent>> {
        self.stop.cancel();
        self.task.await.context("joining the pin watch")
    }
}

#[derive(Deserialize)]
struct UnpinResponse {
    error: Option<serde_json::Value>,
}

/// Releases `group`'s pin through `<api>.CONSUMER.UNPIN.<stream>.<consumer>`.
pub async fn unpin(
    client: &Client,
    api_prefix: &str,
    stream: &str,
    consumer: &str,
    group: &str,
) -> Result<()> {
    let subject = format!("{api_prefix}.CONSUMER.UNPIN.{stream}.{consumer}");
    let body = serde_json::json!({ "group": group }).to_string();
    let reply = client
        .request(subject, body.into())
        .await
        .context("asking the server to unpin")?;
    let r: UnpinResponse =
        serde_json::from_slice(&reply.payload).context("reading the unpin response")?;
    if let Some(e) = r.error {
        bail!("the server refused to unpin group {group}: {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_and_unpinned_advisories_are_read_and_others_are_not() {
        let p = br#"{"type":"io.nats.jetstream.advisory.v1.consumer_group_pinned","group":"g","pinned_id":"ABC"}"#;
        assert_eq!(
            parse(5, p).unwrap().change,
            PinChange::Pinned { id: "ABC".into() }
        );
        let u = br#"{"type":"io.nats.jetstream.advisory.v1.consumer_group_unpinned","group":"g","reason":"admin"}"#;
        assert_eq!(
            parse(6, u).unwrap(),
            PinEvent {
                received_ns: 6,
                change: PinChange::Unpinned {
                    reason: "admin".into()
                }
            }
        );
        assert_eq!(parse(7, br#"{"type":"other"}"#), None);
        assert_eq!(parse(7, b"not json"), None);
    }
}
