//! `kind = "power"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::shared::{Offer, Paced, needs_file_storage, take, variants};
use crate::profile::{CommonPlan, MsgId, PacedLoad, Problems, Section};

/// How a variant's server goes down at the end of its load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// SIGKILL alone: the process dies, what it wrote stays in the page
    /// cache (the mount's memory) and reaches the restarted server.
    Kill,
    /// SIGKILL, then the power: whatever was not fsynced is gone. On a
    /// cluster every node at once, as when a site loses its power.
    Power,
    /// On a cluster, the stream leader's node alone loses its power; the
    /// others keep theirs (not applicable to one server: that is `power`).
    PowerLeader,
}

impl Cut {
    /// As the profile spells it, in declaration order.
    pub fn word(self) -> &'static str {
        ["kill", "power", "power_leader"][self as usize]
    }

    /// Which nodes it strikes, as the drive's fault names them.
    pub fn strikes(self) -> &'static str {
        match self {
            Cut::Kill | Cut::Power => "every node",
            Cut::PowerLeader => "the stream leader's node",
        }
    }
}

/// The `power` scenario: a steady load on a server of the variant's own
/// whose store is on the power-loss filesystem, then the cut, the restart
/// and the reconciliation.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Paced, with a unique Nats-Msg-Id per message.
    pub load: PacedLoad,
    /// One variant per cut, in this order.
    pub cuts: Vec<Cut>,
    /// Sync the new stream's files before the load, as the server's
    /// interval would have for a stream older than it: the cut may then
    /// take the messages but not the stream itself.
    pub sync_before_load: bool,
}

/// The paced publishers with their window and timeout; no durable reads
/// (the stream is read back after the restart instead).
const OFFER: Offer = Offer::PACED
    .and(&["pub_ack_window", "pub_ack_timeout"])
    .less(&["consumer", "behaviour"]);

/// The PubAck timeout when the profile sets none: every send still
/// unanswered at the kill waits this long (twice: the flush, then the
/// PubAck) before the variant goes on to the restart, so it is short;
/// a PubAck on the mount takes milliseconds at the rates this runs.
pub const PUB_ACK_TIMEOUT: Duration = Duration::from_secs(2);

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    needs_file_storage(
        &section,
        problems,
        "the power scenario kills the server and cuts its power: its streams need \
         storage = \"file\" (a memory stream has nothing to survive with)",
    );
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.common("power", problems);
    let load = shared.paced(
        &common,
        Paced {
            // Read back by (publisher, number): a loss is named whatever
            // sequences the restarted stream hands out.
            msg_id: MsgId::Unique,
            pub_ack_timeout: Some(PUB_ACK_TIMEOUT),
            ..Paced::of("power", 500)
        },
        problems,
    );
    crate::profile::publish::refuse_direct(
        &load.publish,
        "the power scenario kills the server and the direct client does not reconnect",
        section.prefix,
        problems,
    );
    let cuts = variants(
        &mut k,
        "cut",
        vec![Cut::Kill, Cut::Power],
        "\"kill\", \"power\" or \"power_leader\" (a cluster's), e.g. cut = [\"kill\", \"power\"]",
    );
    let plan = Plan {
        load,
        cuts,
        sync_before_load: k.or("sync_before_load", false),
    };
    k.finish(problems);
    Some((common, plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{KindPlan, one_scenario};

    fn plan(body: &str) -> Result<Plan, String> {
        one_scenario("power", body).map(|s| match s.kind {
            KindPlan::Power(p) => p,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn every_cut_is_worded_as_the_profile_spells_it() {
        for cut in [Cut::Kill, Cut::Power, Cut::PowerLeader] {
            assert_eq!(serde_json::to_value(cut).unwrap(), cut.word());
        }
    }

    #[test]
    fn cuts_default_to_both_and_bad_ones_are_named() {
        let p = plan("rate = 200\n").unwrap();
        assert_eq!(p.cuts, [Cut::Kill, Cut::Power]);
        assert!(!p.sync_before_load);
        assert!(
            plan("rate = 9\nsync_before_load = true\n")
                .unwrap()
                .sync_before_load
        );
        let e = plan("sync_before_load = \"yes\"\n").unwrap_err();
        assert!(e.contains("scenario[0].sync_before_load"), "{e}");
        assert_eq!(p.load.publish.msg_id, MsgId::Unique);
        assert_eq!(p.load.publish.pub_ack_timeout, PUB_ACK_TIMEOUT);
        let e = plan("cut = [\"fire\"]\n").unwrap_err();
        assert!(e.contains("scenario[0].cut") && e.contains("fire"), "{e}");
        let p = plan("rate = 200\ncut = [\"power_leader\", \"power\"]\n").unwrap();
        assert_eq!(p.cuts, [Cut::PowerLeader, Cut::Power]);
        let e = plan("cut = []\n").unwrap_err();
        assert!(e.contains("scenario[0].cut") && e.contains("empty"), "{e}");
        let e = plan("cut = [\"kill\", \"kill\"]\n").unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
        let e = plan("consumer = { ack = \"none\" }\n").unwrap_err();
        assert!(e.contains("unknown field `consumer`"), "{e}");
        let e = plan("[scenario.stream]\nstorage = [\"memory\"]\n").unwrap_err();
        assert!(
            e.contains("storage = \\\"file\\\"") || e.contains("storage = \"file\""),
            "{e}"
        );
    }
}
