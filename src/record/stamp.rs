//! The 24-byte stamp at the front of every payload jsbench publishes.
//!
//! Timestamps travel in the payload, not in a header: writing and reading
//! 16 bytes costs under a nanosecond, while a timestamp header costs 50-60 ns
//! to parse and 10-20% of pipelined publish throughput (NOTES-async-nats.md).
//!
//! Layout, little-endian:
//! `[0..8)` intended send time, `[8..16)` actual send time (both ns on
//! [`crate::record::clock`]), `[16..24)` origin: publisher index (high 16 bits) and
//! the publisher's own message number (low 48 bits).

/// Bytes the stamp occupies; the smallest message jsbench can send.
pub const STAMP_LEN: usize = 24;

const SEQ_BITS: u32 = 48;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// What a consumer learns from a payload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub publisher: u16,
    pub publisher_seq: u64,
}

impl Stamp {
    /// Writes the stamp into the first [`STAMP_LEN`] bytes of `buf`.
    #[inline]
    pub fn write(&self, buf: &mut [u8]) {
        let origin = (u64::from(self.publisher) << SEQ_BITS) | (self.publisher_seq & SEQ_MASK);
        buf[0..8].copy_from_slice(&self.intended_ns.to_le_bytes());
        buf[8..16].copy_from_slice(&self.sent_ns.to_le_bytes());
        buf[16..24].copy_from_slice(&origin.to_le_bytes());
    }

    /// Reads a stamp; `None` when the payload is too short to hold one
    /// (a message jsbench did not publish).
    #[inline]
    pub fn read(buf: &[u8]) -> Option<Stamp> {
        if buf.len() < STAMP_LEN {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        let origin = word(16);
        Some(Stamp {
            intended_ns: word(0),
            sent_ns: word(8),
            publisher: (origin >> SEQ_BITS) as u16,
            publisher_seq: origin & SEQ_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let stamp = Stamp {
            intended_ns: 1_764_000_000_123_456_789,
            sent_ns: 1_764_000_000_123_999_000,
            publisher: 7,
            publisher_seq: 123_456_789_012,
        };
        let mut buf = [0u8; 32];
        stamp.write(&mut buf);
        assert_eq!(Stamp::read(&buf), Some(stamp));
    }

    #[test]
    fn short_payload_has_no_stamp() {
        assert_eq!(Stamp::read(&[0u8; STAMP_LEN - 1]), None);
    }
}
