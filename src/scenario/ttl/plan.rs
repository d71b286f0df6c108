//! `kind = "ttl"`: its keys. Counted, not timed: a variant publishes
//! `messages` and lasts until the longest deadline has passed and been
//! watched, so it offers no `duration` or `warmup`.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::common::OneOrMany;
use crate::profile::shared::{Offer, split};
use crate::profile::{CommonPlan, Dur, Problems, Section, parse_duration};
use crate::streams::expiry::Ttl;

#[derive(Debug, Clone)]
pub struct Plan {
    pub messages: u64,
    /// msg/s: spreads the deadlines so a poll round stays short.
    pub rate: u64,
    pub subjects: u32,
    /// Round-robin over the messages.
    pub ttls: Vec<Ttl>,
    /// One variant each: no markers, or markers with this TTL.
    pub markers: Vec<Option<Duration>>,
    pub poll: Duration,
    pub late_reader: bool,
    pub message_size: usize,
    /// The server-cost variant: this many messages pending with a TTL
    /// against as many without; 0 for none.
    pub cost_messages: u64,
    /// The cost variant's TTL: long enough to publish them all first.
    pub cost_ttl: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TtlSection {
    messages: Option<u64>,
    rate: Option<u64>,
    subjects: Option<u32>,
    ttls: Option<OneOrMany<String>>,
    markers: Option<OneOrMany<String>>,
    poll: Option<Dur>,
    late_reader: Option<bool>,
    message_size: Option<usize>,
    cost_messages: Option<u64>,
    cost_ttl: Option<Dur>,
}

const OFFER: Offer = Offer::TIMING.less(&["duration", "warmup"]);

/// How long the stream may take to read back or deliver, by default.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

const TTL_HELP: &str = "whole seconds from 1 (\"5s\", \"1m\") or \"never\"";

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<TtlSection>(table, OFFER, prefix, problems)?;
    let common = shared.counted("ttl", DRAIN_TIMEOUT, problems);
    let key = |k: &str| format!("{prefix}.{k}");
    let messages = s.messages.unwrap_or(2_000);
    problems.range(&key("messages"), messages, 1, 10_000_000, " messages");
    let rate = s.rate.unwrap_or(1_000);
    problems.range(&key("rate"), rate, 1, 1_000_000, " msg/s");
    let subjects = s.subjects.unwrap_or(100);
    problems.range(&key("subjects"), subjects, 1, 1_000_000, " subjects");
    let ttls = match &s.ttls {
        Some(list) => ttls(&list.0, &key("ttls"), problems),
        None => vec![Ttl::Secs(4), Ttl::Secs(8)],
    };
    if !ttls.iter().any(|t| matches!(t, Ttl::Secs(_))) {
        problems.push(key("ttls"), "needs at least one TTL that expires");
    }
    publish_before_deadlines((messages, rate), &ttls, prefix, problems);
    let markers = match &s.markers {
        Some(list) => markers(&list.0, &key("markers"), problems),
        None => vec![None],
    };
    let poll = s.poll.map_or(Duration::from_millis(50), |d| d.0);
    problems.range(&key("poll"), poll.as_secs_f64(), 0.005, 5.0, " seconds");
    let message_size = s.message_size.unwrap_or(128);
    problems.range(&key("message_size"), message_size, 1, 1 << 20, " bytes");
    let cost_messages = s.cost_messages.unwrap_or(0);
    problems.range(
        &key("cost_messages"),
        cost_messages,
        0,
        50_000_000,
        " messages",
    );
    if markers.is_empty() && cost_messages == 0 {
        problems.push(
            key("markers"),
            "no variant to run: give \"off\" or a marker TTL, e.g. markers = [\"off\", \"2s\"], \
             or cost_messages for the cost variant alone",
        );
    }
    let cost_ttl = s.cost_ttl.map_or(Duration::from_secs(30), |d| d.0);
    whole_seconds(cost_ttl, &key("cost_ttl"), problems);
    let plan = Plan {
        messages,
        rate,
        subjects,
        ttls,
        markers,
        poll,
        late_reader: s.late_reader.unwrap_or(true),
        message_size,
        cost_messages,
        cost_ttl,
    };
    Some((common, plan))
}

/// Every message is watched from before its deadline, and the watch
/// begins once the last is published: the publish phase must end a
/// second before the shortest TTL's first deadline.
fn publish_before_deadlines(
    (messages, rate): (u64, u64),
    ttls: &[Ttl],
    prefix: &str,
    problems: &mut Problems,
) {
    let Some(shortest) = ttls
        .iter()
        .filter_map(|t| match t {
            Ttl::Secs(s) => Some(*s),
            Ttl::Never => None,
        })
        .min()
    else {
        return;
    };
    let span = messages as f64 / rate.max(1) as f64;
    if span + 1.0 > shortest as f64 {
        problems.push(
            format!("{prefix}.messages"),
            format!(
                "{messages} messages at {rate} msg/s take {span:.1} s to publish, but the \
                 shortest TTL is {shortest}s: the watch starts after the last publish and \
                 must see every message before its deadline, so publishing must end a second \
                 before it; lower messages, raise rate or lengthen the TTLs"
            ),
        );
    }
}

fn whole_seconds(d: Duration, key: &str, problems: &mut Problems) -> Option<u64> {
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        problems.push(
            key,
            format!(
                "{d:?}: the server keeps TTLs in whole seconds from 1 and truncates \
                 the rest; give {TTL_HELP}"
            ),
        );
        return None;
    }
    Some(d.as_secs())
}

fn ttls(list: &[String], key: &str, problems: &mut Problems) -> Vec<Ttl> {
    if list.is_empty() {
        problems.push(key, format!("needs at least one TTL: {TTL_HELP}"));
    }
    let mut out = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let at = format!("{key}[{i}]");
        if text == "never" {
            out.push(Ttl::Never);
            continue;
        }
        match parse_duration(text) {
            Ok(d) => out.extend(whole_seconds(d, &at, problems).map(Ttl::Secs)),
            Err(e) => problems.push(at, format!("{text:?}: {e}; or \"never\"")),
        }
    }
    out
}

fn markers(list: &[String], key: &str, problems: &mut Problems) -> Vec<Option<Duration>> {
    let mut out = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let at = format!("{key}[{i}]");
        if text == "off" {
            out.push(None);
            continue;
        }
        match parse_duration(text) {
            Ok(d) => {
                out.extend(whole_seconds(d, &at, problems).map(|s| Some(Duration::from_secs(s))))
            }
            Err(e) => problems.push(at, format!("{text:?}: {e}; or \"off\"")),
        }
    }
    if out.len() > 1 && (1..out.len()).any(|i| out[..i].contains(&out[i])) {
        problems.push(key, "lists a setting twice");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Ttl;
    use crate::scenario::{KindPlan, one_scenario};

    fn plan(body: &str) -> Result<super::Plan, String> {
        let s = one_scenario("ttl", body.trim_start())?;
        match s.kind {
            KindPlan::Ttl(p) => Ok(p),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_duration_is_refused_since_a_variant_lasts_until_its_deadlines() {
        let e = plan("").unwrap_err();
        assert!(e.contains("unknown field `duration`"), "{e}");
        let text = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\n";
        let p = crate::scenario::parse("test", text).unwrap();
        let KindPlan::Ttl(p) = &p.scenarios[0].kind else {
            unreachable!()
        };
        assert_eq!(p.ttls, [Ttl::Secs(4), Ttl::Secs(8)]);
        assert_eq!(p.markers, [None]);
        assert!(p.late_reader);
    }

    #[test]
    fn bad_ttls_and_markers_name_their_key_and_value() {
        let text = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\n\
                    ttls = [\"1.5s\", \"soon\", \"never\"]\nmarkers = [\"500ms\", \"off\", \"off\"]\n\
                    poll = \"1ms\"\n";
        let e = crate::scenario::parse("test", text)
            .unwrap_err()
            .to_string();
        for want in [
            "ttls[0]",
            "1.5s",
            "ttls[1]",
            "\"soon\"",
            "markers[0]",
            "500ms",
            "lists a setting twice",
            "poll",
        ] {
            assert!(e.contains(want), "{want} missing from: {e}");
        }
    }

    #[test]
    fn a_profile_reads_into_the_plan() {
        let slow = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\nmessages = 3000\nrate = 1000\n\
                    ttls = [\"3s\", \"9s\"]\n";
        let e = crate::scenario::parse("test", slow)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("messages") && e.contains("3.0 s to publish"),
            "{e}"
        );
        let text = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\nmessages = 10\n\
                    ttls = [\"2s\", \"never\"]\nmarkers = [\"off\", \"3s\"]\nsubjects = 5\n";
        let p = crate::scenario::parse("test", text).unwrap();
        let KindPlan::Ttl(p) = &p.scenarios[0].kind else {
            unreachable!()
        };
        assert_eq!(p.messages, 10);
        assert_eq!(p.subjects, 5);
        assert_eq!(
            p.ttls,
            [super::Ttl::Secs(2), super::Ttl::Never],
            "in the profile's order"
        );
        assert_eq!(p.markers, [None, Some(std::time::Duration::from_secs(3))]);
        let only_never = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\nttls = \"never\"\n";
        let e = crate::scenario::parse("test", only_never)
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least one TTL that expires"), "{e}");
    }
}
