//! The sending thread's loop: paces sends on the schedule, holds them while
//! the window is full, and records each one in the ring for the PubAck reader.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_nats::{Client, Subject};
use tokio_util::sync::CancellationToken;

use super::message::{Composer, Outgoing};
use super::retry::{RetryChooser, scan_overdue};
use super::{PublisherConfig, SendKind, SendReport, Shared};
use crate::load::sizes::message_size;
use crate::profile::{MsgId, PublishClient};
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::schedule::Pacer;
use crate::record::timeline::Timeline;
use crate::wire;

/// What a publisher sends through.
pub(super) enum Link {
    /// async-nats: each publish goes through its channel to the
    /// connection's task, which wakes to write it.
    Nats(Client),
    /// The sending thread's own frames, flushed once per wake-up.
    Direct(wire::Writer),
}

/// A direct sender flushes before this much is buffered, whatever the
/// schedule: an unpaced loop's writes are this size.
const FLUSH_AT: usize = 32 * 1024;

/// Why a send loop stopped early.
enum Halt {
    Interrupted,
    Failed(String),
}

/// Sends the schedule and reports; the link comes back so that it is
/// dropped only once the PubAcks are read (a direct connection closed
/// early would have the server discard PubAcks still on their way).
pub(super) async fn send_all(
    mut link: Link,
    config: PublisherConfig,
    inbox: String,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> (SendReport, Link) {
    let schedule = config.schedule.clone();
    let pacer = Pacer::for_schedule(schedule.interval(), config.wake_every, schedule.t0_ns);
    let subjects: Vec<Subject> = config
        .subjects
        .iter()
        .map(|s| Subject::from(s.as_str()))
        .collect();
    let mut chooser = RetryChooser::new(config.retries, config.seed, config.index);
    let mut report = SendReport {
        send_lag: Recorder::new(),
        timeline: Timeline::per_second(config.timeline_origin_ns),
        client: match link {
            Link::Nats(_) => PublishClient::AsyncNats,
            Link::Direct(_) => PublishClient::Direct,
        },
        ..SendReport::default()
    };

    let mut composer = match Composer::new(
        &inbox,
        (config.msg_id == MsgId::Unique).then_some(config.msg_id_prefix.as_str()),
        &config.headers,
        config.index,
        config.record_from_ns,
        Recorder::with_intervals(),
    ) {
        Ok(mut composer) => {
            composer.trace(config.trace_every, &config.trace_prefix);
            composer
        }
        Err(e) => {
            report.first_error = Some(format!("building messages: {e:#}"));
            let report = finish(&mut link, &shared, report, &config, &stop).await;
            return (report, link);
        }
    };

    let count = schedule.count();
    let resend_after = config.resend_after.map(|d| d.as_nanos() as u64);
    let mut j = 0u64; // schedule position: the message number of new messages
    let mut k = 0u64; // send number: slot and reply token
    // (message, its first intended send): a resend keeps the original's
    // intended time, so its latency includes the outage it waited out.
    let mut resends: VecDeque<(u64, u64)> = VecDeque::new();
    let mut oldest = 0u64;
    let mut abandoned = 0u64;
    let mut schedule_done = false;
    // Every sender starts at t0, paced or not: one that started at `go`
    // would send through the lead-in, which no span counts.
    pacer.wait_until(schedule.t0_ns);
    let mut progress_at = (clock::now_ns(), 0u64);
    let mut rates = RateCount::new(&config);
    'sending: loop {
        if stop.is_cancelled() {
            report.interrupted = true;
            break;
        }
        if let Link::Direct(writer) = &mut link
            && shared.pong_due.swap(false, Ordering::AcqRel)
        {
            writer.pong();
        }
        if let Some(after) = resend_after {
            scan_overdue(&shared, &mut oldest, k, after, &mut resends, &mut abandoned);
        }
        schedule_done |= j >= count;
        if schedule_done && resends.is_empty() {
            // Everything scheduled is sent; without resends that is the end,
            // with them, every send must first be answered or resent.
            let responses = shared.progress.responses.load(Ordering::Acquire);
            if resend_after.is_none() || responses + abandoned >= k {
                break;
            }
            if let Some(stall) = note_progress(
                &mut progress_at,
                responses,
                config.pub_ack_timeout,
                k - responses - abandoned,
            ) {
                report.stalled = Some(stall);
                break;
            }
            if let Err(halt) = flush(&mut link, &config, &stop).await {
                halt.into_report(&mut report);
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }

        // Wait for room in the window, giving up on overdue sends meanwhile.
        loop {
            let responses = shared.progress.responses.load(Ordering::Acquire);
            let outstanding = k.saturating_sub(responses + abandoned);
            if outstanding < config.window as u64 {
                break;
            }
            // What is buffered must go before PubAcks can come back.
            if let Err(halt) = flush(&mut link, &config, &stop).await {
                halt.into_report(&mut report);
                break 'sending;
            }
            if let Some(stall) = note_progress(
                &mut progress_at,
                responses,
                config.pub_ack_timeout,
                outstanding,
            ) {
                report.stalled = Some(stall);
                break 'sending;
            }
            let wait = resend_after.map_or(config.pub_ack_timeout, |a| {
                Duration::from_nanos(a / 4).max(Duration::from_millis(1))
            });
            // notify_one stores a permit when nobody waits, so a response
            // that lands between the load above and this wait is not missed.
            if tokio::time::timeout(wait, shared.window_open.notified())
                .await
                .is_err()
                && let Some(after) = resend_after
            {
                scan_overdue(&shared, &mut oldest, k, after, &mut resends, &mut abandoned);
            }
        }

        let (kind, m, intended, sent) = match resends.pop_front() {
            Some((m, intended)) => (SendKind::Resend, m, intended, clock::now_ns()),
            None => {
                let (intended, sent) = pacer.send_at(schedule.intended_ns(j));
                if schedule.ended(sent) {
                    schedule_done = true;
                    continue;
                }
                let (kind, m) = chooser.choose(j, sent);
                j += 1;
                (kind, m, intended, sent)
            }
        };
        let slot = shared.slot(k);
        slot.answered.store(false, Ordering::Relaxed);
        slot.unavailable.store(false, Ordering::Relaxed);
        slot.kind.store(kind as u8, Ordering::Relaxed);
        slot.message.store(m, Ordering::Relaxed);
        slot.intended.store(intended, Ordering::Relaxed);
        slot.sent.store(sent, Ordering::Relaxed);
        slot.send.store(k, Ordering::Release);

        let size = message_size(&config.message_size, config.seed, config.index, m);
        let subject = (m / config.subject_stride.max(1) % subjects.len() as u64) as usize;
        let result = match &mut link {
            Link::Nats(client) => {
                let out = composer.compose(intended, sent, m, k, size, kind != SendKind::Resend);
                publish_nats(client, subjects[subject].clone(), out, &config, &stop).await
            }
            Link::Direct(writer) => {
                let subject = config.subjects[subject].as_bytes();
                let scheduled = kind != SendKind::Resend;
                composer.compose_frame(
                    writer.buf(),
                    subject,
                    intended,
                    sent,
                    m,
                    k,
                    size,
                    scheduled,
                );
                // One write per wake-up: flush unless the next message is
                // already due (it goes with this one), or the buffer is full.
                let next_due = j < count && schedule.intended_ns(j).is_none_or(|t| t <= sent);
                if next_due && writer.pending() < FLUSH_AT {
                    Ok(())
                } else {
                    flush(&mut link, &config, &stop).await
                }
            }
        };
        k += 1;
        if let Err(halt) = result {
            halt.into_report(&mut report);
            break;
        }
        match kind {
            SendKind::New => chooser.sent_new(m, sent),
            SendKind::Retry => report.retries += 1,
            SendKind::LateRetry => {
                report.late_retries += 1;
                report.late_retried.push(m);
            }
            SendKind::Resend => report.resends += 1,
        }
        if report.sent == 0 {
            report.first_sent_ns = sent;
        }
        report.sent += 1;
        report.bytes += size as u64;
        // The schedule's span and lag: resends are outside the schedule.
        if kind != SendKind::Resend {
            rates.book(&mut report, intended, sent, size as u64);
        }
        shared.progress.sent.store(report.sent, Ordering::Relaxed);
        report.timeline.mark(sent);
    }
    rates.finish(&mut report);
    report.traced = composer.traced();
    report.send_lag = composer.take_send_lag();
    let report = finish(&mut link, &shared, report, &config, &stop).await;
    (report, link)
}

/// Which scheduled sends a rate counts ([`SendReport::measured`]), fed
/// each one in order: those intended from the end of the warm-up, less
/// the PubAck window's first burst at max rate. At max nothing holds the
/// first `window` sends back (no PubAck is due yet), so they leave at the
/// client's speed whatever the server's; a rate that counted them would
/// read faster than the server takes messages, by a window over the run
/// (a 256 window over 1 s at 1,000 msg/s: a quarter). With a warm-up the
/// burst is in it; with none (`warmup = 0`, the default) it is left out
/// here. Paced, the schedule holds every send, and there is no burst.
/// A publisher that sent fewer than two messages past its burst has no
/// pace beyond it to measure: its burst counts after all ([`Self::finish`]).
#[derive(Debug, Clone, Copy)]
struct RateCount {
    record_from_ns: u64,
    /// Scheduled sends of the first burst still to come.
    burst_left: u64,
    /// The first left-out send of the burst, and the bytes left out.
    first_burst_ns: u64,
    burst_bytes: u64,
}

impl RateCount {
    fn new(config: &PublisherConfig) -> Self {
        let paced = config.schedule.total_rate.is_some();
        Self::of(paced, config.window, config.record_from_ns)
    }

    fn of(paced: bool, window: usize, record_from_ns: u64) -> Self {
        RateCount {
            record_from_ns,
            burst_left: if paced { 0 } else { window as u64 },
            first_burst_ns: 0,
            burst_bytes: 0,
        }
    }

    /// Books a scheduled send (a resend is outside the schedule) of `size`
    /// payload bytes on `report`.
    fn book(&mut self, report: &mut SendReport, intended: u64, sent: u64, size: u64) {
        report.last_sent_ns = sent;
        report.last_intended_ns = intended;
        let in_burst = self.burst_left > 0;
        self.burst_left = self.burst_left.saturating_sub(1);
        if intended < self.record_from_ns {
            return;
        }
        if in_burst {
            if report.burst == 0 {
                self.first_burst_ns = sent;
            }
            report.burst += 1;
            self.burst_bytes += size;
            return;
        }
        if report.measured == 0 {
            report.first_measured_ns = sent;
        }
        report.measured += 1;
        report.measured_bytes += size;
    }

    /// Once the schedule is sent: a burst with fewer than two sends after
    /// it (a rate needs two) is counted, the only pace there is.
    fn finish(&self, report: &mut SendReport) {
        if report.burst == 0 || report.measured >= 2 {
            return;
        }
        report.measured += report.burst;
        report.measured_bytes += self.burst_bytes;
        report.first_measured_ns = self.first_burst_ns;
        report.burst = 0;
    }
}

/// One message through async-nats. Nearly always ready at once: room in
/// the client's queue. When not, the server has stopped taking messages
/// (gone, or a client reconnecting forever), and nothing else would end
/// this wait: the PubAck timeout and the stop end it ([`in_time`]).
#[inline]
async fn publish_nats(
    client: &Client,
    subject: Subject,
    out: Outgoing,
    config: &PublisherConfig,
    stop: &CancellationToken,
) -> Result<(), Halt> {
    match in_time(out.publish(client, subject), config, stop).await? {
        Some(result) => result.map_err(|e| Halt::Failed(format!("publish failed: {e}"))),
        None => Err(Halt::Failed(format!(
            "a publish waited {:?} for room in the client's queue: the server does not take messages",
            config.pub_ack_timeout
        ))),
    }
}

/// Writes what a direct sender has buffered, on this thread (nothing to do
/// for async-nats, which writes on its own). Nearly always done in the
/// first poll; a socket that stays full for the PubAck timeout, or the
/// stop, ends the wait. A failed write is the end of the publisher: the
/// direct connection does not reconnect, and says so.
async fn flush(
    link: &mut Link,
    config: &PublisherConfig,
    stop: &CancellationToken,
) -> Result<(), Halt> {
    let Link::Direct(writer) = link else {
        return Ok(());
    };
    let result = in_time(writer.flush(), config, stop)
        .await?
        .unwrap_or_else(|| {
            Err(anyhow::anyhow!(
                "a write waited {:?}: the server does not take messages",
                config.pub_ack_timeout
            ))
        });
    result.map_err(|e| {
        Halt::Failed(format!(
            "publisher {}: its direct connection failed (it does not reconnect): {e:#}",
            config.index
        ))
    })
}

/// `work`'s output (`None`: the PubAck timeout passed first), or the
/// stop. Polled once before anything else: nearly always ready then, so
/// the common path pays for no timer.
#[inline]
async fn in_time<T>(
    work: impl Future<Output = T>,
    config: &PublisherConfig,
    stop: &CancellationToken,
) -> Result<Option<T>, Halt> {
    tokio::pin!(work);
    match futures::poll!(&mut work) {
        std::task::Poll::Ready(done) => Ok(Some(done)),
        std::task::Poll::Pending => tokio::select! {
            done = &mut work => Ok(Some(done)),
            _ = stop.cancelled() => Err(Halt::Interrupted),
            _ = tokio::time::sleep(config.pub_ack_timeout) => Ok(None),
        },
    }
}

impl Halt {
    fn into_report(self, report: &mut SendReport) {
        match self {
            Halt::Interrupted => report.interrupted = true,
            Halt::Failed(text) => report.first_error = Some(text),
        }
    }
}

/// Hands the buffered publishes to the server (waiting up to the PubAck
/// timeout: an async-nats client whose server is gone reconnects forever
/// and its flush with it), then tells the reader how many were sent.
async fn finish(
    link: &mut Link,
    shared: &Shared,
    mut report: SendReport,
    config: &PublisherConfig,
    stop: &CancellationToken,
) -> SendReport {
    let timeout = config.pub_ack_timeout;
    let flushed = match link {
        Link::Nats(client) => tokio::time::timeout(timeout, client.flush()).await.is_ok(),
        Link::Direct(_) => match flush(link, config, stop).await {
            Err(Halt::Failed(text)) => {
                report.first_error.get_or_insert(text);
                true
            }
            _ => true,
        },
    };
    if !flushed && report.first_error.is_none() {
        report.first_error = Some(format!(
            "the last publishes were not flushed within {timeout:?}: the server does not take them"
        ));
    }
    shared.finished.store(report.sent, Ordering::Release);
    shared.finished_notify.notify_one();
    report
}

/// Tracks when PubAcks last made progress; says so when none came for
/// `timeout` with `outstanding` sends waiting (as text: it travels in the
/// report across processes).
fn note_progress(
    progress_at: &mut (u64, u64),
    responses: u64,
    timeout: Duration,
    outstanding: u64,
) -> Option<String> {
    let now = clock::now_ns();
    if responses != progress_at.1 {
        *progress_at = (now, responses);
        return None;
    }
    (now.saturating_sub(progress_at.0) > timeout.as_nanos() as u64)
        .then(|| format!("no PubAck arrived for {timeout:?} with {outstanding} outstanding"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A report that has sent nothing.
    fn empty() -> SendReport {
        serde_json::from_value(serde_json::json!({
            "sent": 0, "bytes": 0, "retries": 0, "late_retries": 0, "late_retried": [],
            "resends": 0, "first_error": null, "stalled": null, "interrupted": false,
            "send_lag": Recorder::new(), "timeline": Timeline::per_second(0),
            "first_sent_ns": 0, "last_sent_ns": 0, "last_intended_ns": 0,
        }))
        .unwrap()
    }

    /// Ten sends of 100 bytes from t0 = 1 s with no warm-up, a window of
    /// 4: the first four at once (nothing holds them back), then one a
    /// millisecond as PubAcks free the window. At max the intended time is
    /// the send's.
    fn ten_sends(paced: bool) -> SendReport {
        let t0 = 1_000 * MS;
        let mut rates = RateCount::of(paced, 4, t0);
        let mut report = empty();
        for n in 0..10u64 {
            let sent = if n < 4 {
                t0 + n * 1_000
            } else {
                t0 + (n - 3) * MS
            };
            rates.book(&mut report, sent, sent, 100);
        }
        report
    }

    #[test]
    fn at_max_rate_with_no_warm_up_the_first_windows_burst_is_in_no_rate() {
        let max = ten_sends(false);
        // Six sends over the 5 ms from the first that waited for a PubAck:
        // the server's pace. Counting the burst, ten over 6 ms read faster.
        assert_eq!((max.measured, max.burst), (6, 4), "{max:?}");
        assert_eq!(max.first_measured_ns, 1_001 * MS);
        assert_eq!(max.measured_bytes, 600);
        assert_eq!(max.last_sent_ns, 1_006 * MS);
        // Paced, the schedule held every send: all ten count.
        let paced = ten_sends(true);
        assert_eq!((paced.measured, paced.burst), (10, 0), "{paced:?}");
    }

    #[test]
    fn a_publisher_that_never_left_its_burst_counts_it() {
        // Three sends, all inside a window of 4: no pace but the burst's.
        let t0 = 1_000 * MS;
        let mut rates = RateCount::of(false, 4, t0);
        let mut report = empty();
        for n in 0..3u64 {
            rates.book(&mut report, t0 + n * 1_000, t0 + n * 1_000, 100);
        }
        rates.finish(&mut report);
        assert_eq!((report.measured, report.burst), (3, 0), "{report:?}");
        assert_eq!((report.first_measured_ns, report.measured_bytes), (t0, 300));
        // Two past it make a pace: the burst stays out.
        let mut report = ten_sends(false);
        report.measured = 2;
        RateCount::of(false, 4, t0).finish(&mut report);
        assert_eq!(report.burst, 4);
    }

    #[test]
    fn a_burst_in_the_warm_up_is_left_out_once() {
        // A 1 s warm-up from t0 = 0 holds the burst: the sends after it
        // all count.
        let mut rates = RateCount::of(false, 4, 1_000 * MS);
        let mut report = empty();
        for n in 0..10u64 {
            rates.book(&mut report, n * 200 * MS, n * 200 * MS, 100);
        }
        assert_eq!((report.measured, report.burst), (5, 0), "{report:?}");
    }
}
