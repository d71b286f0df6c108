//! The per-message cost jsbench adds on its own hot paths, which must stay
//! far below the server's cost per message (a few microseconds): what a
//! consumer does per delivery besides the ack, and what a publisher does per
//! message besides handing it to the client.

use std::hint::black_box;

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jsbench::load::IdBuilder;
use jsbench::record::clock;
use jsbench::record::histogram::Recorder;
use jsbench::record::ledger::{Event, LedgerShard};
use jsbench::record::stamp::Stamp;
use support::{Bookkeeping, ID_PREFIX, SUBJECT, composer};

mod support;

const MESSAGES: u64 = 100_000;

fn consumer_bookkeeping(c: &mut Criterion) {
    let mut group = c.benchmark_group("consumer");
    group.throughput(Throughput::Elements(1));
    // As a consumer keeps them: with per-second interval histograms.
    let mut bookkeeping = Bookkeeping::new();
    let mut seq = 0u64;
    group.bench_function("per_delivery", |b| {
        b.iter(|| {
            seq = seq % MESSAGES + 1;
            bookkeeping.deliver(seq);
        })
    });
    let payload = bookkeeping.payload().to_vec();
    group.bench_function("clock_read", |b| b.iter(|| black_box(clock::now_ns())));
    group.bench_function("stamp_read", |b| {
        b.iter(|| Stamp::read(black_box(&payload)))
    });
    let mut marks = LedgerShard::new();
    let mut s = 0u64;
    group.bench_function("ledger_mark", |b| {
        b.iter(|| {
            s = s % MESSAGES + 1;
            marks.mark(black_box(s), Event::Delivered);
        })
    });
    let mut r = Recorder::new();
    let mut v = 1_000u64;
    group.bench_function("histogram_record", |b| {
        b.iter(|| {
            v = (v * 7 + 13) % 10_000_000;
            r.record(black_box(v));
        })
    });
    // What the clock is made of: the bare cycle counter (the floor of any
    // reading) and the monotonic clock it follows (the clock before
    // issue 35, and the fallback), read in the same session.
    group.bench_function("cycle_counter", |b| {
        b.iter(|| black_box(jsbench::record::tsc::ticks()))
    });
    group.bench_function("monotonic_read", |b| {
        b.iter(|| black_box(jsbench::record::tsc::monotonic_ns()))
    });
    group.finish();
}

fn publisher_bookkeeping(c: &mut Criterion) {
    let mut group = c.benchmark_group("publisher");
    group.throughput(Throughput::Elements(1));
    // An unpaced schedule, as a rate-max publisher runs: the closed loop
    // whose per-message cost is the publisher's ceiling; what the sending
    // loop does per message, through the same calls.
    let (schedule, pacer) = support::unpaced();
    let mut plain = composer(None);
    let mut k = 0u64;
    // The direct sender's frame buffer, emptied as a flush would.
    let mut frames: Vec<u8> = Vec::with_capacity(64 * 1024);
    group.bench_function("per_message", |b| {
        b.iter(|| {
            k += 1;
            let (intended, sent) = pacer.send_at(schedule.intended_ns(k));
            plain.compose_frame(&mut frames, SUBJECT, intended, sent, k, k, 128, true);
            if frames.len() >= 32 * 1024 {
                black_box(&frames);
                frames.clear();
            }
        })
    });
    // The same message for async-nats' publish (what a TLS or faulted
    // variant still sends through).
    group.bench_function("per_message_async_nats", |b| {
        b.iter(|| {
            k += 1;
            let (intended, sent) = pacer.send_at(schedule.intended_ns(k));
            black_box(plain.compose(intended, sent, k, k, 128, true));
        })
    });
    let mut stamped = vec![b'.'; 128];
    group.bench_function("stamp_write", |b| {
        b.iter(|| {
            k += 1;
            Stamp {
                intended_ns: k,
                sent_ns: k + 1,
                publisher: 0,
                publisher_seq: k,
            }
            .write(black_box(&mut stamped));
        })
    });
    let mut with_id = composer(Some(ID_PREFIX));
    group.bench_function("per_message_with_id", |b| {
        b.iter(|| {
            k += 1;
            let (intended, sent) = pacer.send_at(schedule.intended_ns(k));
            with_id.compose_frame(&mut frames, SUBJECT, intended, sent, k, k, 128, true);
            if frames.len() >= 32 * 1024 {
                black_box(&frames);
                frames.clear();
            }
        })
    });
    group.bench_function("per_message_with_id_async_nats", |b| {
        b.iter(|| {
            k += 1;
            let (intended, sent) = pacer.send_at(schedule.intended_ns(k));
            black_box(with_id.compose(intended, sent, k, k, 128, true));
        })
    });
    // The header block alone, to show what the id path adds and why.
    let mut ids = IdBuilder::new(ID_PREFIX);
    group.bench_function("msg_id_header", |b| {
        b.iter(|| {
            k += 1;
            let mut headers = HeaderMap::new();
            headers.insert(NATS_MESSAGE_ID, ids.value(k));
            black_box(headers);
        })
    });
    group.finish();
}

/// Criterion draws its HTML report with plotters, which jsbench builds
/// without system fonts; the bundled font must be registered first.
fn config() -> Criterion {
    jsbench::report::fonts::ensure_registered().expect("the bundled font registers");
    Criterion::default()
}

criterion_group! {
    name = benches;
    config = config();
    targets = consumer_bookkeeping, publisher_bookkeeping
}
criterion_main!(benches);
