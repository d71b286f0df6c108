//! What benches/hot_path.rs times and benches/instructions.rs counts,
//! written once so that the time and the count are of the same code. Each
//! bench uses a part of it.

#![allow(dead_code)]

use std::hint::black_box;

use jsbench::load::Composer;
use jsbench::record::clock;
use jsbench::record::histogram::Recorder;
use jsbench::record::ledger::{Event, LedgerShard};
use jsbench::record::schedule::{Pacer, Schedule};
use jsbench::record::stamp::Stamp;
use jsbench::record::timeline::Timeline;

/// A publisher's Nats-Msg-Id prefix, as a run names them.
pub const ID_PREFIX: &str = "101839ABCDEF-publish-rate-max.id-unique-0-";
/// A publisher's subject, as a run names them.
pub const SUBJECT: &[u8] = b"jsb.101839ABCDEF.publish.rate-max.0";

/// What the consumer loop keeps per delivery besides the ack, as a
/// consumer keeps it: per-second interval histograms, the ledger, the
/// timeline, and a delivery's stamped payload.
pub struct Bookkeeping {
    payload: Vec<u8>,
    e2e_intended: Recorder,
    e2e_sent: Recorder,
    ledger: LedgerShard,
    timeline: Timeline,
}

impl Bookkeeping {
    pub fn new() -> Self {
        let mut payload = vec![b'.'; 128];
        let now = clock::now_ns();
        Stamp {
            intended_ns: now - 250_000,
            sent_ns: now - 200_000,
            publisher: 3,
            publisher_seq: 42,
        }
        .write(&mut payload);
        Bookkeeping {
            payload,
            e2e_intended: Recorder::with_intervals(),
            e2e_sent: Recorder::with_intervals(),
            ledger: LedgerShard::new(),
            timeline: Timeline::per_second(now),
        }
    }

    /// The payload a delivery carries.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Delivery `seq`'s bookkeeping: the clock read, the stamp, two
    /// latencies recorded, the ledger marked delivered and acked.
    #[inline(always)]
    pub fn deliver(&mut self, seq: u64) {
        let t = clock::now_ns();
        let stamp = Stamp::read(black_box(&self.payload)).unwrap();
        self.ledger.mark(seq, Event::Delivered);
        self.timeline.mark(t);
        self.e2e_intended.record_between(stamp.intended_ns, t);
        self.e2e_sent.record_between(stamp.sent_ns, t);
        self.ledger.mark(seq, Event::Acked);
    }
}

/// An unpaced schedule, as a rate-max publisher runs (the closed loop
/// whose per-message cost is the publisher's ceiling), and its pacer.
pub fn unpaced() -> (Schedule, Pacer) {
    let schedule = Schedule {
        t0_ns: clock::now_ns(),
        total_rate: None,
        stride: 1,
        offset: 0,
        total_messages: 0,
        end_ns: u64::MAX,
        arrivals: None,
    };
    let pacer = Pacer::new(schedule.interval());
    (schedule, pacer)
}

/// A publisher's composer, with a Nats-Msg-Id prefix or without.
pub fn composer(msg_id: Option<&str>) -> Composer {
    Composer::new(
        "_INBOX.abcdefghijklmnopqrstuv",
        msg_id,
        &[],
        0,
        0,
        Recorder::with_intervals(),
    )
    .expect("a composer without extra headers")
}
