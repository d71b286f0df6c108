//! Sections and checks that several scenario kinds share.

use std::time::Duration;

use serde::Deserialize;

use super::{
    AckPolicy, CommonPlan, ConsumerKind, ConsumerPlan, Dur, MsgId, Problems, PublishPlan,
    ServerPlan, Storage, is_safe_name,
};
use crate::stamp::STAMP_LEN;

/// `[server]`: how streams are stored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    #[serde(default = "default_storage")]
    storage: Storage,
    #[serde(default = "one")]
    replicas: usize,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            storage: default_storage(),
            replicas: 1,
        }
    }
}

fn default_storage() -> Storage {
    Storage::File
}

pub(crate) fn one() -> usize {
    1
}

impl ServerSection {
    pub fn validate(&self, problems: &mut Problems) -> ServerPlan {
        if ![1, 3, 5].contains(&self.replicas) {
            problems.push(
                "server.replicas",
                format!(
                    "{} is not allowed; JetStream replicas are 1, 3 or 5",
                    self.replicas
                ),
            );
        }
        ServerPlan {
            storage: self.storage,
            replicas: self.replicas,
        }
    }
}

/// Largest payload accepted: the server's default max_payload.
pub const MAX_MESSAGE_SIZE: usize = 1024 * 1024;

/// Upper bound on outstanding PubAcks per publisher: their replies queue in
/// one async-nats subscription, whose capacity is 65,536.
pub const MAX_PUB_ACK_WINDOW: usize = 50_000;

/// Keys every scenario kind accepts about timing.
pub struct Timing {
    pub name: Option<String>,
    pub duration: Option<Dur>,
    pub warmup: Option<Dur>,
    pub drain_timeout: Option<Dur>,
}

pub fn common_plan(
    kind: &'static str,
    t: Timing,
    prefix: &str,
    problems: &mut Problems,
) -> CommonPlan {
    if let Some(name) = &t.name
        && !is_safe_name(name)
    {
        problems.push(
            format!("{prefix}.name"),
            format!("{name:?} {}", super::NAME_RULE),
        );
    }
    let duration = match t.duration {
        Some(d) => d.0,
        None => {
            problems.push(
                format!("{prefix}.duration"),
                "missing; e.g. duration = \"10s\"",
            );
            Duration::ZERO
        }
    };
    if t.duration.is_some() {
        problems.range(
            &format!("{prefix}.duration"),
            duration.as_secs_f64(),
            0.1,
            86_400.0,
            " seconds",
        );
    }
    let warmup = t.warmup.map(|d| d.0).unwrap_or(Duration::ZERO);
    problems.range(
        &format!("{prefix}.warmup"),
        warmup.as_secs_f64(),
        0.0,
        3_600.0,
        " seconds",
    );
    let drain_timeout = t
        .drain_timeout
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(30));
    problems.range(
        &format!("{prefix}.drain_timeout"),
        drain_timeout.as_secs_f64(),
        0.1,
        3_600.0,
        " seconds",
    );
    CommonPlan {
        kind,
        name: t.name,
        duration,
        warmup,
        drain_timeout,
    }
}

/// Publish keys, as written in a scenario table.
pub struct PublishKeys {
    pub publishers: usize,
    pub message_size: usize,
    pub msg_id: MsgId,
    pub pub_ack_window: usize,
    pub pub_ack_timeout: Option<Dur>,
}

pub fn publish_plan(k: PublishKeys, prefix: &str, problems: &mut Problems) -> PublishPlan {
    problems.range(&format!("{prefix}.publishers"), k.publishers, 1, 1024, "");
    problems.range(
        &format!("{prefix}.message_size"),
        k.message_size,
        STAMP_LEN,
        MAX_MESSAGE_SIZE,
        " bytes (the first 24 carry jsbench's timestamps)",
    );
    problems.range(
        &format!("{prefix}.pub_ack_window"),
        k.pub_ack_window,
        1,
        MAX_PUB_ACK_WINDOW,
        " outstanding PubAcks per publisher",
    );
    let pub_ack_timeout = k
        .pub_ack_timeout
        .map(|d| d.0)
        .unwrap_or(Duration::from_secs(10));
    problems.range(
        &format!("{prefix}.pub_ack_timeout"),
        pub_ack_timeout.as_secs_f64(),
        0.01,
        600.0,
        " seconds",
    );
    PublishPlan {
        publishers: k.publishers,
        message_size: k.message_size,
        msg_id: k.msg_id,
        pub_ack_window: k.pub_ack_window,
        pub_ack_timeout,
    }
}

/// `[scenario.consumer]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerSection {
    kind: Option<ConsumerKind>,
    ack: Option<AckPolicy>,
    consumers: Option<usize>,
    batch: Option<usize>,
    max_ack_pending: Option<i64>,
    ack_wait: Option<Dur>,
}

impl ConsumerSection {
    pub fn validate(&self, prefix: &str, problems: &mut Problems) -> ConsumerPlan {
        let p = format!("{prefix}.consumer");
        let plan = ConsumerPlan {
            kind: self.kind.unwrap_or(ConsumerKind::Pull),
            ack: self.ack.unwrap_or(AckPolicy::Explicit),
            consumers: self.consumers.unwrap_or(1),
            batch: self.batch.unwrap_or(500),
            max_ack_pending: self.max_ack_pending.unwrap_or(10_000),
            ack_wait: self
                .ack_wait
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30)),
        };
        problems.range(
            &format!("{p}.consumers"),
            plan.consumers,
            1,
            256,
            " clients",
        );
        problems.range(
            &format!("{p}.batch"),
            plan.batch,
            1,
            10_000,
            " messages per pull",
        );
        problems.range(
            &format!("{p}.max_ack_pending"),
            plan.max_ack_pending,
            1,
            10_000_000,
            "",
        );
        problems.range(
            &format!("{p}.ack_wait"),
            plan.ack_wait.as_secs_f64(),
            0.001,
            86_400.0,
            " seconds",
        );
        plan
    }
}
