//! A validated profile and its scenarios: one plan per `[[scenario]]`
//! table, of the kind it names.

use std::time::Duration;

use super::{
    AbPlan, AckScenarioPlan, BackpressurePlan, CommonPlan, ConnectionPlan, ConsumerPlan, DlqPlan,
    FanoutPlan, LatencyPlan, OutageScenarioPlan, PublishScenarioPlan, RedeliveryPlan, ReplayPlan,
    RestartPlan, ResumePlan, SEARCH_PROBES, ServerPlan,
};

#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// The file or bundled name it came from.
    pub source: String,
    /// The text as read, kept in the results so a run can be reproduced.
    pub text: String,
    /// How often each scenario runs, one after the other (`repeat`, 1..=100).
    pub repeat: usize,
    pub server: ServerPlan,
    /// `[connection]`: the server the profile is meant for, if it names one.
    pub connection: Option<ConnectionPlan>,
    /// `[ab]`: what `jsbench ab` judges, and how strictly.
    pub ab: Option<AbPlan>,
    pub scenarios: Vec<ScenarioPlan>,
}

impl Profile {
    /// How long the measured phases take (warm-up included), without set-up
    /// and drain; what `jsbench profiles` shows.
    pub fn estimated_duration(&self) -> Duration {
        self.scenarios
            .iter()
            .map(ScenarioPlan::estimated_duration)
            .sum::<Duration>()
            * self.repeat as u32
    }
}

#[derive(Debug, Clone)]
pub enum ScenarioPlan {
    Latency(LatencyPlan),
    Publish(PublishScenarioPlan),
    Ack(AckScenarioPlan),
    Redelivery(RedeliveryPlan),
    Backpressure(BackpressurePlan),
    Resume(ResumePlan),
    Restart(RestartPlan),
    Replay(ReplayPlan),
    Dlq(DlqPlan),
    Fanout(FanoutPlan),
    Outage(OutageScenarioPlan),
}

impl ScenarioPlan {
    pub fn common(&self) -> &CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &p.common,
            ScenarioPlan::Publish(p) => &p.common,
            ScenarioPlan::Ack(p) => &p.common,
            ScenarioPlan::Redelivery(p) => &p.common,
            ScenarioPlan::Backpressure(p) => &p.common,
            ScenarioPlan::Resume(p) => &p.common,
            ScenarioPlan::Restart(p) => &p.common,
            ScenarioPlan::Replay(p) => &p.common,
            ScenarioPlan::Dlq(p) => &p.common,
            ScenarioPlan::Fanout(p) => &p.common,
            ScenarioPlan::Outage(p) => &p.common,
        }
    }

    pub(crate) fn common_mut(&mut self) -> &mut CommonPlan {
        match self {
            ScenarioPlan::Latency(p) => &mut p.common,
            ScenarioPlan::Publish(p) => &mut p.common,
            ScenarioPlan::Ack(p) => &mut p.common,
            ScenarioPlan::Redelivery(p) => &mut p.common,
            ScenarioPlan::Backpressure(p) => &mut p.common,
            ScenarioPlan::Resume(p) => &mut p.common,
            ScenarioPlan::Restart(p) => &mut p.common,
            ScenarioPlan::Replay(p) => &mut p.common,
            ScenarioPlan::Dlq(p) => &mut p.common,
            ScenarioPlan::Fanout(p) => &mut p.common,
            ScenarioPlan::Outage(p) => &mut p.common,
        }
    }

    pub fn name(&self) -> &str {
        self.common().name.as_deref().unwrap_or(self.common().kind)
    }

    /// The durable consumer's plan, for the kinds that read through one.
    pub fn consumer(&self) -> Option<&ConsumerPlan> {
        match self {
            ScenarioPlan::Latency(p) => Some(&p.consumer),
            ScenarioPlan::Ack(p) => Some(&p.consumer),
            ScenarioPlan::Redelivery(p) => Some(&p.load.consumer),
            ScenarioPlan::Backpressure(p) => Some(&p.load.consumer),
            ScenarioPlan::Resume(p) => Some(&p.load.consumer),
            ScenarioPlan::Restart(p) => Some(&p.load.consumer),
            ScenarioPlan::Dlq(p) => Some(&p.load.consumer),
            ScenarioPlan::Fanout(p) => Some(&p.consumer),
            ScenarioPlan::Outage(p) => Some(&p.load.consumer),
            ScenarioPlan::Publish(_) | ScenarioPlan::Replay(_) => None,
        }
    }

    pub fn consumer_mut(&mut self) -> Option<&mut ConsumerPlan> {
        match self {
            ScenarioPlan::Latency(p) => Some(&mut p.consumer),
            ScenarioPlan::Ack(p) => Some(&mut p.consumer),
            ScenarioPlan::Redelivery(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Backpressure(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Resume(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Restart(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Dlq(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Fanout(p) => Some(&mut p.consumer),
            ScenarioPlan::Outage(p) => Some(&mut p.load.consumer),
            ScenarioPlan::Publish(_) | ScenarioPlan::Replay(_) => None,
        }
    }

    /// The plan once per combination of its swept pull keys, with the
    /// suffix that names it; itself, unnamed, when nothing is swept.
    pub fn pull_combinations(&self) -> Vec<(Option<String>, ScenarioPlan)> {
        let Some(consumer) = self.consumer().filter(|c| c.sweep.combinations() > 1) else {
            return vec![(None, self.clone())];
        };
        consumer
            .sweep
            .apply(consumer)
            .into_iter()
            .map(|(suffix, c)| {
                let mut plan = self.clone();
                if let Some(slot) = plan.consumer_mut() {
                    *slot = c;
                }
                (suffix, plan)
            })
            .collect()
    }

    pub fn kind(&self) -> &'static str {
        self.common().kind
    }

    /// Timed phases only (warm-up included); set-up, drain and read-back
    /// come on top. Every variant runs once per stream combination.
    pub fn estimated_duration(&self) -> Duration {
        let pulls = self.consumer().map_or(1, |c| c.sweep.combinations());
        self.estimated_duration_on_one_stream()
            * (self.common().stream.combinations() * pulls) as u32
    }

    fn estimated_duration_on_one_stream(&self) -> Duration {
        let c = self.common();
        let variants = match self {
            ScenarioPlan::Latency(p) if p.search.is_some() => SEARCH_PROBES,
            ScenarioPlan::Latency(p) => p.rates.len() * (1 + usize::from(p.core_baseline)),
            ScenarioPlan::Publish(p) => p.variant_count(),
            ScenarioPlan::Redelivery(p) => 1 + usize::from(p.baseline),
            ScenarioPlan::Backpressure(p) => p.max_ack_pending.len() + p.expiry_ack_waits.len(),
            ScenarioPlan::Resume(p) => p.crash_at.len() * p.idempotent.len(),
            ScenarioPlan::Restart(_) => 1,
            ScenarioPlan::Replay(p) => return p.estimated_duration(),
            ScenarioPlan::Dlq(p) => p.retentions.len() + usize::from(p.baseline),
            ScenarioPlan::Fanout(p) if p.search.is_some() => p.variants().len() * SEARCH_PROBES,
            ScenarioPlan::Fanout(p) => p.variants().len(),
            ScenarioPlan::Outage(p) => p.patterns.len(),
            // Count-based: about 100k messages a second, plus the fill.
            ScenarioPlan::Ack(p) => {
                let each = Duration::from_secs_f64(p.messages as f64 / 100_000.0);
                return each * (p.variant_count() as u32 + 1);
            }
        };
        (c.duration + c.warmup) * variants as u32
    }
}
