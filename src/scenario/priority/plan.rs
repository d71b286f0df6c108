//! `kind = "priority"`: keys and checks.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::shared::{Offer, Paced, moment, take};
use crate::profile::{CommonPlan, Keys, PacedLoad, Problems, Section};

/// The server's three priority policies (ADR-42).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// One client at a time receives; the pin moves when it stops pulling
    /// for `priority_timeout`, or on the unpin API.
    PinnedClient,
    /// Clients that ask with `min_pending` / `min_ack_pending` receive only
    /// past those thresholds.
    Overflow,
    /// The lowest priority number with a request open receives.
    Prioritized,
}

impl Policy {
    /// As the profile spells it, in declaration order.
    pub fn name(self) -> &'static str {
        ["pinned_client", "overflow", "prioritized"][self as usize]
    }
}

/// The pinned client's fault: the pinned client killed, the pin released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    pub priority_timeout: Duration,
    /// From the schedule's start.
    pub kill_after: Duration,
    pub unpin_after: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyPlan {
    Pinned(Pinned),
    Overflow {
        min_pending: u64,
        min_ack_pending: u64,
        /// Clients 0..clients - overflow_clients ask without thresholds.
        overflow_clients: usize,
    },
    /// One level per client.
    Prioritized {
        levels: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
pub struct Plan {
    /// The offered load; its consumer table sets the durable (AckWait,
    /// MaxAckPending) and the pull batch.
    pub load: PacedLoad,
    pub policy: PolicyPlan,
    pub clients: usize,
    pub group: String,
    /// Each pull request's expiry.
    pub expires: Duration,
    /// Held per message before the ack, so a client has a capacity the
    /// load can exceed.
    pub processing: Duration,
}

impl Plan {
    pub fn policy(&self) -> Policy {
        match self.policy {
            PolicyPlan::Pinned(_) => Policy::PinnedClient,
            PolicyPlan::Overflow { .. } => Policy::Overflow,
            PolicyPlan::Prioritized { .. } => Policy::Prioritized,
        }
    }
}

/// The keys only one policy reads: naming one under another is an error,
/// never silently ignored.
const POLICY_KEYS: &[(&str, Policy)] = &[
    ("priority_timeout", Policy::PinnedClient),
    ("kill_after", Policy::PinnedClient),
    ("unpin_after", Policy::PinnedClient),
    ("min_pending", Policy::Overflow),
    ("min_ack_pending", Policy::Overflow),
    ("overflow_clients", Policy::Overflow),
    ("levels", Policy::Prioritized),
];

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let offer = Offer::PACED.less(&["behaviour"]);
    let (mut shared, mut k) = take(section.table, offer, section.prefix, problems)?;
    let mut common = shared.common("priority", problems);
    let load = shared.paced(&common, Paced::of("priority", 500), problems);
    if load.consumer.sweep.combinations() > 1 {
        k.problem(
            "consumer",
            "the priority scenario pulls with one batch and durable setting; give single values, not lists",
        );
    }
    let given = k.given("policy");
    let policy = k.get::<Policy>("policy");
    if !given {
        k.problem(
            "policy",
            "missing; one of \"pinned_client\", \"overflow\", \"prioritized\"",
        );
    }
    for (key, owner) in POLICY_KEYS {
        if policy == Some(*owner) {
            continue;
        }
        if let Some(policy) = policy
            && k.given(key)
        {
            let (owner, policy) = (owner.name(), policy.name());
            let why =
                format!("only the {owner} policy reads it; this scenario's policy is {policy}");
            k.problem(key, why);
        }
        // Read, so that it is refused here and not as unknown.
        k.get::<toml::Value>(key);
    }
    let clients = k.within("clients", 3, 2..=32, "");
    let group: String = k.or("group", "jsbench".into());
    if group.is_empty()
        || group.len() > 16
        || !group
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '/' || c == '=')
    {
        k.problem(
            "group",
            format!(
                "{group:?}: a group name is 1 to 16 letters, digits, '-', '_', '/' or '=' (the server's rule)"
            ),
        );
    }
    let (secs, ms) = (Duration::from_secs, Duration::from_millis);
    let expires = k.duration("expires", secs(1), ms(10)..=secs(60));
    let processing = k.duration("processing", Duration::ZERO, Duration::ZERO..=secs(10));
    let policy = match policy {
        Some(Policy::PinnedClient) => PolicyPlan::Pinned(pinned(&mut k, expires, &common)),
        Some(Policy::Overflow) => overflow(&mut k, clients),
        Some(Policy::Prioritized) => prioritized(&mut k, clients, expires),
        None => {
            k.finish(problems);
            return None;
        }
    };
    // The killed client's batch returns only after AckWait.
    shared.drain_at_least(&mut common, load.consumer.ack_wait * 3);
    let plan = Plan {
        load,
        policy,
        clients,
        group,
        expires,
        processing,
    };
    k.finish(problems);
    Some((common, plan))
}

fn pinned(k: &mut Keys, expires: Duration, common: &CommonPlan) -> Pinned {
    let (secs, ms) = (Duration::from_secs, Duration::from_millis);
    let priority_timeout = k.duration("priority_timeout", secs(2), ms(100)..=secs(600));
    if expires >= priority_timeout {
        k.problem(
            "expires",
            format!(
                "{expires:?} is not below priority_timeout {priority_timeout:?}: the pinned client would lose its pin between pulls"
            ),
        );
    }
    let half = (common.warmup + common.duration) / 2;
    Pinned {
        priority_timeout,
        kill_after: moment(k, "kill_after", common, None).unwrap_or(half),
        unpin_after: moment(k, "unpin_after", common, None),
    }
}

fn overflow(k: &mut Keys, clients: usize) -> PolicyPlan {
    let min_pending = k.or("min_pending", 0);
    let min_ack_pending = k.or("min_ack_pending", 0);
    if min_pending == 0 && min_ack_pending == 0 {
        k.problem(
            "min_pending",
            "the overflow policy needs a threshold: set min_pending or min_ack_pending above 0",
        );
    }
    let overflow_clients = k.or("overflow_clients", clients.saturating_sub(1));
    if overflow_clients == 0 || overflow_clients >= clients {
        k.problem(
            "overflow_clients",
            format!(
                "{overflow_clients} of {clients} clients: at least one must ask with thresholds and one without"
            ),
        );
    }
    PolicyPlan::Overflow {
        min_pending,
        min_ack_pending,
        overflow_clients,
    }
}

fn prioritized(k: &mut Keys, clients: usize, expires: Duration) -> PolicyPlan {
    let levels: Vec<u8> = k.or("levels", (0..clients.min(10) as u8).collect());
    if levels.len() != clients {
        k.problem(
            "levels",
            format!(
                "{} levels for {clients} clients: give one level per client",
                levels.len()
            ),
        );
    }
    for (i, l) in levels.iter().enumerate() {
        k.bound(&format!("levels[{i}]"), *l, 0..=9, "");
    }
    // A higher level's pull counts as open from a grace (a quarter of
    // expires) after it was sent to a grace before it ended; a grace under
    // the shortest would weigh the readers' lateness, not the server.
    let least = Duration::from_nanos(super::verify::MIN_GRACE_NS);
    let shortest = least * 4;
    if expires < shortest {
        k.problem(
            "expires",
            format!(
                "{expires:?} is too short to check priority order: a pull counts as open \
                 from a quarter of expires after it is sent to a quarter before it ends, \
                 and a quarter under {least:?} is within the readers' own lateness, so \
                 pulls need at least {shortest:?}"
            ),
        );
    }
    PolicyPlan::Prioritized { levels }
}

#[cfg(test)]
mod tests {
    use crate::scenario::{KindPlan, one_scenario};

    use super::*;

    fn plan(body: &str) -> Result<Plan, String> {
        one_scenario("priority", body).map(|s| match s.kind {
            KindPlan::Priority(p) => p,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn every_policy_is_named_as_the_profile_spells_it() {
        for p in [Policy::PinnedClient, Policy::Overflow, Policy::Prioritized] {
            let read: Policy = serde_json::from_value(p.name().into()).unwrap();
            assert_eq!(read, p);
        }
    }

    #[test]
    fn each_policy_reads_its_keys() {
        let p = plan("rate = 100\npolicy = \"pinned_client\"\npriority_timeout = \"2s\"\nkill_after = \"500ms\"\nunpin_after = \"800ms\"").unwrap();
        assert_eq!(
            p.policy,
            PolicyPlan::Pinned(Pinned {
                priority_timeout: Duration::from_secs(2),
                kill_after: Duration::from_millis(500),
                unpin_after: Some(Duration::from_millis(800)),
            })
        );
        let p = plan("rate = 100\npolicy = \"overflow\"\nmin_pending = 50").unwrap();
        assert_eq!(
            p.policy,
            PolicyPlan::Overflow {
                min_pending: 50,
                min_ack_pending: 0,
                overflow_clients: 2
            }
        );
        let p = plan("rate = 100\npolicy = \"prioritized\"\nclients = 2\nlevels = [0, 3]").unwrap();
        assert_eq!(p.policy, PolicyPlan::Prioritized { levels: vec![0, 3] });
    }

    #[test]
    fn bad_keys_are_named_with_their_values() {
        let e = plan("rate = 100").unwrap_err();
        assert!(e.contains("policy") && e.contains("missing"), "{e}");
        let e = plan("rate = 100\npolicy = \"pinned\"").unwrap_err();
        assert!(e.contains("policy"), "{e}");
        let e = plan("rate = 100\npolicy = \"overflow\"\nmin_pending = 5\nkill_after = \"1s\"")
            .unwrap_err();
        assert!(
            e.contains("kill_after") && e.contains("pinned_client"),
            "{e}"
        );
        let e = plan("rate = 100\npolicy = \"overflow\"").unwrap_err();
        assert!(e.contains("min_pending"), "{e}");
        let e = plan(
            "rate = 100\npolicy = \"pinned_client\"\npriority_timeout = \"1s\"\nexpires = \"1s\"",
        )
        .unwrap_err();
        assert!(
            e.contains("expires") && e.contains("priority_timeout"),
            "{e}"
        );
        let e = plan("rate = 100\npolicy = \"pinned_client\"\nkill_after = \"5s\"").unwrap_err();
        assert!(e.contains("kill_after") && e.contains("5s"), "{e}");
        let e = plan("rate = 100\npolicy = \"prioritized\"\nlevels = [0, 12]").unwrap_err();
        assert!(e.contains("levels"), "{e}");
        let e = plan("rate = 100\npolicy = \"prioritized\"\nclients = 3\nlevels = [0, 12, 1]")
            .unwrap_err();
        assert!(e.contains("levels[1]") && e.contains("12"), "{e}");
        let e = plan("rate = 100\npolicy = \"prioritized\"\ngroup = \"a.b\"").unwrap_err();
        assert!(e.contains("group") && e.contains("a.b"), "{e}");
        let e =
            plan("rate = 100\npolicy = \"overflow\"\nmin_pending = 1\nclients = 1").unwrap_err();
        assert!(e.contains("clients"), "{e}");
    }

    #[test]
    fn prioritized_pulls_too_short_to_check_priority_order_are_refused() {
        let e = plan("rate = 100\npolicy = \"prioritized\"\nclients = 2\nexpires = \"150ms\"")
            .unwrap_err();
        assert!(e.contains("expires") && e.contains("priority order"), "{e}");
        assert!(
            plan("rate = 100\npolicy = \"prioritized\"\nclients = 2\nexpires = \"200ms\"").is_ok()
        );
    }
}
