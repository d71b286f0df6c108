//! The publisher over a direct connection ([`crate::wire`]): the sending
//! thread writes its own `PUB`/`HPUB` frames and flushes them once per
//! wake-up, and the PubAck reader takes every frame one read brought, at
//! one clock reading, without a `Message` per PubAck.
//!
//! A direct connection does not reconnect: a write or read that fails
//! ends the publisher with an error naming it, and the sends it left
//! unanswered count as missing, so a lost connection is a reported
//! failure, never a silent loss. The drive therefore chooses it only where
//! no fault is planned ([`crate::profile::PublishClient`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};

use super::acks::{Reader, classify_parts};
use super::{AckReport, PublisherConfig, Shared};
use crate::connect::ConnectSettings;
use crate::record::clock;
use crate::wire::{self, Frame, frame};

/// The subscription id of the PubAck inbox on a publisher's connection.
const ACK_SID: u64 = 1;

/// Connects as `role`, subscribes `<inbox>.*` for the PubAcks and waits
/// for the server to confirm (a PING's PONG), so that a refusal is an
/// error here rather than PubAcks that never come.
pub(super) async fn connect(
    settings: &ConnectSettings,
    role: &str,
) -> Result<(wire::Reader, wire::Writer, String)> {
    static INBOXES: AtomicU64 = AtomicU64::new(0);
    let wire::Connection {
        mut reader,
        mut writer,
        ..
    } = wire::connect(settings, role).await?;
    let inbox = format!(
        "_INBOX.jsb{:x}{:x}{}",
        std::process::id(),
        clock::now_ns(),
        INBOXES.fetch_add(1, Ordering::Relaxed)
    );
    frame::put_sub(writer.buf(), format!("{inbox}.*").as_bytes(), ACK_SID);
    writer.buf().extend_from_slice(b"PING\r\n");
    writer.flush().await.context("subscribing for PubAcks")?;
    let confirmed = async {
        loop {
            match reader.next().await? {
                Frame::Pong => return Ok(()),
                Frame::Ping => {
                    writer.pong();
                    writer.flush().await?;
                }
                Frame::Err(text) => bail!("the server refused the PubAck subscription: {text}"),
                _ => {}
            }
        }
    };
    tokio::time::timeout(settings.timeout, confirmed)
        .await
        .map_err(|_| anyhow::anyhow!("no PONG within {:?}", settings.timeout))
        .and_then(|r: Result<()>| r)
        .with_context(|| format!("{role}: subscribing for PubAcks on a direct connection"))?;
    Ok((reader, writer, inbox))
}

/// Reads the PubAcks until every send is settled, the PubAck timeout passes
/// without one once the sender is done, or the connection fails (an error
/// naming it; what it left unanswered is missing). Each read's frames are
/// taken together at one clock reading: they arrived together.
pub(super) async fn read_acks(
    mut conn: wire::Reader,
    shared: Arc<Shared>,
    config: PublisherConfig,
) -> AckReport {
    let mut reader = Reader::new(&shared, &config).batched();
    let mut dropped = 0u64;
    loop {
        let finished = shared.finished.load(Ordering::Acquire);
        let settled = reader.responses() + shared.abandoned.load(Ordering::Acquire);
        if finished != u64::MAX && settled >= finished {
            break;
        }
        let filled = if finished == u64::MAX {
            tokio::select! {
                filled = conn.fill() => filled,
                _ = shared.finished_notify.notified() => continue,
            }
        } else {
            match tokio::time::timeout(config.pub_ack_timeout, conn.fill()).await {
                Ok(filled) => filled,
                Err(_) => {
                    reader.set_missing(finished.saturating_sub(settled));
                    break;
                }
            }
        };
        let taken = filled
            .and_then(|_| take_frames(&mut conn, &mut reader, &shared, &config, &mut dropped));
        // One wake for the sender per read, however many it answered.
        shared.window_open.notify_one();
        if let Err(e) = taken {
            lost(&mut reader, &shared, &config, e).await;
            break;
        }
    }
    reader.into_report()
}

/// Every whole frame the buffer holds: PubAcks taken, PINGs left for the
/// sender to answer (it owns the writing half), a `-ERR` kept as an error.
fn take_frames(
    conn: &mut wire::Reader,
    reader: &mut Reader<'_>,
    shared: &Shared,
    config: &PublisherConfig,
    dropped: &mut u64,
) -> Result<()> {
    let now = clock::now_ns();
    while let Some(frame) = conn.try_next()? {
        match frame {
            Frame::Msg(m) => {
                if *dropped < config.drop_pub_acks {
                    // A test's fault: the PubAck is lost on the way in.
                    *dropped += 1;
                    continue;
                }
                reader.take_response(m.subject, classify_parts(m.status(), m.payload), now);
            }
            Frame::Ping => shared.pong_due.store(true, Ordering::Release),
            Frame::Err(text) => reader.note_error(format!(
                "publisher {}: the server refused: {text} (-ERR on the direct connection)",
                config.index
            )),
            Frame::Pong | Frame::Ok | Frame::Info(_) => {}
        }
    }
    Ok(())
}

/// The connection failed: an error naming the publisher and the client,
/// and the sends it leaves unanswered counted missing once the sender
/// (which fails on its next write, or gives up when its window stays
/// shut for the PubAck timeout) is done.
async fn lost(
    reader: &mut Reader<'_>,
    shared: &Shared,
    config: &PublisherConfig,
    e: anyhow::Error,
) {
    reader.note_error(format!(
        "publisher {}: its direct connection failed (it does not reconnect): {e:#}",
        config.index
    ));
    let mut finished = shared.finished.load(Ordering::Acquire);
    while finished == u64::MAX {
        // notify_one keeps a permit: a finish between the load and the
        // wait is not missed.
        shared.finished_notify.notified().await;
        finished = shared.finished.load(Ordering::Acquire);
    }
    let settled = reader.responses() + shared.abandoned.load(Ordering::Acquire);
    reader.set_missing(finished.saturating_sub(settled));
}
