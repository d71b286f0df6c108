//! The hot paths allocate nothing they can avoid. Allocation counts are
//! deterministic, unlike timings, so they are asserted here; the timings are
//! in `cargo bench --bench hot_path`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use jsbench::load::{IdBuilder, MessageBuilder};
use jsbench::record::clock;
use jsbench::record::histogram::Recorder;
use jsbench::record::ledger::{Event, LedgerShard};
use jsbench::record::stamp::Stamp;
use jsbench::record::timeline::Timeline;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made on this thread while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

const N: u64 = 100_000;

#[test]
fn consumer_bookkeeping_allocates_nothing_per_delivery() {
    let now = clock::now_ns();
    let mut payload = vec![b'.'; 128];
    Stamp {
        intended_ns: now,
        sent_ns: now,
        publisher: 0,
        publisher_seq: 1,
    }
    .write(&mut payload);
    let mut e2e = Recorder::new();
    let mut ledger = LedgerShard::new();
    let mut timeline = Timeline::per_second(now);
    timeline.mark(now + 10_000_000_000); // size the timeline for the span up front
    // Enough deliveries for the ledger to open and seal many chunks.
    const DELIVERIES: u64 = 100_000;
    let count = allocations(|| {
        for seq in 1..=DELIVERIES {
            let t = clock::now_ns();
            let stamp = Stamp::read(&payload).unwrap();
            ledger.mark(seq, Event::Delivered);
            timeline.mark(t);
            e2e.record_between(stamp.intended_ns, t);
            ledger.mark(seq, Event::Acked);
        }
    });
    // Only the ledger allocates: a chunk per 4,096 sequences per event
    // (Delivered, Acked) as it opens, and its sealed form behind.
    let chunks = 2 * DELIVERIES.div_ceil(4_096);
    assert!(
        count <= 4 * chunks,
        "{count} allocations in {DELIVERIES} deliveries, {chunks} ledger chunks opened"
    );
}

#[test]
fn building_a_message_allocates_once_per_hundreds_of_messages() {
    let mut builder = MessageBuilder::new("_INBOX.abcdefghijklmnopqrstuv");
    let mut kept = Vec::with_capacity(1024);
    let count = allocations(|| {
        for k in 0..N {
            let stamp = Stamp {
                intended_ns: k,
                sent_ns: k,
                publisher: 0,
                publisher_seq: k,
            };
            let message = builder.build(stamp, k, 128);
            // Hold a window of messages, as the client's queue does.
            if kept.len() == 1024 {
                kept.clear();
            }
            kept.push(message);
        }
    });
    let per_message = count as f64 / N as f64;
    assert!(per_message < 0.02, "{count} allocations for {N} messages");
}

#[test]
fn a_msg_id_costs_only_the_header_value() {
    let mut ids = IdBuilder::new("0123456789AB-publish-rate-max.id-unique-0-");
    let count = allocations(|| {
        for m in 0..N {
            std::hint::black_box(ids.value(m));
        }
    });
    // async-nats' HeaderValue owns a String: one allocation, no formatting.
    assert_eq!(count, N, "{count} allocations for {N} ids");
}

/// The direct consumer's whole per-delivery path: a frame parsed in place,
/// its reply subject read, the bookkeeping, the `+ACK` appended, and the
/// ack recorded once written.
#[test]
fn the_direct_consumer_allocates_nothing_per_delivery() {
    use jsbench::consume::direct::Direct;
    use jsbench::consume::{ConsumerConfig, ConsumerProgress};
    use jsbench::wire::frame;
    use std::sync::Arc;

    let now = clock::now_ns();
    let config = ConsumerConfig::acking_all("S", N, now);
    let mut direct = Direct::new(config, Arc::new(ConsumerProgress::default()), b"_INBOX.a");
    // One read's worth of deliveries, re-read with new sequences each round.
    const PER_READ: u64 = 500;
    let mut payload = vec![b'.'; 128];
    Stamp {
        intended_ns: now,
        sent_ns: now,
        publisher: 0,
        publisher_seq: 1,
    }
    .write(&mut payload);
    let reads: Vec<Vec<u8>> = (0..N / PER_READ)
        .map(|r| {
            let mut read = Vec::new();
            for k in 1..=PER_READ {
                let seq = r * PER_READ + k;
                let reply = format!("$JS.ACK.S.D.1.{seq}.{seq}.1700000000000000000.0");
                read.extend_from_slice(
                    format!("MSG s.0 1 {reply} {}\r\n", payload.len()).as_bytes(),
                );
                read.extend_from_slice(&payload);
                read.extend_from_slice(b"\r\n");
            }
            read
        })
        .collect();
    let mut out = Vec::with_capacity(64 * 1024);
    let count = allocations(|| {
        for read in &reads {
            let mut at = 0;
            while let Some(head) = frame::parse(&read[at..]).unwrap() {
                let whole = &read[at..at + head.len];
                direct.on_frame(frame::lend(whole, head), &mut out, clock::now_ns());
                at += head.len;
            }
            direct.flushed(clock::now_ns());
            out.clear();
        }
    });
    assert_eq!(direct.report().received, N);
    assert_eq!(direct.report().ledger.counts().acked, N);
    // As above, only the ledger's chunks (Delivered, Acked) and the first
    // deliveries' set allocate, per 4,096 sequences.
    let chunks = 3 * N.div_ceil(4_096);
    assert!(
        count <= 4 * chunks,
        "{count} allocations in {N} deliveries, {chunks} chunks opened"
    );
}

#[test]
fn a_direct_frame_allocates_nothing_once_the_buffer_has_grown() {
    use jsbench::load::Composer;
    let extra = vec![("X-Run".to_string(), "a".to_string())];
    let mut composer =
        Composer::new("_INBOX.abc", Some("run-0-"), &extra, 0, 0, Recorder::new()).unwrap();
    let mut frames: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut send = |k: u64, frames: &mut Vec<u8>| {
        composer.compose_frame(frames, b"s.1", k, k + 1, k, k, 128, true);
        if frames.len() >= 32 * 1024 {
            frames.clear();
        }
    };
    // The lag histogram grows to the values it sees first.
    for k in 0..N {
        send(k, &mut frames);
    }
    let n = allocations(|| {
        for k in N..2 * N {
            send(k, &mut frames);
        }
    });
    assert_eq!(n, 0, "{n} allocations in {N} frames");
}
