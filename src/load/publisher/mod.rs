//! An open-loop JetStream publisher with a window of outstanding PubAcks.
//!
//! This is the Go client's `PublishAsync` design, built on async-nats' core
//! publish: every message carries a reply subject `<inbox>.<n>`, one
//! wildcard subscription per publisher receives the PubAcks, and a reader
//! task matches them to send times by `n`. Compared with awaiting a
//! `PublishAckFuture` per message this avoids a oneshot channel, an inbox
//! string and a multiplexer entry per message, and it time-stamps each PubAck
//! the moment it arrives rather than when a busy sender gets round to it.
//!
//! Sending runs on a dedicated OS thread so that the pacer can sleep with
//! microsecond precision (see [`crate::record::schedule::Pacer`]); the PubAck reader
//! runs on the main runtime. The two share only atomics: the number of
//! responses (which opens the window) and a ring of send records.
//!
//! Each send is a new message or, when the plan injects duplicates, a retry
//! of an earlier message with the same Nats-Msg-Id, as a publisher that lost
//! a PubAck would send it: inside the stream's duplicate window (the server
//! must flag it) or after the window has passed (the server must store it
//! again). Which sends are retries is decided by a seeded hash of the send
//! number, so every run of a profile retries the same sends.
//!
//! The sending thread's loop is in `send.rs` and the messages it builds in
//! `message.rs`; `retry.rs` decides which sends repeat an earlier message
//! (injected retries and resends of overdue ones); `acks.rs` reads the
//! PubAcks. This file starts and joins the two sides and holds what they
//! share. `direct.rs` is the same publisher over a connection it speaks
//! itself ([`crate::wire`]): the sending thread writes its own frames, one
//! system call per wake-up, and the PubAck reader takes all one read
//! brought; `pub_ack.rs` reads a PubAck in place.

mod acks;
mod direct;
mod message;
mod pub_ack;
mod retry;
mod send;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use async_nats::{Client, Subscriber};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::connect::ConnectSettings;
use crate::profile::{MsgId, PublishClient, SizePlan};
use crate::record::histogram::Recorder;
use crate::record::ledger::LedgerShard;
use crate::record::schedule::{Pacer, Schedule};
use crate::record::tally::Tally;
use crate::record::timeline::Timeline;
use acks::read_acks;
pub use message::{Composer, IdBuilder, MessageBuilder, Outgoing};
use send::{Link, send_all};

#[derive(Debug, Clone)]
pub struct PublisherConfig {
    pub index: u16,
    /// Messages go round-robin (by message number) to these subjects.
    pub subjects: Vec<String>,
    /// Message *m* goes to subject (*m* / `subject_stride`) mod subjects:
    /// one for a publisher that has its stream's schedule to itself, *S*
    /// when *S* streams take turns over one schedule, so each stream's
    /// messages still visit its subjects in turn.
    pub subject_stride: u64,
    pub message_size: SizePlan,
    pub schedule: Schedule,
    /// Outstanding PubAcks allowed before the publisher waits.
    pub window: usize,
    pub msg_id: MsgId,
    /// Prefix of Nats-Msg-Id values; unique per publisher and run.
    pub msg_id_prefix: String,
    pub headers: Vec<(String, String)>,
    pub retries: RetryPlan,
    /// Seeds sizes and retry choices.
    pub seed: u64,
    /// Messages intended before this time (the warm-up) are sent and
    /// accounted for, but not recorded in histograms.
    pub record_from_ns: u64,
    pub pub_ack_timeout: Duration,
    pub timeline_origin_ns: u64,
    /// Resend a message whose PubAck has not come within this time, with
    /// the same Nats-Msg-Id (as a publisher that lost its PubAck to a
    /// server crash would); `None` never resends.
    pub resend_after: Option<Duration>,
    /// How often a paced sender wakes to send what is due; `None` by the
    /// rate (see [`crate::record::schedule::Pacer::for_schedule`]).
    pub wake_every: Option<Duration>,
    /// Which client publishes: [`PublishClient::Direct`] or
    /// [`PublishClient::AsyncNats`] (`Auto` is resolved by the drive and
    /// is taken as async-nats here).
    pub client: PublishClient,
    /// Every this many messages carries `Nats-Trace-Dest` to
    /// `<trace_prefix><sent ns>`; 0 none.
    pub trace_every: u64,
    pub trace_prefix: String,
    /// Tests only (0 in every run): PubAcks the direct reader drops as if
    /// lost on the way, so a test can see the loss reported.
    #[doc(hidden)]
    pub drop_pub_acks: u64,
}

/// Which sends retry an earlier message.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryPlan {
    /// Fraction of sends retrying a recent message inside the duplicate window.
    pub in_window: f64,
    /// Fraction of sends retrying a message whose duplicate window has passed.
    pub late: f64,
    /// The stream's duplicate window.
    pub window: Duration,
    /// How long past the window a late retry waits.
    pub late_margin: Duration,
}

/// Counters the progress display reads while the publisher runs. Each is
/// written by one task only.
#[derive(Debug, Default)]
pub struct PublisherProgress {
    pub sent: AtomicU64,
    /// PubAck responses received, successes and errors alike.
    pub responses: AtomicU64,
}

/// What the sending thread measured.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct SendReport {
    pub sent: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Sends that retried an earlier message inside its duplicate window.
    pub retries: u64,
    /// Sends that retried an earlier message after its window had passed.
    pub late_retries: u64,
    /// Message numbers retried late (each must be stored once more).
    pub late_retried: Vec<u64>,
    /// Messages sent again because their PubAck was overdue.
    pub resends: u64,
    pub first_error: Option<String>,
    /// Set when PubAcks stopped arriving and the window never reopened.
    pub stalled: Option<String>,
    pub interrupted: bool,
    /// Actual send time minus intended send time: the generator's own lag.
    pub send_lag: Recorder,
    /// CPU the sending thread used over its life (with, when they share
    /// its thread, the PubAck reader and the connection).
    #[serde(default)]
    pub thread_cpu: Duration,
    /// Time the sending thread was runnable but waiting for a CPU, from
    /// the start of its sends to its end (`None`: not kept by this
    /// kernel): beside `thread_cpu`, whether a thread that fell behind was
    /// busy or waiting to be scheduled.
    #[serde(default)]
    pub thread_waited: Option<Duration>,
    pub timeline: Timeline,
    pub first_sent_ns: u64,
    /// The last scheduled send (resends are outside the schedule).
    pub last_sent_ns: u64,
    pub last_intended_ns: u64,
    /// Scheduled sends (no resend) intended from the end of the warm-up,
    /// less [`SendReport::burst`]: what a rate counts, so neither the
    /// warm-up nor the PubAck window's first burst, nor a resend, makes a
    /// rate look faster.
    #[serde(default)]
    pub measured: u64,
    #[serde(default)]
    pub measured_bytes: u64,
    /// When the first of them was sent.
    #[serde(default)]
    pub first_measured_ns: u64,
    /// Scheduled sends intended from the end of the warm-up that were the
    /// PubAck window's first burst at max rate: with no warm-up (which
    /// would hold them), the first `window` sends, which nothing held
    /// back. In no rate (unless fewer than two sends came after them: no
    /// other pace); in CPU per message, whose span holds them.
    #[serde(default)]
    pub burst: u64,
    /// The client that published (`direct` or `async-nats`).
    #[serde(default)]
    pub client: PublishClient,
    /// Sends that carried `Nats-Trace-Dest` (`trace_every`): each should
    /// bring the servers' trace events (the drive's trace collector).
    #[serde(default)]
    pub traced: u64,
}

/// What the PubAck reader measured.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct AckReport {
    pub responses: u64,
    /// New messages stored.
    pub acked: u64,
    /// In-window retries the server flagged duplicate (as it must).
    pub duplicates: u64,
    /// Late retries the server stored again (as it must).
    pub late_stored: u64,
    /// In-window retries the server stored: dedup failed.
    pub retries_stored: u64,
    /// Late retries the server still flagged duplicate: the window outlived its setting.
    pub late_flagged: u64,
    /// New messages the server flagged duplicate: an id collision.
    pub unexpected_duplicates: u64,
    /// Resends of overdue messages the server stored: the original was lost.
    pub resent_stored: u64,
    /// Resends the server flagged duplicate: an earlier copy was stored
    /// first (its PubAck was lost, or the client held it in its reconnect
    /// buffer and sent it ahead of the resend).
    pub resent_duplicates: u64,
    /// PubAcks that came after their send had been given up and resent.
    pub late_responses: u64,
    /// Sends the server refused as unavailable (then resent).
    pub unavailable: u64,
    pub first_unavailable: Option<String>,
    /// The longest time without a PubAck while sends were outstanding, and
    /// when it ended (ns on [`crate::record::clock`]).
    pub max_gap_ns: u64,
    pub max_gap_end_ns: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    /// Of `errors`, the refusals of the stream's own limits (discard new,
    /// max_msg_size): what the stream was configured to do.
    #[serde(default)]
    pub refused_by_limit: u64,
    #[serde(default)]
    pub first_refusal: Option<String>,
    /// Sent but never answered within the PubAck timeout.
    pub missing: u64,
    /// First answers saying stored (or duplicate) to the scheduled sends
    /// intended from the end of the warm-up ([`SendReport::measured`] and
    /// [`SendReport::burst`]), and when the first and the last of them
    /// came: the acknowledged rate. A first burst's PubAcks are kept: they
    /// come at the server's pace, not the burst's.
    #[serde(default)]
    pub measured_acked: u64,
    #[serde(default)]
    pub first_measured_ack_ns: u64,
    #[serde(default)]
    pub last_measured_ack_ns: u64,
    /// PubAck latency from the intended send time.
    pub from_intended: Recorder,
    /// PubAck latency from the actual send time.
    pub from_sent: Recorder,
    pub ledger: LedgerShard,
    /// Per message number, how many times a PubAck confirmed it stored
    /// (once, or twice after a late retry): what a read-back must find.
    pub stored_by_message: Tally,
}

impl AckReport {
    /// Messages the server confirmed it stored: new ones, and retries it
    /// stored again.
    pub fn stored(&self) -> u64 {
        self.acked + self.late_stored + self.retries_stored
    }
}

/// What a send was, recorded for the PubAck reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum SendKind {
    New = 0,
    Retry = 1,
    LateRetry = 2,
    /// Sent again because its PubAck was overdue.
    Resend = 3,
}

#[derive(Default)]
struct Slot {
    send: AtomicU64,
    /// Set by the first of: its PubAck arriving, or the sender giving up
    /// on it to resend. Whoever sets it first owns the outcome.
    answered: AtomicBool,
    /// The server answered "unavailable": resend soon rather than wait.
    unavailable: AtomicBool,
    kind: AtomicU8,
    /// The message number the send carried (differs from `send` for retries).
    message: AtomicU64,
    intended: AtomicU64,
    sent: AtomicU64,
}

#[derive(Default)]
struct Shared {
    slots: Box<[Slot]>,
    mask: u64,
    progress: Arc<PublisherProgress>,
    /// Reader to sender: a response arrived, the window may be open.
    window_open: Notify,
    /// Messages intended before this are not recorded; set by `go`.
    record_from_ns: AtomicU64,
    /// Sends the sender gave up on (and resent); with `responses`, what the
    /// reader waits for.
    abandoned: AtomicU64,
    /// Messages sent, once the sender is done; `u64::MAX` until then.
    finished: AtomicU64,
    finished_notify: Notify,
    /// Direct reader to sender: the server sent a PING, which the sender
    /// (it owns the writing half) answers on its next pass.
    pong_due: AtomicBool,
}

impl Shared {
    fn slot(&self, send: u64) -> &Slot {
        &self.slots[(send & self.mask) as usize]
    }
}

/// A running publisher: its sending thread and its PubAck reader.
pub struct Publisher {
    /// `None` from the thread when it never started sending.
    thread: std::thread::JoinHandle<Option<(SendReport, Option<AckReport>, Link)>>,
    /// The reader, when it runs on the main runtime.
    reader: Option<tokio::task::JoinHandle<AckReport>>,
    /// Starts the schedule; taken by `go`.
    go: Option<tokio::sync::oneshot::Sender<Timing>>,
    shared: Arc<Shared>,
    pub progress: Arc<PublisherProgress>,
}

/// When a started publisher's schedule runs, decided once every publisher
/// is connected so that slow connects never eat into the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub t0_ns: u64,
    pub record_from_ns: u64,
    /// End of an unpaced run (ignored for paced runs and fills).
    pub end_ns: u64,
}

/// Where a publisher's connection and PubAck reader run relative to its
/// sending thread. Each cross-thread wake-up costs tens of microseconds on
/// the machines measured, so a publisher that only ever waits for PubAcks
/// keeps them on its own thread; one that sleeps with PubAcks outstanding
/// cannot, or they would be time-stamped late.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placement {
    /// Paced with a window: connection and reader on the main runtime, so
    /// PubAcks are read while the sender sleeps.
    Apart,
    /// Unpaced: the reader on the sender's thread, the connection's socket
    /// I/O on the main runtime, in parallel with sending.
    ReaderOnThread,
    /// Sync: connection, reader and sender on one thread, as the shortest
    /// loop would have them; apart, sync throughput measured 20-27% lower.
    AllOnThread,
}

impl Placement {
    fn of(config: &PublisherConfig) -> Placement {
        if config.window == 1 {
            Placement::AllOnThread
        } else if config.schedule.total_rate.is_none() && config.client != PublishClient::Direct {
            // A direct sender never yields while its window is open, so a
            // reader on its thread would time-stamp PubAcks late: apart.
            Placement::ReaderOnThread
        } else {
            Placement::Apart
        }
    }
}

/// Subscribes for this publisher's PubAcks: `<inbox>.*`.
pub(crate) async fn subscribe_acks(client: &Client) -> Result<(String, Subscriber)> {
    let inbox = client.new_inbox();
    let subscription = client
        .subscribe(format!("{inbox}.*"))
        .await
        .context("subscribing for PubAcks")?;
    // Make sure the server knows the subscription before the first publish
    // asks it to reply there.
    client
        .flush()
        .await
        .context("flushing the PubAck subscription")?;
    Ok((inbox, subscription))
}

/// Where a publisher's PubAcks come from, before its reader starts.
enum Acks {
    Nats(Subscriber),
    Direct(crate::wire::Reader),
}

impl Acks {
    async fn read(self, shared: Arc<Shared>, config: PublisherConfig) -> AckReport {
        match self {
            Acks::Nats(subscription) => read_acks(subscription, shared, config).await,
            Acks::Direct(reader) => direct::read_acks(reader, shared, config).await,
        }
    }
}

/// Connects as `role` through the chosen client and subscribes for
/// PubAcks: the link to send on (with the PubAck inbox) and the PubAcks'
/// source. Called on the runtime that will drive the connection.
async fn connect_link(
    connect: &ConnectSettings,
    role: &str,
    direct: bool,
) -> Result<((Link, String), Acks)> {
    if direct {
        let (reader, writer, inbox) = direct::connect(connect, role).await?;
        return Ok(((Link::Direct(writer), inbox), Acks::Direct(reader)));
    }
    let client = connect.connect(role).await?;
    let (inbox, subscription) = subscribe_acks(&client).await?;
    Ok(((Link::Nats(client), inbox), Acks::Nats(subscription)))
}

/// The connection made before the thread starts, on the publish runtime
/// (whose threads then drive its socket while the sender sleeps), and the
/// PubAck reader started there when the placement keeps it apart;
/// otherwise the PubAcks' source, for the thread to read.
async fn connect_apart(
    connect: &ConnectSettings,
    role: &str,
    direct: bool,
    placement: Placement,
    shared: &Arc<Shared>,
    config: &PublisherConfig,
    reader: &mut Option<tokio::task::JoinHandle<AckReport>>,
) -> Result<((Link, String), Option<Acks>)> {
    let runtime = crate::system::runtimes::publish();
    let (link, acks) = if direct {
        let (connect, role) = (connect.clone(), role.to_string());
        runtime
            .spawn(async move { connect_link(&connect, &role, true).await })
            .await
            .context("connecting a publisher")??
    } else {
        let client = connect.connect_on(runtime, role).await?;
        let (inbox, subscription) = subscribe_acks(&client).await?;
        ((Link::Nats(client), inbox), Acks::Nats(subscription))
    };
    if placement == Placement::Apart {
        *reader = Some(runtime.spawn(acks.read(shared.clone(), config.clone())));
        return Ok((link, None));
    }
    Ok((link, Some(acks)))
}

impl Publisher {
    /// Connects (as `role`), subscribes for PubAcks and starts sending on
    /// the schedule.
    pub async fn start(
        connect: &ConnectSettings,
        role: &str,
        config: PublisherConfig,
        stop: CancellationToken,
    ) -> Result<Publisher> {
        let placement = Placement::of(&config);
        // Resending needs every send of the last `resend_after` still in
        // the ring, so its answer can be told from a late one.
        let in_resend_span = match (config.resend_after, config.schedule.total_rate) {
            (Some(after), Some(rate)) => {
                (after.as_secs_f64() * rate as f64 / config.schedule.stride as f64) as usize
            }
            _ => 0,
        };
        let slots = (2 * (config.window + in_resend_span))
            .clamp(2, 1 << 22)
            .next_power_of_two();
        let progress = Arc::new(PublisherProgress::default());
        let shared = Arc::new(Shared {
            // A slot never sent counts as answered; its kind is `New` (0).
            slots: (0..slots)
                .map(|_| Slot {
                    send: AtomicU64::new(u64::MAX),
                    answered: AtomicBool::new(true),
                    ..Slot::default()
                })
                .collect(),
            mask: slots as u64 - 1,
            progress: progress.clone(),
            record_from_ns: AtomicU64::new(u64::MAX),
            finished: AtomicU64::new(u64::MAX),
            ..Shared::default()
        });

        // Connect here unless the connection belongs on the thread.
        let direct = config.client == PublishClient::Direct;
        let mut ready = None;
        let mut reader = None;
        if placement != Placement::AllOnThread {
            let (link, local) = connect_apart(
                connect,
                role,
                direct,
                placement,
                &shared,
                &config,
                &mut reader,
            )
            .await?;
            ready = Some((link, local));
        }

        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Result<()>>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<Timing>();
        let thread_shared = shared.clone();
        let (connect, role) = (connect.clone(), role.to_string());
        let thread = std::thread::Builder::new()
            .name(format!("jsb-pub-{}", config.index))
            .spawn(move || {
                Pacer::tighten_timer_slack();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a current-thread runtime builds");
                let shared = thread_shared;
                runtime.block_on(async move {
                    let ((link, inbox), local) = match ready {
                        Some(ready) => ready,
                        None => match connect_link(&connect, &role, direct).await {
                            Ok((link, local)) => (link, Some(local)),
                            Err(e) => {
                                let _ = started_tx.send(Err(e));
                                return None;
                            }
                        },
                    };
                    let _ = started_tx.send(Ok(()));
                    let Ok(timing) = go_rx.await else {
                        return None;
                    };
                    let waited_before = crate::system::cpu::this_thread_waited();
                    let mut config = config;
                    config.schedule.t0_ns = timing.t0_ns;
                    if config.schedule.total_rate.is_none() && config.schedule.total_messages == 0 {
                        config.schedule.end_ns = timing.end_ns;
                    }
                    config.record_from_ns = timing.record_from_ns;
                    config.timeline_origin_ns = timing.t0_ns;
                    let reader =
                        local.map(|acks| tokio::spawn(acks.read(shared.clone(), config.clone())));
                    let (sends, link) = send_all(link, config, inbox, shared, stop).await;
                    let acks = match reader {
                        Some(reader) => reader.await.ok(),
                        None => None,
                    };
                    let waited = crate::system::cpu::this_thread_waited()
                        .zip(waited_before)
                        .map(|(after, before)| after.saturating_sub(before));
                    let sends = SendReport {
                        thread_cpu: crate::system::cpu::this_thread_cpu(),
                        thread_waited: waited,
                        ..sends
                    };
                    Some((sends, acks, link))
                })
            })
            .context("starting a publisher thread")?;
        match started_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => return Err(anyhow!("a publisher thread ended before it started")),
        }
        Ok(Publisher {
            thread,
            reader,
            go: Some(go_tx),
            shared,
            progress,
        })
    }

    /// Starts the schedule at `timing`.
    pub fn go(&mut self, timing: Timing) {
        self.shared
            .record_from_ns
            .store(timing.record_from_ns, Ordering::Release);
        if let Some(go) = self.go.take() {
            let _ = go.send(timing);
        }
    }

    /// Waits for the schedule to end and the last PubAck (or its timeout).
    /// A publisher finished without [`Publisher::go`] (its variant failed
    /// first) ends at once: its thread sees the start dropped.
    pub async fn finish(self) -> Result<(SendReport, AckReport)> {
        let Publisher {
            thread, reader, go, ..
        } = self;
        drop(go);
        let (sends, local_acks, link) = tokio::task::spawn_blocking(move || thread.join())
            .await
            .context("joining a publisher thread")?
            .map_err(|_| anyhow!("a publisher thread panicked"))?
            .ok_or_else(|| anyhow!("a publisher thread never started"))?;
        let acks = match (reader, local_acks) {
            (Some(reader), _) => reader.await.context("joining a PubAck reader")?,
            (None, Some(acks)) => acks,
            (None, None) => return Err(anyhow!("a PubAck reader panicked")),
        };
        // Closed only now: every PubAck has been read.
        drop(link);
        Ok((sends, acks))
    }
}
