//! A load of several streams or durables, collected: one outcome per
//! stream (its publishers, against what it holds) and per durable (its
//! clients' deliveries, against what it is due, its losses attributed),
//! and every publisher together. One process runs such a load.

use std::time::Duration;

use futures::StreamExt;

use super::outcome::{DurablePart, StreamPart, merge};
use super::{ConsumerState, DriveOutcome, DriveSpec, RunContext};
use crate::consume::ConsumerReport;
use crate::load::{AckReport, SendReport};
use crate::record::ledger::{Event, LedgerShard};
use crate::streams::readback::{self, ReadBack};

/// How long a read-back waits for the next message before calling the
/// stream read.
const READ_IDLE: Duration = Duration::from_secs(2);
/// Requests to the server at once when reading many streams back.
const AT_ONCE: usize = 16;

/// A consumer client's report, or its error, with the durable it read.
pub(super) type ClientResult = (usize, Result<ConsumerReport, String>);

/// The whole (every publisher, the streams' counts summed) and its parts.
pub(super) async fn split(
    ctx: &RunContext,
    spec: &DriveSpec,
    (sends, acks): (Vec<SendReport>, Vec<AckReport>),
    clients: Vec<ClientResult>,
    states: &[Option<ConsumerState>],
    (t0_ns, record_from_ns): (u64, u64),
) -> (DriveOutcome, Vec<StreamPart>) {
    let streams = spec.streams.len().max(1);
    let mut whole = merge(sends.clone(), Vec::new(), Vec::new(), t0_ns, record_from_ns);
    let asks: Vec<_> = (spec.streams.iter())
        .map(|s| {
            let (js, name, read) = (
                ctx.provisioner.jetstream().clone(),
                s.name.clone(),
                s.read_back,
            );
            async move {
                match read {
                    true => Some(readback::read_stream(&js, &name, READ_IDLE).await),
                    false => None,
                }
            }
        })
        .collect();
    let reads: Vec<Option<anyhow::Result<ReadBack>>> = futures::stream::iter(asks)
        .buffered(AT_ONCE)
        .collect()
        .await;
    let mut by_stream: Vec<(Vec<SendReport>, Vec<AckReport>)> =
        (0..streams).map(|_| Default::default()).collect();
    for (p, (send, ack)) in sends.into_iter().zip(acks).enumerate() {
        by_stream[p % streams].0.push(send);
        by_stream[p % streams].1.push(ack);
    }
    let mut clients: Vec<Option<ClientResult>> = clients.into_iter().map(Some).collect();
    let mut parts = Vec::new();
    for ((s, stream), ((sends, acks), read)) in spec
        .streams
        .iter()
        .enumerate()
        .zip(by_stream.into_iter().zip(reads))
    {
        let outcome = merge(sends, acks, Vec::new(), t0_ns, record_from_ns);
        let (read, read_error) = match read {
            Some(Ok(read)) => (Some(read), None),
            Some(Err(e)) => (None, Some(format!("{e:#}"))),
            None => (None, None),
        };
        let mut durables = Vec::new();
        for (r, reader) in spec
            .readers
            .iter()
            .enumerate()
            .filter(|(_, r)| r.stream == s)
        {
            let mine: Vec<ClientResult> = clients
                .iter_mut()
                .filter(|c| c.as_ref().is_some_and(|(of, _)| *of == r))
                .filter_map(Option::take)
                .collect();
            let state = states.get(r).copied().flatten();
            let due = Due {
                stream: &outcome.ledger,
                read: read.as_ref(),
                filter: reader
                    .filter
                    .as_ref()
                    .map(|f| f.iter().map(|&i| stream.subjects[i].as_str()).collect()),
                preloaded: stream.due.as_ref(),
            };
            let part = durable_part(ctx, spec, r, mine, state, due, (t0_ns, record_from_ns));
            durables.push(part.await);
        }
        let stored = read
            .as_ref()
            .map(|r| r.reconcile_sequences(&outcome.ledger));
        parts.push(StreamPart {
            name: stream.name.clone(),
            outcome,
            stored,
            read_error,
            durables,
        });
    }
    sum_streams(&mut whole, &parts);
    (whole, parts)
}

/// What a durable must deliver: what its stream stored (the publishers'
/// PubAcks and a fill's sequences), or what its filter selects of the
/// stream read back.
struct Due<'a> {
    stream: &'a LedgerShard,
    read: Option<&'a ReadBack>,
    filter: Option<Vec<&'a str>>,
    preloaded: Option<&'a crate::record::ledger::SeqSet>,
}

impl Due<'_> {
    /// The due as persisted marks; `None` when it cannot be known.
    fn ledger(&self) -> Option<LedgerShard> {
        let mut due = LedgerShard::new();
        match (&self.filter, self.read) {
            (Some(filters), Some(read)) => {
                for (seq, &here) in read.present.iter().enumerate() {
                    let on = read
                        .subject(seq as u64)
                        .is_some_and(|s| filters.contains(&s));
                    if here && on {
                        due.mark(seq as u64, Event::Persisted);
                    }
                }
            }
            (Some(_), None) => return None,
            (None, _) => {
                let stored = (1..=self.stream.max_seq())
                    .filter(|&seq| self.stream.count(seq, Event::Persisted) > 0);
                for seq in stored.chain(self.preloaded.into_iter().flat_map(|d| d.iter())) {
                    due.mark(seq, Event::Persisted);
                }
            }
        }
        Some(due)
    }
}

/// One durable's outcome: its clients' deliveries against its due.
async fn durable_part(
    ctx: &RunContext,
    spec: &DriveSpec,
    reader: usize,
    clients: Vec<ClientResult>,
    state: Option<ConsumerState>,
    due: Due<'_>,
    (t0_ns, record_from_ns): (u64, u64),
) -> DurablePart {
    let r = &spec.readers[reader];
    let mut reports = Vec::new();
    let mut error = None;
    for (_, result) in clients {
        match result {
            Ok(report) => reports.push(report),
            Err(e) => error = error.or(Some(e)),
        }
    }
    let mut o = merge(Vec::new(), Vec::new(), reports, t0_ns, record_from_ns);
    let due_ledger = due.ledger();
    match &due_ledger {
        Some(due) => {
            o.ledger.merge(due);
            o.counts = super::outcome::recount(&o);
        }
        None => o
            .errors
            .push("what its filter selected is unknown: the stream was not read back".into()),
    }
    o.server_state = state;
    if let Some(e) = &error {
        o.errors.push(format!("consumer: {e}"));
    }
    let stream = &spec.streams[r.stream].name;
    o.attribute_losses(ctx.provisioner.jetstream(), stream)
        .await;
    DurablePart {
        name: r.consumer.durable.clone(),
        filters: due.filter.iter().flatten().map(|f| f.to_string()).collect(),
        outcome: o,
        error,
        due_known: due_ledger.is_some(),
    }
}

/// Every publisher together: their streams' PubAck figures and counts
/// summed (sequences repeat across streams, so their ledgers are never
/// merged into one).
fn sum_streams(whole: &mut DriveOutcome, streams: &[StreamPart]) {
    for s in streams {
        let o = &s.outcome;
        whole.pub_ack_intended.merge(&o.pub_ack_intended);
        whole.pub_ack_sent.merge(&o.pub_ack_sent);
        let (sum, c) = (&mut whole.counts, &o.counts);
        sum.persisted += c.persisted;
        sum.persisted_twice += c.persisted_twice;
        sum.duplicates += c.duplicates;
        sum.publish_errors += c.publish_errors;
        sum.refused_by_limit += c.refused_by_limit;
    }
}
