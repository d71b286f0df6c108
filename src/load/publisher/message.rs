//! The bytes of each message, built on the sender's hot path (measured in
//! benches/hot_path.rs): payload and reply subject out of one arena, the
//! Nats-Msg-Id without `format!`.

use async_nats::header::{HeaderName, NATS_MESSAGE_ID};
use async_nats::{Client, HeaderMap, HeaderValue, PublishError, Subject};
use bytes::{BufMut, Bytes, BytesMut};

use crate::record::histogram::Recorder;
use crate::record::stamp::{STAMP_LEN, Stamp};

/// A publisher's per-message work between "it is time" and handing the
/// message to the client: stamp, payload and reply subject, headers, and the
/// send-lag record. The sending loop and `benches/hot_path.rs` both call
/// [`Composer::compose`], so the bench cannot drift from what a run pays.
pub struct Composer {
    builder: MessageBuilder,
    /// Present when every message carries a Nats-Msg-Id.
    ids: Option<IdBuilder>,
    extra_headers: Vec<(HeaderName, HeaderValue)>,
    publisher: u16,
    /// Messages intended before this (the warm-up) leave no lag record.
    record_from_ns: u64,
    send_lag: Recorder,
    /// The header block for [`Composer::compose_frame`], built once.
    block: HeaderBlock,
    /// Which messages carry `Nats-Trace-Dest`, and their parts.
    trace: Tracer,
}

/// The `Nats-Trace-Dest` of every `every`th message (by message number):
/// `<prefix><sent ns>`, so the drive's trace collector reads
/// the send time from the subject and needs no state shared with the
/// sender. A sampled message is composed off the hot path into scratch
/// buffers reused from one sample to the next; the rest pay one branch.
#[derive(Default)]
struct Tracer {
    /// 0: tracing off.
    every: u64,
    /// `_jsb.trace.<token>.<publisher>.`
    prefix: Vec<u8>,
    /// Messages sent with the header.
    traced: u64,
    headers: Vec<u8>,
    reply: Vec<u8>,
    payload: Vec<u8>,
}

impl Tracer {
    #[inline(always)]
    fn samples(&self, message: u64) -> bool {
        self.every != 0 && message.is_multiple_of(self.every)
    }

    /// Adds the header for a message sent at `sent` (async-nats).
    #[cold]
    #[inline(never)]
    fn add(&mut self, headers: &mut Option<HeaderMap>, sent: u64) {
        let mut digits = itoa::Buffer::new();
        let mut d = String::from_utf8_lossy(&self.prefix).into_owned();
        d.push_str(digits.format(sent));
        headers
            .get_or_insert_with(HeaderMap::new)
            .insert(TRACE_DEST, d.as_str());
        self.traced += 1;
    }
}

/// The tracing header's name: the server reports the message's hops to
/// the subject it carries (ADR-41).
pub const TRACE_DEST: &str = "Nats-Trace-Dest";

/// One message, ready for `publish_with_reply[_and_headers]`.
pub struct Outgoing {
    pub payload: Bytes,
    pub reply: Subject,
    /// `None` when the message carries no header at all: the cheaper
    /// publish without a header block.
    pub headers: Option<HeaderMap>,
}

impl Outgoing {
    /// Publishes it to `subject` through async-nats, with its reply
    /// subject and, when it has any, its headers.
    #[inline]
    pub async fn publish(self, client: &Client, subject: Subject) -> Result<(), PublishError> {
        match self.headers {
            None => {
                client
                    .publish_with_reply(subject, self.reply, self.payload)
                    .await
            }
            Some(headers) => {
                client
                    .publish_with_reply_and_headers(subject, self.reply, headers, self.payload)
                    .await
            }
        }
    }
}

impl Composer {
    /// `msg_id_prefix` is `Some` when every message carries a Nats-Msg-Id
    /// (`<prefix><message number>`); `extra_headers` were validated with the
    /// profile.
    pub fn new(
        inbox: &str,
        msg_id_prefix: Option<&str>,
        extra_headers: &[(String, String)],
        publisher: u16,
        record_from_ns: u64,
        send_lag: Recorder,
    ) -> anyhow::Result<Self> {
        let extra_headers_raw = extra_headers;
        let extra_headers = extra_headers
            .iter()
            .map(|(k, v)| {
                let name: HeaderName = k
                    .parse()
                    .map_err(|e| anyhow::anyhow!("header name {k:?}: {e}"))?;
                Ok((name, HeaderValue::from(v.as_str())))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Composer {
            builder: MessageBuilder::new(inbox),
            ids: msg_id_prefix.map(IdBuilder::new),
            extra_headers,
            publisher,
            record_from_ns,
            send_lag,
            block: HeaderBlock::new(msg_id_prefix, extra_headers_raw),
            trace: Tracer::default(),
        })
    }

    /// Traces every `every`th message (0: none) to
    /// `<subject_prefix><sent ns>`; `subject_prefix` ends with a dot.
    pub fn trace(&mut self, every: u64, subject_prefix: &str) {
        self.trace.every = every;
        self.trace.prefix = subject_prefix.as_bytes().to_vec();
    }

    /// Messages composed with `Nats-Trace-Dest`.
    pub fn traced(&self) -> u64 {
        self.trace.traced
    }

    /// Builds message `message` as send number `send`, intended at
    /// `intended` and sent at `sent` (ns on [`crate::record::clock`]). `scheduled`
    /// is false for a resend, which is outside the schedule and so leaves no
    /// send-lag record.
    #[inline]
    pub fn compose(
        &mut self,
        intended: u64,
        sent: u64,
        message: u64,
        send: u64,
        size: usize,
        scheduled: bool,
    ) -> Outgoing {
        let (payload, reply) = self
            .builder
            .build(self.stamp(intended, sent, message), send, size);
        let mut headers = if self.ids.is_none() && self.extra_headers.is_empty() {
            None
        } else {
            let mut headers = HeaderMap::new();
            if let Some(ids) = &mut self.ids {
                headers.insert(NATS_MESSAGE_ID, ids.value(message));
            }
            for (name, value) in &self.extra_headers {
                headers.insert(name.clone(), value.clone());
            }
            Some(headers)
        };
        if self.trace.samples(message) {
            // In place: moving the headers through a branch cost 13
            // instructions a message (2.3%, benches/instructions.rs).
            self.trace.add(&mut headers, sent);
        }
        self.record_lag(intended, sent, scheduled);
        Outgoing {
            payload,
            reply,
            headers,
        }
    }

    /// What [`Composer::compose`] does, for a sending thread that writes
    /// its own frames ([`crate::wire`]): the message goes straight into
    /// `out` as a `PUB` (or an `HPUB` whose header block was built once and
    /// only has the id's digits written per message), with no `Bytes`, no
    /// `Subject` and no `HeaderMap` in between. The direct sending loop and
    /// `benches/hot_path.rs` both call it.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub fn compose_frame(
        &mut self,
        out: &mut Vec<u8>,
        subject: &[u8],
        intended: u64,
        sent: u64,
        message: u64,
        send: u64,
        size: usize,
        scheduled: bool,
    ) {
        if self.trace.samples(message) {
            return self.compose_traced_frame(
                out, subject, intended, sent, message, send, size, scheduled,
            );
        }
        let payload_len = STAMP_LEN + size.saturating_sub(STAMP_LEN);
        let mut send_digits = itoa::Buffer::new();
        let send_digits = send_digits.format(send).as_bytes();
        let mut id_digits = itoa::Buffer::new();
        let id_digits = id_digits.format(message).as_bytes();
        let builder = &self.builder;
        out.reserve(
            48 + subject.len()
                + builder.reply_prefix.len()
                + builder.reply_suffix.len()
                + self.block.head.len()
                + payload_len,
        );
        let block = &self.block;
        let headers_len = match block.kind {
            BlockKind::None => 0,
            BlockKind::Fixed => block.head.len(),
            BlockKind::Id => block.head.len() + id_digits.len() + ID_TAIL.len(),
        };
        // The control line written here rather than by the wire's
        // PUB/HPUB writer: the reply comes in three parts, and joining them
        // or looping over them cost 9-15 instructions a message (2-3%,
        // benches/instructions.rs).
        out.extend_from_slice(if headers_len == 0 { b"PUB " } else { b"HPUB " });
        out.extend_from_slice(subject);
        out.push(b' ');
        out.extend_from_slice(&builder.reply_prefix);
        out.extend_from_slice(send_digits);
        out.extend_from_slice(builder.reply_suffix);
        out.push(b' ');
        let mut lengths = itoa::Buffer::new();
        if headers_len > 0 {
            out.extend_from_slice(lengths.format(headers_len).as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(lengths.format(headers_len + payload_len).as_bytes());
        out.extend_from_slice(b"\r\n");
        if headers_len > 0 {
            out.extend_from_slice(&block.head);
            if block.kind == BlockKind::Id {
                out.extend_from_slice(id_digits);
                out.extend_from_slice(ID_TAIL);
            }
        }
        let at = out.len();
        out.resize(at + payload_len, b'.');
        self.stamp(intended, sent, message)
            .write(&mut out[at..at + STAMP_LEN]);
        out.extend_from_slice(b"\r\n");
        self.record_lag(intended, sent, scheduled);
    }

    /// A sampled message's frame: its own header block (the publisher's,
    /// with `Nats-Trace-Dest` added) in scratch buffers, then one `HPUB`.
    /// Cold: one message in `trace_every`, kept out of the unsampled path.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn compose_traced_frame(
        &mut self,
        out: &mut Vec<u8>,
        subject: &[u8],
        intended: u64,
        sent: u64,
        message: u64,
        send: u64,
        size: usize,
        scheduled: bool,
    ) {
        let mut t = std::mem::take(&mut self.trace);
        let mut digits = itoa::Buffer::new();
        t.headers.clear();
        let head = &self.block.head;
        match self.block.kind {
            BlockKind::None => t.headers.extend_from_slice(b"NATS/1.0\r\n"),
            // Without its blank line, which now comes after the trace's.
            BlockKind::Fixed => t.headers.extend_from_slice(&head[..head.len() - 2]),
            BlockKind::Id => {
                t.headers.extend_from_slice(head);
                t.headers
                    .extend_from_slice(digits.format(message).as_bytes());
                t.headers.extend_from_slice(b"\r\n");
            }
        }
        t.headers.extend_from_slice(TRACE_DEST.as_bytes());
        t.headers.extend_from_slice(b": ");
        t.headers.extend_from_slice(&t.prefix);
        t.headers.extend_from_slice(digits.format(sent).as_bytes());
        t.headers.extend_from_slice(b"\r\n\r\n");
        t.reply.clear();
        t.reply.extend_from_slice(&self.builder.reply_prefix);
        t.reply.extend_from_slice(digits.format(send).as_bytes());
        t.reply.extend_from_slice(self.builder.reply_suffix);
        t.payload.clear();
        t.payload.resize(STAMP_LEN.max(size), b'.');
        self.stamp(intended, sent, message)
            .write(&mut t.payload[..STAMP_LEN]);
        crate::wire::frame::put_hpub(out, subject, &t.reply, &t.headers, &t.payload);
        t.traced += 1;
        self.trace = t;
        self.record_lag(intended, sent, scheduled);
    }

    /// Message `message`'s stamp, as both ways of composing write it.
    #[inline]
    fn stamp(&self, intended: u64, sent: u64, message: u64) -> Stamp {
        Stamp {
            intended_ns: intended,
            sent_ns: sent,
            publisher: self.publisher,
            publisher_seq: message,
        }
    }

    /// A scheduled send's lag, once recording has begun; a resend is
    /// outside the schedule and leaves none.
    #[inline]
    fn record_lag(&mut self, intended: u64, sent: u64, scheduled: bool) {
        if scheduled && intended >= self.record_from_ns {
            self.send_lag.record_between(intended, sent);
        }
    }

    /// See [`MessageBuilder::set_reply`].
    pub fn set_reply(&mut self, prefix: &str, suffix: &'static str) {
        self.builder.set_reply(prefix, suffix);
    }

    /// The send lag recorded so far, for the report (leaving none).
    pub fn take_send_lag(&mut self) -> Recorder {
        std::mem::take(&mut self.send_lag)
    }
}

/// What ends a header block whose last line is the Nats-Msg-Id: the
/// line's end and the blank line.
const ID_TAIL: &[u8] = b"\r\n\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    /// No header: a `PUB`.
    None,
    /// Extra headers only: the block is the same for every message.
    Fixed,
    /// `head` ends with `Nats-Msg-Id: <prefix>`; each message writes its
    /// number's digits and [`ID_TAIL`] after it.
    Id,
}

/// A publisher's header block, written once: `NATS/1.0`, the profile's
/// extra headers, and last the Nats-Msg-Id up to its varying digits, so a
/// message's block is this copied plus its number (a `HeaderMap` built per
/// message cost most of the 308-403 ns the id path took).
struct HeaderBlock {
    kind: BlockKind,
    head: Vec<u8>,
}

impl HeaderBlock {
    /// `extra` were validated with the profile (no line breaks, no colon
    /// in a name).
    fn new(msg_id_prefix: Option<&str>, extra: &[(String, String)]) -> Self {
        let kind = match (msg_id_prefix, extra.is_empty()) {
            (Some(_), _) => BlockKind::Id,
            (None, false) => BlockKind::Fixed,
            (None, true) => BlockKind::None,
        };
        let mut head = Vec::new();
        if kind != BlockKind::None {
            head.extend_from_slice(b"NATS/1.0\r\n");
            for (name, value) in extra {
                head.extend_from_slice(name.as_bytes());
                head.extend_from_slice(b": ");
                head.extend_from_slice(value.as_bytes());
                head.extend_from_slice(b"\r\n");
            }
        }
        match msg_id_prefix {
            Some(prefix) => {
                head.extend_from_slice(b"Nats-Msg-Id: ");
                head.extend_from_slice(prefix.as_bytes());
            }
            None if kind == BlockKind::Fixed => head.extend_from_slice(b"\r\n"),
            None => {}
        }
        HeaderBlock { kind, head }
    }
}

/// Builds payloads and reply subjects out of one reusable arena: a 64 KiB
/// buffer that many messages are split off, so there is one allocation per
/// few hundred messages instead of two per message.
pub struct MessageBuilder {
    arena: BytesMut,
    reply_prefix: Vec<u8>,
    /// After the number: a fast-ingest batch's `.<op>.$FI`, else empty.
    reply_suffix: &'static [u8],
}

impl MessageBuilder {
    /// `inbox` is the publisher's PubAck inbox; replies go to `<inbox>.<n>`.
    pub fn new(inbox: &str) -> Self {
        MessageBuilder {
            arena: BytesMut::with_capacity(64 * 1024),
            reply_prefix: format!("{inbox}.").into_bytes(),
            reply_suffix: b"",
        }
    }

    /// Replies go to `<prefix>.<n><suffix>` from now on: a fast-ingest
    /// batch carries its id, flow and gap mode before the number and its
    /// operation after it, and changes them per batch and per operation.
    /// The prefix's buffer is reused, so this allocates nothing once it has
    /// grown to the longest prefix.
    pub fn set_reply(&mut self, prefix: &str, suffix: &'static str) {
        self.reply_prefix.clear();
        self.reply_prefix.extend_from_slice(prefix.as_bytes());
        self.reply_prefix.push(b'.');
        self.reply_suffix = suffix.as_bytes();
    }

    /// The payload of `size` bytes (stamp, then filler) and the reply
    /// subject for send number `send`.
    #[inline]
    pub fn build(&mut self, stamp: Stamp, send: u64, size: usize) -> (Bytes, Subject) {
        let mut digits = [0u8; 20];
        self.arena
            .reserve(size + self.reply_prefix.len() + digits.len() + self.reply_suffix.len());
        let mut head = [0u8; STAMP_LEN];
        stamp.write(&mut head);
        self.arena.extend_from_slice(&head);
        self.arena.put_bytes(b'.', size.saturating_sub(STAMP_LEN));
        let payload = self.arena.split().freeze();
        self.arena.extend_from_slice(&self.reply_prefix);
        self.arena.extend_from_slice(decimal(send, &mut digits));
        self.arena.extend_from_slice(self.reply_suffix);
        // SAFETY: the bytes are the prefix and suffix, copied from `&str`s,
        // and ASCII digits: valid UTF-8 by construction, so the check `try_from`
        // would repeat on every message (25 ns of the bench's 150) is skipped.
        let reply = unsafe { Subject::from_bytes_unchecked(self.arena.split().freeze()) };
        (payload, reply)
    }
}

/// Builds Nats-Msg-Id values `<prefix><message number>` without `format!`.
pub struct IdBuilder {
    text: String,
    prefix_len: usize,
}

impl IdBuilder {
    pub fn new(prefix: &str) -> Self {
        let mut text = String::with_capacity(prefix.len() + 20);
        text.push_str(prefix);
        IdBuilder {
            text,
            prefix_len: prefix.len(),
        }
    }

    #[inline]
    pub fn value(&mut self, message: u64) -> HeaderValue {
        let mut digits = [0u8; 20];
        self.text.truncate(self.prefix_len);
        self.text
            .push_str(std::str::from_utf8(decimal(message, &mut digits)).expect("digits"));
        HeaderValue::from(self.text.as_str())
    }
}

/// Writes `n` in decimal into `buf`, returning the digits.
#[inline]
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_stamped_payloads_and_numbered_replies() {
        let mut builder = MessageBuilder::new("_INBOX.abc");
        let stamp = Stamp {
            intended_ns: 1,
            sent_ns: 2,
            publisher: 3,
            publisher_seq: 1234,
        };
        let (payload, reply) = builder.build(stamp, 99, 40);
        assert_eq!(payload.len(), 40);
        assert_eq!(Stamp::read(&payload), Some(stamp));
        assert_eq!(reply.as_str(), "_INBOX.abc.99");
        let (second, _) = builder.build(stamp, 100, 40);
        assert_eq!(payload, second, "earlier messages are not overwritten");
    }

    #[test]
    fn a_fast_batch_reply_carries_its_prefix_number_and_operation() {
        let mut builder = MessageBuilder::new("_INBOX.abc");
        builder.set_reply("_INBOX.abc.b7.500.fail", ".1.$FI");
        let (_, reply) = builder.build(Stamp::default(), 12, 24);
        assert_eq!(reply.as_str(), "_INBOX.abc.b7.500.fail.12.1.$FI");
        builder.set_reply("_INBOX.abc.b8.500.ok", ".0.$FI");
        let (_, reply) = builder.build(Stamp::default(), 1, 24);
        assert_eq!(reply.as_str(), "_INBOX.abc.b8.500.ok.1.0.$FI");
    }

    #[test]
    fn ids_are_prefix_and_message_number() {
        let mut ids = IdBuilder::new("run-lat-0-");
        assert_eq!(ids.value(7).as_str(), "run-lat-0-7");
        assert_eq!(ids.value(12345).as_str(), "run-lat-0-12345");
    }

    type Relayed = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>);

    /// `frames` as the server would relay them (`PUB s r n` as `MSG s 1 r
    /// n`), read back by the wire parser: subject, reply, headers, payload.
    fn read_back(frames: &[u8]) -> Vec<Relayed> {
        use crate::wire::frame::{self, Frame};
        let mut relayed = Vec::new();
        let mut rest = frames;
        while !rest.is_empty() {
            let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let line = std::str::from_utf8(&rest[..eol]).unwrap();
            let mut fields: Vec<&str> = line.split(' ').collect();
            let op = if fields[0] == "HPUB" { "HMSG" } else { "MSG" };
            let sizes: Vec<usize> = fields[3..].iter().map(|n| n.parse().unwrap()).collect();
            fields[0] = op;
            fields.insert(2, "1");
            relayed.extend_from_slice(fields.join(" ").as_bytes());
            let body = eol + 2 + sizes.last().unwrap() + 2;
            relayed.extend_from_slice(&rest[eol..body]);
            rest = &rest[body..];
        }
        let mut out = Vec::new();
        let mut at = 0;
        while at < relayed.len() {
            let head = frame::parse(&relayed[at..])
                .unwrap()
                .expect("a whole frame");
            let Frame::Msg(m) = frame::lend(&relayed[at..at + head.len], head) else {
                panic!("not a message")
            };
            out.push((
                m.subject.to_vec(),
                m.reply.to_vec(),
                m.headers.to_vec(),
                m.payload.to_vec(),
            ));
            at += head.len;
        }
        out
    }

    fn composer(ids: Option<&str>, extra: &[(String, String)]) -> Composer {
        Composer::new("_INBOX.abc", ids, extra, 3, 0, Recorder::new()).unwrap()
    }

    #[test]
    fn a_frame_without_headers_is_a_pub_that_reads_back() {
        let mut c = composer(None, &[]);
        let mut out = Vec::new();
        c.compose_frame(&mut out, b"s.1", 10, 20, 7, 99, 40, true);
        c.compose_frame(&mut out, b"s.2", 11, 21, 8, 100, 8, true);
        assert!(out.starts_with(b"PUB s.1 _INBOX.abc.99 40\r\n"));
        let back = read_back(&out);
        assert_eq!(back.len(), 2);
        let (subject, reply, headers, payload) = &back[0];
        assert_eq!(
            (&subject[..], &reply[..], &headers[..]),
            (&b"s.1"[..], &b"_INBOX.abc.99"[..], &b""[..])
        );
        assert_eq!(payload.len(), 40);
        let stamp = Stamp::read(payload).unwrap();
        assert_eq!(
            (
                stamp.intended_ns,
                stamp.sent_ns,
                stamp.publisher,
                stamp.publisher_seq
            ),
            (10, 20, 3, 7)
        );
        assert!(payload[STAMP_LEN..].iter().all(|&b| b == b'.'));
        // A size below the stamp's carries the stamp whole, as `compose` does.
        assert_eq!(back[1].3.len(), STAMP_LEN);
        assert_eq!(back[1].1, b"_INBOX.abc.100");
    }

    #[test]
    fn the_id_is_patched_in_for_every_digit_count() {
        let extra = vec![
            ("X-Run".to_string(), "r 1".to_string()),
            ("b".to_string(), String::new()),
        ];
        let mut c = composer(Some("run-lat-0-"), &extra);
        let mut numbers = vec![0u64, u64::MAX];
        for d in 1..20 {
            numbers.push(10u64.pow(d) - 1);
            numbers.push(10u64.pow(d));
        }
        for &m in &numbers {
            let mut out = Vec::new();
            c.compose_frame(&mut out, b"s", 1, 2, m, m, 128, true);
            let back = read_back(&out);
            let (_, _, headers, payload) = &back[0];
            let expected =
                format!("NATS/1.0\r\nX-Run: r 1\r\nb: \r\nNats-Msg-Id: run-lat-0-{m}\r\n\r\n");
            assert_eq!(String::from_utf8_lossy(headers), expected, "message {m}");
            assert_eq!(payload.len(), 128);
            // The stamp keeps 48 bits of the number.
            assert_eq!(
                Stamp::read(payload).unwrap().publisher_seq,
                m & ((1 << 48) - 1)
            );
            // What async-nats would have sent carries the same id.
            let Outgoing {
                headers: Some(map), ..
            } = c.compose(1, 2, m, m, 128, true)
            else {
                panic!("headers")
            };
            assert_eq!(
                map.get(NATS_MESSAGE_ID).unwrap().as_str(),
                format!("run-lat-0-{m}")
            );
        }
    }

    #[test]
    fn extra_headers_alone_make_a_fixed_block() {
        let extra = vec![("X-A".to_string(), "1".to_string())];
        let mut c = composer(None, &extra);
        let mut out = Vec::new();
        c.compose_frame(&mut out, b"s", 1, 2, 5, 6, 30, true);
        c.compose_frame(&mut out, b"s", 1, 2, 123456, 7, 30, true);
        for (_, _, headers, payload) in read_back(&out) {
            assert_eq!(headers, b"NATS/1.0\r\nX-A: 1\r\n\r\n");
            assert_eq!(payload.len(), 30);
        }
    }

    #[test]
    fn only_scheduled_sends_past_the_warm_up_leave_a_lag_record() {
        let mut c = Composer::new("_INBOX.abc", None, &[], 0, 100, Recorder::new()).unwrap();
        let mut out = Vec::new();
        c.compose_frame(&mut out, b"s", 50, 60, 1, 1, 24, true);
        c.compose_frame(&mut out, b"s", 150, 160, 2, 2, 24, false);
        c.compose_frame(&mut out, b"s", 150, 170, 3, 3, 24, true);
        assert_eq!(c.take_send_lag().count(), 1);
    }

    /// Every `every`th message, whatever header block the publisher has,
    /// reads back with its own block plus `Nats-Trace-Dest`, and the same
    /// header through async-nats; the others are unchanged.
    #[test]
    fn a_sampled_message_adds_the_trace_destination_to_its_block() {
        let extra = [("X-A".to_string(), "1".to_string())];
        for (ids, extra, plain) in [
            (None, &[][..], ""),
            (None, &extra[..], "X-A: 1\r\n"),
            (Some("p-"), &extra[..], "X-A: 1\r\nNats-Msg-Id: p-{m}\r\n"),
        ] {
            let mut c = composer(ids, extra);
            c.trace(10, "_jsb.trace.t.3.");
            let mut out = Vec::new();
            for m in [19u64, 20] {
                c.compose_frame(&mut out, b"s", 1, 1000 + m, m, m, 40, true);
            }
            let back = read_back(&out);
            let block = |m: u64, trace: &str| {
                let lines = plain.replace("{m}", &m.to_string());
                if lines.is_empty() && trace.is_empty() {
                    String::new()
                } else {
                    format!("NATS/1.0\r\n{lines}{trace}\r\n")
                }
            };
            assert_eq!(String::from_utf8_lossy(&back[0].2), block(19, ""));
            let traced = "Nats-Trace-Dest: _jsb.trace.t.3.1020\r\n";
            assert_eq!(String::from_utf8_lossy(&back[1].2), block(20, traced));
            assert_eq!(back[1].1, b"_INBOX.abc.20");
            assert_eq!(back[1].3.len(), 40);
            assert_eq!(Stamp::read(&back[1].3).unwrap().sent_ns, 1020);
            let Outgoing {
                headers: Some(map), ..
            } = c.compose(1, 1030, 30, 30, 40, true)
            else {
                panic!("a sampled message has headers")
            };
            assert_eq!(map.get(TRACE_DEST).unwrap().as_str(), "_jsb.trace.t.3.1030");
            assert_eq!(c.traced(), 2);
        }
    }

    #[test]
    fn decimal_digits() {
        let mut buf = [0u8; 20];
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(1_234_567, &mut buf), b"1234567");
        assert_eq!(decimal(u64::MAX, &mut buf), b"18446744073709551615");
    }
}
