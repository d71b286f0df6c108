//! `kind = "priority"`: pull clients of one durable in a priority group
//! (ADR-42), under one of the server's three policies.
//!
//! - pinned_client: one client at a time receives. The pinned client is
//!   killed mid-load (it stops pulling and acking, its subscription gone)
//!   and the time until another is pinned is measured against
//!   priority_timeout; optionally the unpin API releases the pin later.
//! - overflow: one client asks without thresholds, the others with
//!   `min_pending` / `min_ack_pending`; a load that crosses the thresholds
//!   (a step shape) shows when they start and stop receiving.
//! - prioritized: each client pulls at a level; the share each level
//!   receives while the higher levels keep up and when they fall behind.
//!
//! The run reads as provision (stream and durable with the policy), drive
//! (clients, then the open-loop publishers, the kill and the unpin, the
//! drain), measure and verify (verify.rs, over what the clients saw).

pub mod plan;
mod run;
mod verify;

use std::time::Duration;

use anyhow::Result;

use super::table::{self, Column, Show};
use super::{Kind, Scope, Variants};
use crate::profile::CommonPlan;
use crate::streams::provision::Need;
use crate::variant::VariantResult;

pub use plan::{Plan, Policy, PolicyPlan};

/// Kill of the pinned client to the PINNED advisory of the next pin, ms.
pub const FAILOVER_TIME: &str = "failover_time";
/// The killed client's last pull to that advisory, ms: what
/// priority_timeout bounds.
pub const FAILOVER_AFTER_LAST_PULL: &str = "failover_after_last_pull";
/// The unpin request sent to the next PINNED advisory, ms.
pub const UNPIN_TO_NEW_PIN: &str = "unpin_to_new_pin";
pub const OUTSIDE_PIN: &str = "deliveries_outside_pin";
pub const DOUBLE_DELIVERIES: &str = "double_deliveries";
/// The server's pending count (this message included) at the first
/// delivery to an overflow client.
pub const OVERFLOW_ONSET_PENDING: &str = "overflow_onset_pending";
/// First delivery read with pending at the threshold to the first
/// overflow delivery, ms.
pub const OVERFLOW_ONSET_DELAY: &str = "overflow_onset_delay";
pub const OVERFLOW_LAST_PENDING: &str = "overflow_last_pending";
pub const OVERFLOW_SHARE: &str = "overflow_share";
pub const LEVEL0_SHARE: &str = "level0_share";
pub const INVERSIONS: &str = "priority_inversions";
pub const DELIVERIES: &str = "deliveries";

/// The figures a profile's `[ab] judge` may name.
/// The figures a profile's `[ab] judge` may name.
const JUDGED: &[&str] = &[
    FAILOVER_TIME,
    FAILOVER_AFTER_LAST_PULL,
    UNPIN_TO_NEW_PIN,
    OVERFLOW_ONSET_PENDING,
    OVERFLOW_ONSET_DELAY,
    OVERFLOW_SHARE,
    LEVEL0_SHARE,
];

pub struct Priority;

impl Kind for Priority {
    const NAME: &'static str = "priority";
    const FIGURES: &'static [&'static str] = JUDGED;
    const COORDINATOR_SIDE: Option<&'static str> = Some(
        "the whole load runs on the coordinator: the group clients' kill and unpin are timed from its schedule",
    );
    const COLUMNS: &'static [Column] = &[
        table::VARIANT,
        table::ACHIEVED,
        Column::metric("delivered", DELIVERIES, Show::Whole),
        Column::metric("failover", FAILOVER_TIME, Show::Ms),
        Column::metric("unpin->pin", UNPIN_TO_NEW_PIN, Show::Ms),
        Column::metric("outside pin", OUTSIDE_PIN, Show::Whole),
        Column::metric("doubles", DOUBLE_DELIVERIES, Show::Whole),
        Column::metric("onset pending", OVERFLOW_ONSET_PENDING, Show::Whole),
        Column::metric("overflow", OVERFLOW_SHARE, Show::Percent),
        Column::metric("level0", LEVEL0_SHARE, Show::Percent),
        table::LOST,
        table::VERDICT,
    ];
    type Plan = Plan;

    fn need(plan: &Plan, common: &CommonPlan) -> Need {
        Need::of_load(&plan.load, common)
    }

    fn estimated_duration(_plan: &Plan, common: &CommonPlan) -> Duration {
        common.duration + common.warmup
    }

    type Group = ();
    type Shared = ();
    /// One variant, named for its policy.
    type Variant = ();

    fn variants(_: &Plan, _: &()) -> Variants<()> {
        Variants::List(vec![()])
    }

    fn label(plan: &Plan, _: &()) -> String {
        plan.policy().name().to_string()
    }

    async fn run(
        s: &mut Scope<'_>,
        r: &mut VariantResult,
        plan: &Plan,
        _: &mut (),
        _: &(),
    ) -> Result<()> {
        run::one(s, plan, r).await
    }
}
