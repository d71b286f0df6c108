//! JetStream's subjects as the hand-written clients read and write them:
//! the numbers in a `$JS.ACK` reply subject and where a pull request goes.
//! The direct consumer, the reference loops and the priority-group client
//! share these, so one parser decides what a delivery's reply says.

/// Where pull requests for `consumer` of `stream` go (ADR-13).
pub fn next_subject(api_prefix: &str, stream: &str, consumer: &str) -> String {
    format!("{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{consumer}")
}

/// The numbers of a `$JS.ACK` reply subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckTokens {
    pub delivered: u64,
    pub stream_seq: u64,
    pub consumer_seq: u64,
    /// When the server stored the message, ns since the Unix epoch.
    pub timestamp_ns: u64,
    pub pending: u64,
}

/// Reads `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`
/// or its longer form with `<domain>.<account hash>.` before the stream and
/// a token after the pending count.
pub fn ack_tokens(reply: &str) -> Option<AckTokens> {
    ack_tokens_of(reply.as_bytes())
}

/// [`ack_tokens`] on the bytes of a frame read in place (the direct
/// consumer's): the same forms, no allocation.
#[inline]
pub fn ack_tokens_of(reply: &[u8]) -> Option<AckTokens> {
    let rest = reply.strip_prefix(b"$JS.ACK.")?;
    // One pass over the bytes marking the dots: 16% fewer instructions
    // a delivery on the direct consumer's path than a split iterator
    // (benches/instructions.rs); memchr's iterator costs more on 40 bytes.
    let mut tokens: [&[u8]; 12] = [b""; 12];
    let mut n = 0;
    let mut start = 0;
    for (i, &b) in rest.iter().enumerate() {
        if b == b'.' {
            *tokens.get_mut(n)? = &rest[start..i];
            n += 1;
            start = i + 1;
        }
    }
    *tokens.get_mut(n)? = &rest[start..];
    n += 1;
    let at = match n {
        7 => 2,
        9..=10 => 4,
        _ => return None,
    };
    let num = |i: usize| crate::wire::frame::parse_u64(tokens[at + i]);
    Some(AckTokens {
        delivered: num(0)?,
        stream_seq: num(1)?,
        consumer_seq: num(2)?,
        timestamp_ns: num(3)?,
        pending: num(4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_subjects_of_both_forms_give_their_numbers() {
        let t = ack_tokens("$JS.ACK.S.D.2.42.40.1700000000000000000.7").unwrap();
        assert_eq!(
            t,
            AckTokens {
                delivered: 2,
                stream_seq: 42,
                consumer_seq: 40,
                timestamp_ns: 1700000000000000000,
                pending: 7
            }
        );
        let long = ack_tokens("$JS.ACK.dom.HASH.S.D.1.5.6.1700000000000000000.0.r").unwrap();
        assert_eq!(
            (long.stream_seq, long.consumer_seq, long.pending),
            (5, 6, 0)
        );
        assert_eq!(ack_tokens("$JS.ACK.S.D.x.1.1.1.1"), None);
        assert_eq!(ack_tokens("_INBOX.a.b"), None);
        assert_eq!(ack_tokens("$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l.m.n"), None);
    }
}
