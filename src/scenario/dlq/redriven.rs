//! The dead letters sent back to their stream, and sent again.

use std::time::Duration;

use anyhow::{Context, Result, anyhow};

use super::readback::Evidence;
use crate::dlq::redrive;
use crate::drive::RunContext;
use crate::record::metrics::Direction;
use crate::scenario::VariantNames;
use crate::scenario::checks::{self, StreamCount};
use crate::variant::{Invariant, VariantResult};

/// How long the healthy durable may take to read a redrive, and how long
/// it must then stay quiet (a second delivery of a redriven message would
/// come within it).
const REDRIVE_DEADLINE: Duration = Duration::from_secs(30);
const REDRIVE_QUIET: Duration = Duration::from_millis(300);

/// A variant's redrive: two passes over the dead letters, what the
/// durable read of the first, and the source stream's count around the
/// second.
pub(super) struct Redriven {
    letters: u64,
    first: redrive::Pass,
    second: redrive::Pass,
    received: redrive::Received,
    stored_before_second: StreamCount,
    stored_after_second: StreamCount,
}

/// Sends the letters read back onto their subjects, reads them with the
/// variant's durable (healthy now: it acks everything), then sends them
/// again: the second pass must be answered as duplicates.
pub(super) async fn redrive(ctx: &RunContext, n: &VariantNames, e: &Evidence) -> Result<Redriven> {
    let contents = e.contents.as_ref();
    let contents = contents.map_err(|e| anyhow!("the DLQ could not be read: {e:#}"))?;
    let (letters, names) = (&contents.letters, &e.pipeline.spec.handler.origin_headers);
    let (stream, durable) = (&n.stream, &n.durable);
    let js = ctx.provisioner.jetstream();
    let first = redrive::publish(js, letters, names).await;
    let consumer: async_nats::jetstream::consumer::PullConsumer = js
        .get_stream(stream)
        .await
        .with_context(|| format!("opening {stream} to read the redrive"))?
        .get_consumer(durable)
        .await
        .map_err(|e| anyhow!("binding to {durable} to read the redrive: {e}"))?;
    let deadline = tokio::time::Instant::now() + REDRIVE_DEADLINE;
    let received =
        redrive::consume(&consumer, &first, letters, names, REDRIVE_QUIET, deadline).await?;
    let count = || async {
        let info = ctx.provisioner.stream_info(stream).await;
        info.map(|i| i.state.messages).map_err(|e| format!("{e:#}"))
    };
    let stored_before_second = count().await;
    let second = redrive::publish(js, letters, names).await;
    Ok(Redriven {
        letters: letters.len() as u64,
        first,
        second,
        received,
        stored_before_second,
        stored_after_second: count().await,
    })
}

/// The redrive's figures and checks.
pub(super) fn redrive_results(redriven: &Result<Redriven>, r: &mut VariantResult) {
    const NAMES: [&str; 3] = [
        "every dead letter redriven",
        "a second redrive stores nothing",
        "every redriven message consumed once",
    ];
    let d = match redriven {
        Ok(d) if d.letters > 0 => d,
        Ok(_) => {
            for name in NAMES {
                r.invariants
                    .push(Invariant::not_applicable(name, "nothing was dead-lettered"));
            }
            return;
        }
        Err(e) => {
            for name in NAMES {
                r.invariants.push(Invariant::check(
                    name,
                    false,
                    format!("the redrive failed: {e:#}"),
                ));
            }
            return;
        }
    };
    let (first, second, got) = (&d.first, &d.second, &d.received);
    r.metric("redrive_rate", "msg/s", first.rate(), Direction::Higher);
    r.count("redriven", first.stored);
    r.count("redrive_second_pass_duplicates", second.duplicates);
    r.latency("redrive_pub_ack_latency", &first.pub_ack);
    r.latency("redrive_e2e_latency", &got.e2e);
    let errors = |p: &redrive::Pass| {
        if p.errors.is_empty() {
            String::new()
        } else {
            format!("; e.g. {}", p.errors.join("; "))
        }
    };
    r.invariants.push(Invariant::check(
        NAMES[0],
        first.failed == 0 && first.stored == d.letters,
        format!(
            "{} letters: {} stored back, {} already there, {} failed{}",
            d.letters,
            first.stored,
            first.duplicates,
            first.failed,
            errors(first)
        ),
    ));
    let unchanged =
        d.stored_before_second.is_ok() && d.stored_before_second == d.stored_after_second;
    r.invariants.push(Invariant::check(
        NAMES[1],
        second.duplicates == d.letters && second.stored == 0 && unchanged,
        format!(
            "second pass: {} flagged duplicate, {} stored, {} failed; the stream held {} \
             messages before it and {} after{}",
            second.duplicates,
            second.stored,
            second.failed,
            checks::shown(&d.stored_before_second),
            checks::shown(&d.stored_after_second),
            errors(second)
        ),
    ));
    let missing = first
        .sent_ns
        .keys()
        .filter(|id| !got.deliveries.contains_key(*id))
        .count();
    let twice = got.deliveries.values().filter(|&&n| n > 1).count();
    r.invariants.push(Invariant::check(
        NAMES[2],
        missing == 0 && twice == 0 && got.others == 0 && got.altered == 0,
        format!(
            "{} redriven: {missing} never received, {twice} received more than once, {} \
             payloads altered, {} other deliveries{}",
            first.sent_ns.len(),
            got.altered,
            got.others,
            if got.errors.is_empty() {
                String::new()
            } else {
                format!("; {}", got.errors.join("; "))
            }
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two letters redriven, read once each, the second pass flagged.
    fn clean() -> Redriven {
        let ids = ["redrive.S.c.3", "redrive.S.c.5"];
        let pass = |stored, duplicates| redrive::Pass {
            letters: 2,
            stored,
            duplicates,
            sent_ns: ids.iter().map(|id| (id.to_string(), 1)).collect(),
            ..Default::default()
        };
        Redriven {
            letters: 2,
            first: pass(2, 0),
            second: pass(0, 2),
            received: redrive::Received {
                deliveries: ids.iter().map(|id| (id.to_string(), 1)).collect(),
                ..Default::default()
            },
            stored_before_second: Ok(10),
            stored_after_second: Ok(10),
        }
    }

    fn broken(d: Redriven) -> Vec<String> {
        let mut r = VariantResult::new("v");
        redrive_results(&Ok(d), &mut r);
        r.broken().into_iter().map(String::from).collect()
    }

    /// The redrive checks with the server's and the consumer's side forged:
    /// a second pass stored anew (an id not derived from the origin), a
    /// redriven message read twice, one never read.
    #[test]
    fn a_redrive_stored_twice_or_read_twice_or_never_fails_its_check() {
        assert!(broken(clean()).is_empty());
        let mut d = clean();
        d.second.stored = 2;
        d.second.duplicates = 0;
        d.stored_after_second = Ok(12);
        assert_eq!(broken(d), ["a second redrive stores nothing"]);
        let mut d = clean();
        d.received.deliveries.insert("redrive.S.c.3".into(), 2);
        assert_eq!(broken(d), ["every redriven message consumed once"]);
        let mut d = clean();
        d.received.deliveries.remove("redrive.S.c.5");
        assert_eq!(broken(d), ["every redriven message consumed once"]);
        let mut d = clean();
        d.first.stored = 1;
        d.first.failed = 1;
        assert_eq!(broken(d), ["every dead letter redriven"]);
    }
}
