//! The origins' load, as the shared drive runs it ([`crate::drive`]): the
//! paced publishers with their PubAck window, no consumer on the origins
//! (the server's copying is the only reader). One publisher per origin,
//! each feeding its origin's one subject
//! ([`PublishPlan::subject_per_publisher`]), so publisher *p*'s PubAcks
//! are origin *p*'s stream sequences: what the copy audit expects.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use async_nats::jetstream;

use super::plan::{Mode, Plan};
use super::topology::Topology;
use crate::drive::{DriveOutcome, DriveSpec};
use crate::profile::{CommonPlan, MsgId, PublishClient, PublishPlan};
use crate::record::ledger::{Event, LedgerShard};

/// How long a publish may wait for its PubAck before it counts as missing.
const PUB_ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// `rate` msg/s over warm-up and duration, split evenly over one
/// publisher per origin; nobody consumes. Through a route cut the
/// publishers stay off the node cut ([`DriveSpec::avoid_server`], set by
/// the variant) and are async-nats' all the same: should their link drop
/// they reconnect, where the direct client would end the run, and the
/// drive, which plans no fault of its own here, would choose that one.
pub fn spec(common: &CommonPlan, plan: &Plan, mode: Mode, t: &Topology) -> DriveSpec {
    let subjects: Vec<String> = t.origins.iter().map(|o| o.subject()).collect();
    let mut publish = PublishPlan::simple(
        subjects.len(),
        plan.message_size,
        MsgId::None,
        plan.pub_ack_window,
        PUB_ACK_TIMEOUT,
    );
    publish.subject_per_publisher = true;
    if mode.outage().is_some() {
        publish.client = PublishClient::AsyncNats;
    }
    DriveSpec::publish_only(
        format!("{} {}", common.name(), mode.label()),
        // Asked only for what a stream's limits evicted: none here.
        &t.origins[0].name,
        subjects,
        &publish,
        common,
        plan.rate,
    )
}

/// Per origin, the sequences its publisher's PubAcks confirmed stored.
pub fn acked(o: &DriveOutcome, origins: usize) -> Result<Vec<BTreeSet<u64>>> {
    if o.acks.len() != origins {
        return Err(anyhow!(
            "the drive reported {} publishers for {origins} origins: which origin stored \
             what cannot be told",
            o.acks.len()
        ));
    }
    Ok(o.acks.iter().map(|a| persisted(&a.ledger)).collect())
}

fn persisted(ledger: &LedgerShard) -> BTreeSet<u64> {
    (1..=ledger.max_seq())
        .filter(|&s| ledger.count(s, Event::Persisted) > 0)
        .collect()
}

/// The drive merges its publishers' ledgers by stream sequence, as if
/// they shared one stream; here each fed an origin of its own, so the
/// stored counts are each origin's, summed. Nothing was consumed: what
/// the copy delivered and lost is the audit's to say.
pub fn count_per_origin(o: &mut DriveOutcome) {
    let (mut persisted, mut twice, mut duplicates) = (0, 0, 0);
    for a in &o.acks {
        let c = a.ledger.counts();
        persisted += c.persisted;
        twice += c.persisted_twice;
        duplicates += c.duplicates;
    }
    let c = &mut o.counts;
    (c.persisted, c.persisted_twice, c.duplicates) = (persisted, twice, duplicates);
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
