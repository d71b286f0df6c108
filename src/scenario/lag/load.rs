//! The origins' load, as the shared drive runs it ([`crate::drive`]): the
//! paced publishers with their PubAck window, no consumer on the origins
//! (the server's copying is the only reader). One publisher per origin,
//! each feeding its origin's one subject, so publisher *p*'s PubAcks are
//! origin *p*'s stream sequences: what the copy audit expects.

use std::collections::BTreeSet;

use anyhow::{Context as _, Result, anyhow};
use async_nats::jetstream;

use super::plan::{Mode, Plan};
use super::topology::Topology;
use crate::drive::{DriveOutcome, DriveSpec, StreamLoad};
use crate::profile::{PublishClient, PublishPlan};
use crate::record::ledger::{Event, LedgerShard};
use crate::scenario::Scope;

/// `rate` msg/s over warm-up and duration, split evenly over one
/// publisher per origin; nobody consumes. Through a route cut the
/// publishers stay off the node cut ([`DriveSpec::avoid_server`], set by
/// the variant) and are async-nats' all the same: should their link drop
/// they reconnect, where the direct client would end the run, and the
/// drive, which plans no fault of its own here, would choose that one.
pub fn spec(s: &Scope<'_>, plan: &Plan, mode: Mode, t: &Topology) -> DriveSpec {
    let mut publish = PublishPlan {
        publishers: t.origins.len(),
        ..plan.publish.clone()
    };
    if mode.struck() {
        publish.client = PublishClient::AsyncNats;
    }
    let streams = t.origins.iter();
    DriveSpec {
        streams: streams
            .map(|o| StreamLoad::new(&o.name, vec![o.subject()]))
            .collect(),
        ..DriveSpec::publish_only(
            s.drive_label(),
            "",
            Vec::new(),
            &publish,
            &s.scenario.common,
            plan.rate,
        )
    }
}

/// Per origin, the sequences its publisher's PubAcks confirmed stored:
/// each origin's part of the load, or the one origin's whole.
pub fn acked(o: &DriveOutcome, origins: usize) -> Result<Vec<BTreeSet<u64>>> {
    let ledgers: Vec<&LedgerShard> = match o.parts.is_empty() {
        true => vec![&o.ledger],
        false => o.parts.iter().map(|p| &p.outcome.ledger).collect(),
    };
    if ledgers.len() != origins {
        return Err(anyhow!(
            "the drive reported {} streams for {origins} origins: which origin stored \
             what cannot be told",
            ledgers.len()
        ));
    }
    Ok(ledgers.into_iter().map(persisted).collect())
}

fn persisted(ledger: &LedgerShard) -> BTreeSet<u64> {
    (1..=ledger.max_seq())
        .filter(|&s| ledger.count(s, Event::Persisted) > 0)
        .collect()
}

/// Nothing was consumed from the origins: what the copy delivered and
/// lost is the audit's to say, not the drive's.
pub fn uncounted_losses(o: &mut DriveOutcome) {
    let c = &mut o.counts;
    (c.lost, c.unattributed, c.client_dropped) = (0, 0, 0);
}

/// One message into each origin, confirmed: published before the load
/// and awaited in the copy, so the load starts on a copy whose sourcing
/// consumer is up (creating it takes the server 100-300 ms here, which
/// the first messages would otherwise wait out as lag). Set-up, not
/// load: its payload carries no stamp. The primers' sequences, by origin.
pub async fn prime(js: &jetstream::Context, subjects: &[String]) -> Result<Vec<u64>> {
    let mut seqs = Vec::new();
    for subject in subjects {
        let ack = js
            .publish(subject.clone(), u64::MAX.to_le_bytes().to_vec().into())
            .await
            .with_context(|| format!("priming {subject}"))?
            .await
            .with_context(|| format!("the PubAck of the primer on {subject}"))?;
        seqs.push(ack.sequence);
    }
    Ok(seqs)
}
