//! A worker's results, pulled chunk by chunk once its share has stopped.
//!
//! Apart from leading the drive because it is a protocol of its own
//! (results bigger than one message, a worker still assembling them, one
//! that goes silent meanwhile) whose every way of ending the coordinator
//! must tell apart: a worker that failed keeps its place in the run, a
//! lost one is dropped from it.

use std::time::{Duration, Instant};

use async_nats::Client;

use super::{COMMAND_TIMEOUT, Heard, ask};
use crate::worker::auth::Link;
use crate::worker::protocol::{self, Command, PartReport};

/// How long a worker may take to assemble its results after a stop.
const COLLECT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a worker's results did not arrive, and what it means for the
/// worker: failed (it stays in the run) or lost (it is gone).
pub(super) enum Fetched {
    Failed(String),
    Lost(String),
}

/// Pulls a worker's results chunk by chunk; a worker still assembling
/// them answers "not ready", a gone one stops answering.
pub(super) async fn fetch(
    client: &Client,
    link: &Link,
    subject: &str,
    drive: u64,
    (heard, id): (&Heard, &str),
    silence: Duration,
) -> Result<PartReport, Fetched> {
    let started = Instant::now();
    let mut bytes = Vec::new();
    let mut chunk = 0u32;
    let mut expected = 0u32;
    loop {
        let silent = heard
            .lock()
            .expect("not poisoned")
            .get(id)
            .map_or(Duration::MAX, |(at, _)| at.elapsed());
        if silent > silence {
            return Err(Fetched::Lost(format!(
                "went silent before its results arrived (for more than {})",
                crate::profile::format_duration(silence)
            )));
        }
        if started.elapsed() > COLLECT_TIMEOUT {
            return Err(Fetched::Failed(format!(
                "results not complete after {}",
                crate::profile::format_duration(COLLECT_TIMEOUT)
            )));
        }
        let fetch = Command::Fetch { drive, chunk };
        let Ok((seq, reply)) = ask(client, link, subject, &fetch, COMMAND_TIMEOUT).await else {
            return Err(Fetched::Failed("a fetch could not be sealed".into()));
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => {
                return Err(Fetched::Lost(
                    "its connection is gone (no responders on its subject)".into(),
                ));
            }
            Err(_) => continue,
        };
        // Only a chunk sealed in answer to this very fetch counts.
        let payload = match link.key.open_chunk(&link.run, seq, &reply.payload) {
            Ok(p) => p,
            Err(e) => return Err(Fetched::Failed(format!("{e:#}"))),
        };
        match payload.first() {
            Some(&protocol::chunk::NOT_READY) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some(&protocol::chunk::ERROR) => {
                let text = &payload[1..payload.len().min(protocol::MAX_ERROR_TEXT)];
                return Err(Fetched::Failed(String::from_utf8_lossy(text).into_owned()));
            }
            _ => {
                let Some((total, index, data)) = protocol::chunk::parse(payload) else {
                    return Err(Fetched::Failed("sent a malformed results chunk".into()));
                };
                if let Some(e) = protocol::chunk::check(total, index, chunk, data, bytes.len()) {
                    return Err(Fetched::Failed(e));
                }
                if chunk == 0 {
                    expected = total;
                } else if total != expected {
                    return Err(Fetched::Failed(format!(
                        "changed its chunk count from {expected} to {total}"
                    )));
                }
                bytes.extend_from_slice(data);
                chunk += 1;
                if chunk >= total {
                    return protocol::unpack(&bytes).map_err(|e| Fetched::Failed(format!("{e:#}")));
                }
            }
        }
    }
}
