//! `kind = "replay"`: the recording and what is replayed of it. The
//! record phase's `duration` is the scenario's; `drain_timeout` is the
//! longest a replay may go without a delivery.

use std::time::Duration;

use crate::profile::keys::{OneOrMany, has_repeats};
use crate::profile::shared::{Offer, Shared, take};
use crate::profile::{
    ArrivalPlan, CommonPlan, Dur, Keys, MAX_ARRIVALS, Problems, PublishPlan, ReplayDeliver,
    ReplayReader, Section, arrival_count, format_duration,
};

/// The `replay` scenario: record a stream with a known arrival pattern, then
/// replay it with fresh consumers, one variant per pacing, deliver policy
/// and reader.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Mean msg/s of the recording: the steady or Poisson rate, or what a
    /// burst or gap pattern works out to.
    pub rate: u64,
    /// The record phase's publishers; `arrival` holds the pattern and
    /// `subjects` the subjects it fans out over.
    pub publish: PublishPlan,
    /// Messages the pattern sends in `duration`.
    pub planned_messages: u64,
    pub instant: Vec<ReplayDeliver>,
    pub original: Vec<ReplayDeliver>,
    pub readers: Vec<ReplayReader>,
    /// `by_start_sequence` starts here.
    pub start_sequence: u64,
    /// `by_start_time` starts this long after the first recorded message.
    pub start_time: Duration,
    /// Add an instant, deliver-all variant per reader that catches up while
    /// a publisher keeps appending to the stream.
    pub live_tail: bool,
    /// msg/s appended during the live-tail and `new` variants.
    pub live_rate: u64,
    /// How long that publisher runs.
    pub live_duration: Duration,
}

impl Plan {
    /// Replays per reader: each listed deliver policy under each pacing,
    /// plus the live tail.
    pub fn variant_count(&self) -> usize {
        1 + self.readers.len()
            * (self.instant.len() + self.original.len() + usize::from(self.live_tail))
    }

    /// The record phase, the replays with original pacing (as long as the
    /// part of the recording they cover) and the live publishing.
    pub fn estimated_duration(&self, common: &CommonPlan) -> Duration {
        let d = common.duration;
        let paced: Duration = self
            .original
            .iter()
            .map(|deliver| match deliver {
                ReplayDeliver::All => d,
                ReplayDeliver::ByStartTime => d.saturating_sub(self.start_time),
                ReplayDeliver::ByStartSequence => d.mul_f64(
                    1.0 - (self.start_sequence - 1) as f64 / self.planned_messages.max(1) as f64,
                ),
                // Live: as long as its publisher.
                ReplayDeliver::New | ReplayDeliver::Last | ReplayDeliver::LastPerSubject => {
                    Duration::ZERO
                }
            })
            .sum();
        let live = self.live_duration * self.live_variants() as u32;
        d + (paced + live) * self.readers.len() as u32
    }

    /// Replays per reader that read while a publisher appends: `new` under
    /// either pacing, and the live tail.
    pub fn live_variants(&self) -> usize {
        let new = [&self.instant, &self.original].into_iter();
        new.filter(|l| l.contains(&ReplayDeliver::New)).count() + usize::from(self.live_tail)
    }

    fn listed(&self, d: ReplayDeliver) -> bool {
        self.instant.contains(&d) || self.original.contains(&d)
    }

    /// What the replays need of the recording, which holds
    /// `planned_messages` over `span`; where the by-start policies start.
    fn check_replays(&mut self, k: &mut Keys, span: Duration) {
        let planned = self.planned_messages;
        if self.instant.is_empty() && self.original.is_empty() && !self.live_tail {
            k.problem(
                "instant",
                "instant and original are both empty: list deliver policies to replay, e.g. \
                 instant = [\"all\", \"by_start_time\"]",
            );
        }
        if self.listed(ReplayDeliver::LastPerSubject) && self.publish.subjects < 2 {
            k.problem(
                "subjects",
                "last_per_subject replays each subject's last message: record over subjects >= 2",
            );
        }
        if let Some(seq) = k.get::<u64>("start_sequence") {
            if !self.listed(ReplayDeliver::ByStartSequence) {
                k.problem("start_sequence", "applies to by_start_sequence only");
            } else if planned > 0 {
                let unit = " (a sequence of the recording)";
                k.bound("start_sequence", seq, 1..=planned, unit);
            }
            self.start_sequence = seq;
        }
        if let Some(Dur(t)) = k.get::<Dur>("start_time") {
            if !self.listed(ReplayDeliver::ByStartTime) {
                k.problem("start_time", "applies to by_start_time only");
            } else if t >= span && !span.is_zero() {
                k.problem(
                    "start_time",
                    format!(
                        "{} is not inside the recording; allowed 0s up to duration ({})",
                        format_duration(t),
                        format_duration(span)
                    ),
                );
            }
            self.start_time = t;
        }
    }
}

/// The record phase has no warm-up; its publishers take a window but no ids.
const OFFER: Offer = Offer::TIMING.less(&["warmup"]).and(&[
    "rate",
    "arrival",
    "publishers",
    "message_size",
    "pub_ack_window",
    "subjects",
]);

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let prefix = section.prefix;
    let (mut shared, mut k) = take(section.table, OFFER, prefix, problems)?;
    let mut common = shared.common("replay", problems);
    let mut publish = shared.publish_or(4, 1024, problems);
    let (rate, arrival) = shared.paced_rate(&common, 500, problems);
    publish.arrival = arrival;
    drain_outlasts_the_longest_gap(&mut common, &publish.arrival, &shared, prefix, problems);
    let planned = recording(&common, &publish.arrival, rate, prefix, problems);
    let span = common.duration;
    // Either pacing may list none, so not [`Keys::choices`].
    let policies = |k: &mut Keys, key: &str| {
        let list = k.get::<OneOrMany<ReplayDeliver>>(key);
        let list = list.map_or(vec![ReplayDeliver::All], |l| l.0);
        if has_repeats(&list) {
            k.problem(key, "lists a deliver policy twice");
        }
        list
    };
    let mut plan = Plan {
        rate,
        publish,
        planned_messages: planned,
        instant: policies(&mut k, "instant"),
        original: policies(&mut k, "original"),
        readers: k.choices("consumers", vec![ReplayReader::Ordered, ReplayReader::Pull]),
        live_tail: k.or("live_tail", false),
        start_sequence: planned / 2 + 1,
        start_time: span / 2,
        // Read below, once the replays say whether anything is live.
        live_rate: 0,
        live_duration: Duration::ZERO,
    };
    plan.check_replays(&mut k, span);
    let live = plan.live_tail || plan.listed(ReplayDeliver::New);
    let live_only = |k: &mut Keys, key: &str| {
        if !live && k.given(key) {
            k.problem(key, "applies to live_tail and the \"new\" policy only");
        }
    };
    live_only(&mut k, "live_rate");
    live_only(&mut k, "live_duration");
    plan.live_rate = k.within("live_rate", rate.max(1), 1..=1_000_000, " msg/s");
    plan.live_duration = k.duration(
        "live_duration",
        Duration::from_secs(2),
        Duration::from_millis(100)..=Duration::from_secs(3_600),
    );
    k.finish(problems);
    Some((common, plan))
}

/// A replay at the original pace is silent for as long as the longest
/// recorded gap: the drain timeout must outlast it (by default it does).
fn drain_outlasts_the_longest_gap(
    common: &mut CommonPlan,
    arrival: &ArrivalPlan,
    shared: &Shared,
    prefix: &str,
    problems: &mut Problems,
) {
    let longest_gap = match arrival {
        ArrivalPlan::Bursts { spacing, pause, .. } => (*spacing).max(*pause),
        ArrivalPlan::Gaps(gaps) => gaps.iter().copied().max().unwrap_or_default(),
        ArrivalPlan::Steps(steps) => {
            let slowest = steps.iter().map(|s| s.0).min().unwrap_or(1);
            Duration::from_secs_f64(1.0 / slowest.max(1) as f64)
        }
        ArrivalPlan::Ramp { from, to } => {
            Duration::from_secs_f64(1.0 / (*from).min(*to).max(1) as f64)
        }
        ArrivalPlan::Steady | ArrivalPlan::Poisson { .. } => Duration::ZERO,
    };
    if !shared.drain_timeout_given() {
        common.drain_timeout = common
            .drain_timeout
            .max(longest_gap + Duration::from_secs(10));
    } else if common.drain_timeout <= longest_gap {
        problems.push(
            format!("{prefix}.drain_timeout"),
            format!(
                "{} is not longer than the pattern's longest gap ({}), which a replay at the \
                 original pace waits out",
                format_duration(common.drain_timeout),
                format_duration(longest_gap)
            ),
        );
    }
}

/// The recording's size in messages, at `rate` or in the pattern.
fn recording(
    common: &CommonPlan,
    arrival: &ArrivalPlan,
    rate: u64,
    prefix: &str,
    problems: &mut Problems,
) -> u64 {
    let key = format!("{prefix}.duration");
    let span = common.duration;
    let planned = if problems.is_empty() && !span.is_zero() {
        arrival_count(arrival, Some(rate), span)
    } else {
        0
    };
    if problems.is_empty() && planned < 2 {
        problems.push(
            &key,
            format!(
                "the recording would hold {planned} message(s); a replay needs at least 2 \
                 (a longer duration or a denser pattern)"
            ),
        );
    }
    if planned >= MAX_ARRIVALS {
        problems.push(
            key,
            format!(
                "the recording would hold {MAX_ARRIVALS} messages or more; at most {MAX_ARRIVALS}"
            ),
        );
    }
    planned
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Plan;
    use crate::profile::*;
    use crate::scenario::{KindPlan, parse};

    fn plan(body: &str) -> Plan {
        scenario(body).1
    }

    /// The keys every scenario has, and the replay's own plan.
    fn scenario(body: &str) -> (CommonPlan, Plan) {
        let p = parse(
            "t.toml",
            &format!("name = \"t\"\n[[scenario]]\nkind = \"replay\"\n{body}"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        match p.scenarios.into_iter().next() {
            Some(s) => match s.kind {
                KindPlan::Replay(p) => (s.common, p),
                _ => panic!("a replay plan"),
            },
            _ => panic!("a replay plan"),
        }
    }

    fn problems(body: &str) -> Vec<Problem> {
        parse(
            "t.toml",
            &format!("name = \"t\"\n[[scenario]]\nkind = \"replay\"\n{body}"),
        )
        .expect_err("should be rejected")
        .problems
    }

    /// The one problem at `path`, whatever else is reported.
    fn problem_at(body: &str, path: &str) -> String {
        let all = problems(body);
        all.iter()
            .find(|p| p.path == path)
            .unwrap_or_else(|| panic!("no problem at {path}: {all:?}"))
            .message
            .clone()
    }

    #[test]
    fn a_minimal_replay_gets_defaults() {
        let p = plan("duration = \"10s\"\nrate = 100\n");
        assert_eq!(p.publish.arrival, ArrivalPlan::Steady);
        assert_eq!(p.planned_messages, 1_000);
        assert_eq!(p.rate, 100);
        assert_eq!(p.publish.subjects, 4);
        assert_eq!(p.instant, [ReplayDeliver::All]);
        assert_eq!(p.original, [ReplayDeliver::All]);
        assert_eq!(p.readers, [ReplayReader::Ordered, ReplayReader::Pull]);
        assert_eq!(p.start_sequence, 501);
        assert_eq!(p.start_time, Duration::from_secs(5));
        assert!(!p.live_tail);
        assert_eq!(p.variant_count(), 1 + 2 * 2);
        // Record 10 s, then two replays at the original pace of 10 s each.
        let (common, _) = scenario("duration = \"10s\"\nrate = 100\n");
        assert_eq!(p.estimated_duration(&common), Duration::from_secs(30));
    }

    #[test]
    fn patterns_read_from_a_name_or_a_table() {
        let p = plan("duration = \"10s\"\nrate = 100\narrival = \"poisson\"\n");
        assert_eq!(p.publish.arrival, ArrivalPlan::Poisson { seed: 1 });
        let p = plan(
            "duration = \"1s\"\narrival = { pattern = \"bursts\", size = 10, spacing = \"1ms\", pause = \"91ms\" }\n",
        );
        assert_eq!(p.planned_messages, 100, "ten bursts of ten");
        assert_eq!(p.rate, 100, "the pattern's own mean rate");
        let p = plan(
            "duration = \"1s\"\narrival = { pattern = \"gaps\", gaps = [\"10ms\", \"40ms\"] }\n",
        );
        assert_eq!(p.planned_messages, 40);
        assert_eq!(
            p.publish.arrival,
            ArrivalPlan::Gaps(vec![Duration::from_millis(10), Duration::from_millis(40)])
        );
    }

    #[test]
    fn bad_patterns_name_the_key_and_what_is_allowed() {
        let m = problem_at(
            "duration = \"1s\"\nrate = 10\narrival = \"zipf\"\n",
            "scenario[0].arrival",
        );
        assert!(m.contains("zipf") && m.contains("poisson"), "{m}");
        let m = problem_at(
            "duration = \"1s\"\narrival = { pattern = \"bursts\", size = 10 }\n",
            "scenario[0].arrival",
        );
        assert!(m.contains("spacing and pause"), "{m}");
        let m = problem_at(
            "duration = \"1s\"\nrate = 10\narrival = { pattern = \"poisson\", size = 3 }\n",
            "scenario[0].arrival.size",
        );
        assert!(m.contains("bursts"), "{m}");
        let m = problem_at(
            "duration = \"1s\"\narrival = { pattern = \"gaps\", gaps = [\"0s\"] }\n",
            "scenario[0].arrival.gaps",
        );
        assert!(m.contains("more than 0"), "{m}");
        let m = problem_at(
            "duration = \"1s\"\narrival = { pattern = \"poisson\", sead = 3 }\n",
            "scenario[0].arrival",
        );
        assert!(m.contains("sead"), "{m}");
    }

    #[test]
    fn the_rate_belongs_to_steady_and_poisson_only() {
        let m = problem_at(
            "duration = \"1s\"\narrival = \"poisson\"\n",
            "scenario[0].rate",
        );
        assert!(m.contains("missing"), "{m}");
        let m = problem_at(
            "duration = \"1s\"\nrate = 5\narrival = { pattern = \"gaps\", gaps = [\"1ms\"] }\n",
            "scenario[0].rate",
        );
        assert!(m.contains("\"gaps\" sets its own rate"), "{m}");
    }

    #[test]
    fn starts_and_subjects_are_checked_against_the_recording() {
        let base = "duration = \"2s\"\nrate = 50\n";
        let m = problem_at(
            &format!("{base}instant = [\"by_start_sequence\"]\nstart_sequence = 101\n"),
            "scenario[0].start_sequence",
        );
        assert!(m.contains("1..=100"), "{m}");
        let m = problem_at(
            &format!("{base}instant = [\"by_start_time\"]\nstart_time = \"2s\"\n"),
            "scenario[0].start_time",
        );
        assert!(m.contains("not inside the recording"), "{m}");
        let m = problem_at(
            &format!("{base}start_time = \"1s\"\n"),
            "scenario[0].start_time",
        );
        assert!(m.contains("by_start_time only"), "{m}");
        let m = problem_at(
            &format!("{base}subjects = 1\ninstant = [\"last_per_subject\"]\n"),
            "scenario[0].subjects",
        );
        assert!(m.contains("subjects >= 2"), "{m}");
        let m = problem_at(
            &format!("{base}consumers = [\"push\"]\n"),
            "scenario[0].consumers",
        );
        assert!(m.contains("ordered") && m.contains("pull"), "{m}");
        let m = problem_at(&format!("{base}live_rate = 10\n"), "scenario[0].live_rate");
        assert!(m.contains("live_tail"), "{m}");
        let m = problem_at(&format!("{base}warmup = \"1s\"\n"), "scenario[0].warmup");
        assert!(m.contains("warmup"), "a recording has no warm-up: {m}");
    }

    #[test]
    fn the_drain_timeout_outlasts_the_longest_gap() {
        let bursts = "duration = \"5s\"\narrival = { pattern = \"bursts\", size = 5, spacing = \"1ms\", pause = \"2s\" }\n";
        let m = problem_at(
            &format!("{bursts}drain_timeout = \"1s\"\n"),
            "scenario[0].drain_timeout",
        );
        assert!(m.contains("longest gap (2s)"), "{m}");
        assert_eq!(scenario(bursts).0.drain_timeout, Duration::from_secs(30));
        let long = "duration = \"100s\"\narrival = { pattern = \"gaps\", gaps = [\"25s\"] }\n";
        assert_eq!(scenario(long).0.drain_timeout, Duration::from_secs(35));
    }
}
