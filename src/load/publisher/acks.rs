//! The PubAck reader: matches each response to its send by the reply
//! token, classifies it, and records latency and what the server stored.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_nats::Subscriber;
use futures::StreamExt;
use serde::Deserialize;

use super::{AckReport, PublisherConfig, SendKind, Shared, Slot};
use crate::record::clock;
use crate::record::histogram::Recorder;
use crate::record::ledger::Event;

#[derive(Deserialize)]
struct PubAckWire {
    #[serde(default)]
    seq: u64,
    #[serde(default)]
    duplicate: bool,
    error: Option<ApiErrorWire>,
}

#[derive(Deserialize)]
struct ApiErrorWire {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    err_code: u32,
    #[serde(default)]
    description: String,
}

pub(super) enum Response {
    Stored {
        seq: u64,
        duplicate: bool,
    },
    /// Nothing could take the message right now (no responders while a
    /// stream elects a leader, JetStream 503): worth sending again.
    Unavailable(String),
    /// The stream's own limits refused it: JSStreamStoreFailedF saying
    /// "maximum ... exceeded" (at max_msgs, max_bytes or
    /// max_msgs_per_subject with discard new), or
    /// JSStreamMessageExceedsMaximumErr (10054, above max_msg_size). What
    /// the stream was configured to do.
    RefusedByLimit(String),
    Failed(String),
}

/// nats-server's JSStreamStoreFailedF (a stream at its limits with discard
/// new), JSInsufficientResourcesErr (the server's JetStream storage is
/// full) and JSStorageResourcesExceededErr (the account's is).
const REFUSALS: [u32; 3] = [10077, 10023, 10047];

/// JSStreamDuplicateMessageConflict (409): a resend whose first copy the
/// stream is still proposing (a leader cut off from its quorum holds it
/// until it steps down). Not a refusal: worth sending again later.
const IN_PROCESS: u32 = 10158;

/// What to check when the server refuses to store, named in the error.
fn refusal_hint(err_code: u32) -> &'static str {
    match err_code {
        10077 => " (the stream is at its limits and discards new messages)",
        10023 => {
            " (the server's JetStream storage is full: its max_file_store or \
             max_memory_store, or the disk)"
        }
        10047 => " (the account's JetStream storage limit is reached)",
        10054 => " (the message is larger than the stream's max_msg_size)",
        _ => "",
    }
}

fn classify(message: &async_nats::Message) -> Response {
    let status = message.status.map(|status| {
        (
            status.as_u16(),
            message.description.as_deref().unwrap_or("").as_bytes(),
        )
    });
    classify_parts(status, &message.payload)
}

/// Classifies a response from its status line (`NATS/1.0 503`, present
/// only on a header-only reply) and its payload, however it was read: an
/// async-nats `Message` or a frame lent by [`crate::wire`]. A plain PubAck
/// is read by [`super::pub_ack::parse`] without allocating; anything else
/// (errors included) by serde.
pub(super) fn classify_parts(status: Option<(u16, &[u8])>, payload: &[u8]) -> Response {
    if let Some((code, description)) = status {
        if code == 503 {
            return Response::Unavailable(
                "no responders: no stream captures the subject (or JetStream is unavailable)"
                    .into(),
            );
        }
        if payload.is_empty() {
            return Response::Failed(format!(
                "status {code} {}",
                String::from_utf8_lossy(description)
            ));
        }
    }
    if let Some((seq, duplicate)) = super::pub_ack::parse(payload) {
        return Response::Stored { seq, duplicate };
    }
    match serde_json::from_slice::<PubAckWire>(payload) {
        Ok(PubAckWire { error: Some(e), .. }) => {
            let text = format!(
                "JetStream error {} ({}): {}{}",
                e.code,
                e.err_code,
                e.description,
                refusal_hint(e.err_code)
            );
            // A 503 is also how a full stream or server answers; resending
            // that would only be refused again.
            // 10077 is any store failure; only its "maximum ... exceeded"
            // descriptions are a limit's refusal.
            let limit =
                e.err_code == 10054 || (e.err_code == 10077 && e.description.contains("maximum"));
            if limit {
                Response::RefusedByLimit(text)
            } else if (e.code == 503 && !REFUSALS.contains(&e.err_code)) || e.err_code == IN_PROCESS
            {
                Response::Unavailable(text)
            } else {
                Response::Failed(text)
            }
        }
        Ok(ack) if ack.seq > 0 => Response::Stored {
            seq: ack.seq,
            duplicate: ack.duplicate,
        },
        _ => Response::Failed(format!(
            "unreadable PubAck: {:?}",
            String::from_utf8_lossy(payload)
        )),
    }
}

/// Reads the publisher's PubAcks until every send is settled (answered or
/// given up), the PubAck timeout passes without one, or the subscription
/// closes: wait for the next, take it, and at the end report.
pub(super) async fn read_acks(
    mut subscription: Subscriber,
    shared: Arc<Shared>,
    config: PublisherConfig,
) -> AckReport {
    let mut reader = Reader::new(&shared, &config);
    while let Some(message) = reader.next_ack(&mut subscription).await {
        reader.take(&message);
    }
    reader.finish(subscription).await
}

/// The reader's state between PubAcks: what it has counted so far and when
/// the last answer came. Every per-ack step is a method on it, so the state
/// stays in place (borrowed, never moved or allocated) across the steps.
pub(super) struct Reader<'a> {
    shared: &'a Shared,
    config: &'a PublisherConfig,
    report: AckReport,
    /// When the last answered PubAck came (ns on [`clock`]); 0 before the first.
    last_response_ns: u64,
    /// Whether the caller wakes the sender once per batch of PubAcks
    /// (the direct reader) rather than this per PubAck.
    batched: bool,
}

impl<'a> Reader<'a> {
    /// Set-up: nothing counted yet, the histograms and the ledger empty.
    pub(super) fn new(shared: &'a Shared, config: &'a PublisherConfig) -> Self {
        // The ledger is indexed by stream sequence, which all publishers share.
        let report = AckReport {
            from_intended: Recorder::with_intervals(),
            from_sent: Recorder::with_intervals(),
            ..AckReport::default()
        };
        Reader {
            shared,
            config,
            report,
            last_response_ns: 0,
            batched: false,
        }
    }

    /// A reader whose caller wakes the sender once per batch it takes.
    pub(super) fn batched(mut self) -> Self {
        self.batched = true;
        self
    }

    /// The next PubAck, or `None` when reading ends: every send settled, or
    /// (once the sender is done) none came within the PubAck timeout, or
    /// the subscription closed. The sends never answered count as missing.
    /// While the sender still sends, it waits without a timeout and looks
    /// again when the sender says it is done.
    async fn next_ack(&mut self, subscription: &mut Subscriber) -> Option<async_nats::Message> {
        loop {
            let finished = self.shared.finished.load(Ordering::Acquire);
            let settled = self.report.responses + self.shared.abandoned.load(Ordering::Acquire);
            if finished != u64::MAX && settled >= finished {
                return None;
            }
            let next = if finished == u64::MAX {
                tokio::select! {
                    message = subscription.next() => message,
                    _ = self.shared.finished_notify.notified() => continue,
                }
            } else {
                match tokio::time::timeout(self.config.pub_ack_timeout, subscription.next()).await {
                    Ok(message) => message,
                    Err(_) => {
                        self.report.missing = finished.saturating_sub(settled);
                        return None;
                    }
                }
            };
            let Some(message) = next else {
                self.closed(finished, settled);
                return None;
            };
            return Some(message);
        }
    }

    /// The subscription ended before every send was settled: an error, and
    /// (if the sender is done) the unsettled sends are missing.
    pub(super) fn closed(&mut self, finished: u64, settled: u64) {
        self.report
            .first_error
            .get_or_insert_with(|| "the PubAck subscription closed".into());
        if finished != u64::MAX {
            self.report.missing = finished.saturating_sub(settled);
        }
    }

    /// One PubAck: find its send, classify it, and count it. An
    /// "unavailable" the sender will resend is not an answer; otherwise the
    /// first answer to a send owns it and later ones count as late.
    #[inline]
    fn take(&mut self, message: &async_nats::Message) {
        let now = clock::now_ns();
        self.take_response(message.subject.as_bytes(), classify(message), now);
    }

    /// One classified PubAck that came at `now` to reply subject `subject`
    /// (however it was read): as [`Reader::take`] describes.
    #[inline]
    pub(super) fn take_response(&mut self, subject: &[u8], response: Response, now: u64) {
        let slot = self.slot_of(subject);
        if self.defer_unavailable(&response, slot) {
            return;
        }
        // The first to mark a send answered owns it: a PubAck that arrives
        // after the sender gave up and resent is late, and counts only as
        // evidence of what the server stored.
        // Without a slot (it was reused) a PubAck can only be a late one
        // when sends are given up and resent; otherwise it is the only one.
        let first = match slot {
            Some(s) => !s.answered.swap(true, Ordering::AcqRel),
            None => self.config.resend_after.is_none(),
        };
        let report = &mut self.report;
        match response {
            Response::Stored { seq, duplicate } => self.stored(seq, duplicate, slot, first, now),
            _ if !first => report.late_responses += 1,
            Response::RefusedByLimit(text) => {
                report.errors += 1;
                report.refused_by_limit += 1;
                report.first_refusal.get_or_insert(text);
            }
            Response::Failed(text) | Response::Unavailable(text) => {
                report.errors += 1;
                report.first_error.get_or_insert(text);
            }
        }
        if first {
            self.answered(now);
        }
    }

    /// The send a PubAck answers, by the token ending its reply subject;
    /// `None` when its slot has since been reused by a later send.
    #[inline]
    fn slot_of(&self, subject: &[u8]) -> Option<&'a Slot> {
        let shared: &'a Shared = self.shared;
        let token = subject.rsplit(|&b| b == b'.').next().unwrap_or(b"");
        crate::wire::frame::parse_u64(token).and_then(|k| {
            let slot = shared.slot(k);
            (slot.send.load(Ordering::Acquire) == k).then_some(slot)
        })
    }

    /// An "unavailable" for a send not yet answered, when the sender
    /// resends: not an answer, so flag the send for the sender to resend
    /// shortly and wake it. True when the PubAck was taken that way.
    #[inline]
    fn defer_unavailable(&mut self, response: &Response, slot: Option<&Slot>) -> bool {
        if let (Response::Unavailable(text), Some(slot), Some(_)) =
            (response, slot, self.config.resend_after)
            && !slot.answered.load(Ordering::Acquire)
        {
            slot.unavailable.store(true, Ordering::Release);
            self.report.unavailable += 1;
            self.report
                .first_unavailable
                .get_or_insert_with(|| text.clone());
            self.shared.window_open.notify_one();
            return true;
        }
        false
    }

    /// A PubAck saying the server stored the message (or flagged it
    /// duplicate): which count it goes to depends on what the send was; the
    /// ledger and the tally keep what the server stored, and the first
    /// answer past the warm-up is recorded as latency.
    #[inline]
    fn stored(&mut self, seq: u64, duplicate: bool, slot: Option<&Slot>, first: bool, now: u64) {
        let report = &mut self.report;
        let kind = slot.map(|s| s.kind.load(Ordering::Relaxed));
        let is = |k: Option<u8>, kind: SendKind| k == Some(kind as u8);
        match (kind, duplicate) {
            _ if !first => report.late_responses += 1,
            (k, true) if is(k, SendKind::Retry) => report.duplicates += 1,
            (k, true) if is(k, SendKind::LateRetry) => report.late_flagged += 1,
            (k, true) if is(k, SendKind::Resend) => report.resent_duplicates += 1,
            (_, true) => report.unexpected_duplicates += 1,
            (k, false) if is(k, SendKind::Retry) => report.retries_stored += 1,
            (k, false) if is(k, SendKind::LateRetry) => report.late_stored += 1,
            (k, false) if is(k, SendKind::Resend) => report.resent_stored += 1,
            (_, false) => report.acked += 1,
        }
        report.ledger.mark(
            seq,
            if duplicate {
                Event::Duplicate
            } else {
                Event::Persisted
            },
        );
        if let Some(slot) = slot {
            if !duplicate {
                report
                    .stored_by_message
                    .mark(slot.message.load(Ordering::Relaxed));
            }
            let intended = slot.intended.load(Ordering::Relaxed);
            let sent = slot.sent.load(Ordering::Relaxed);
            if first && intended >= self.shared.record_from_ns.load(Ordering::Relaxed) {
                report.from_intended.record_between(intended, now);
                report.from_sent.record_between(sent, now);
                if !is(kind, SendKind::Resend) {
                    if report.measured_acked == 0 {
                        report.first_measured_ack_ns = now;
                    }
                    report.measured_acked += 1;
                    report.last_measured_ack_ns = now;
                }
            }
        }
    }

    /// A send answered (first answer only): the longest gap between
    /// answers, the response count the progress display and the sender
    /// read, and a wake-up for the sender, whose window may now be open.
    #[inline]
    fn answered(&mut self, now: u64) {
        let report = &mut self.report;
        if self.last_response_ns > 0 && now - self.last_response_ns > report.max_gap_ns {
            report.max_gap_ns = now - self.last_response_ns;
            report.max_gap_end_ns = now;
        }
        self.last_response_ns = now;
        report.responses += 1;
        self.shared
            .progress
            .responses
            .store(report.responses, Ordering::Release);
        if !self.batched {
            self.shared.window_open.notify_one();
        }
    }

    /// Responses counted so far (first answers).
    pub(super) fn responses(&self) -> u64 {
        self.report.responses
    }

    /// Sends never answered: the reading ended without them.
    pub(super) fn set_missing(&mut self, missing: u64) {
        self.report.missing = missing;
    }

    /// An error that is not one PubAck's (the connection's); the first is kept.
    pub(super) fn note_error(&mut self, text: String) {
        self.report.first_error.get_or_insert(text);
    }

    /// What was counted, when there is no subscription to leave.
    pub(super) fn into_report(self) -> AckReport {
        self.report
    }

    /// The tail: leave the subscription and hand back what was counted.
    async fn finish(self, mut subscription: Subscriber) -> AckReport {
        let _ = subscription.unsubscribe().await;
        self.report
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn message(payload: &'static str) -> async_nats::Message {
        async_nats::Message {
            subject: "_INBOX.x.7".into(),
            reply: None,
            payload: Bytes::from_static(payload.as_bytes()),
            headers: None,
            status: None,
            description: None,
            length: payload.len(),
        }
    }

    #[test]
    fn classifies_pub_acks() {
        match classify(&message(r#"{"stream":"S","seq":42}"#)) {
            Response::Stored {
                seq: 42,
                duplicate: false,
            } => {}
            _ => panic!("plain ack"),
        }
        match classify(&message(r#"{"stream":"S","seq":42,"duplicate":true}"#)) {
            Response::Stored {
                seq: 42,
                duplicate: true,
            } => {}
            _ => panic!("duplicate ack"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"}}"#,
        )) {
            Response::RefusedByLimit(text) => {
                assert!(text.contains("maximum messages exceeded"), "{text}")
            }
            _ => panic!("a stream at its limits with discard new"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}}"#,
        )) {
            Response::Unavailable(text) => assert!(text.contains("temporarily"), "{text}"),
            _ => panic!("unavailable ack"),
        }
        match classify(&message(
            r#"{"error":{"code":503,"err_code":10023,"description":"insufficient resources"}}"#,
        )) {
            Response::Failed(text) => assert!(text.contains("storage is full"), "{text}"),
            _ => panic!("a full server refuses; resending would not help"),
        }
        match classify(&message(
            r#"{"error":{"code":409,"err_code":10158,"description":"duplicate message id is in process"}}"#,
        )) {
            Response::Unavailable(text) => assert!(text.contains("in process"), "{text}"),
            _ => panic!("a first copy still in process is sent again later"),
        }
        match classify(&message("garbage")) {
            Response::Failed(text) => assert!(text.contains("unreadable"), "{text}"),
            _ => panic!("garbage"),
        }
    }

    /// A PubAck as the direct reader sees it: a frame lent from the read
    /// buffer, classified from its status line and payload.
    fn classify_frame(raw: &[u8]) -> Response {
        use crate::wire::frame::{self, Frame};
        let head = frame::parse(raw).unwrap().expect("a whole frame");
        let Frame::Msg(m) = frame::lend(raw, head) else {
            panic!("not a message")
        };
        classify_parts(m.status(), m.payload)
    }

    #[test]
    fn classifies_pub_ack_frames() {
        match classify_frame(b"MSG _INBOX.x.7 1 23\r\n{\"stream\":\"S\",\"seq\":42}\r\n") {
            Response::Stored {
                seq: 42,
                duplicate: false,
            } => {}
            _ => panic!("plain ack"),
        }
        // No stream listens: the server's header-only 503.
        match classify_frame(b"HMSG _INBOX.x.7 1 16 16\r\nNATS/1.0 503\r\n\r\n\r\n") {
            Response::Unavailable(text) => assert!(text.contains("no responders"), "{text}"),
            _ => panic!("no responders"),
        }
        match classify_frame(b"HMSG _INBOX.x.7 1 24 24\r\nNATS/1.0 408 Timeout\r\n\r\n\r\n") {
            Response::Failed(text) => assert!(text.contains("408 Timeout"), "{text}"),
            _ => panic!("another status"),
        }
        let err = br#"{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}"#;
        let mut raw = format!("MSG _INBOX.x.7 1 {}\r\n", err.len()).into_bytes();
        raw.extend_from_slice(err);
        raw.extend_from_slice(b"\r\n");
        match classify_frame(&raw) {
            Response::RefusedByLimit(text) => assert!(text.contains("max_msg_size"), "{text}"),
            _ => panic!("above max_msg_size"),
        }
    }
}
