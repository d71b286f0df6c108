//! `kind = "ttl"`: its keys. Counted, not timed: a variant publishes
//! `messages` and lasts until the longest deadline has passed and been
//! watched, so it offers no `duration` or `warmup`.

use std::time::Duration;

use crate::profile::keys::{OneOrMany, has_repeats};
use crate::profile::shared::{Offer, take};
use crate::profile::{CommonPlan, Dur, Keys, Problems, Section, parse_duration};
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

const OFFER: Offer = Offer::TIMING
    .less(&["duration", "warmup"])
    .and(&["rate", "message_size"]);

/// How long the stream may take to read back or deliver, by default.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

const TTL_HELP: &str = "whole seconds from 1 (\"5s\", \"1m\") or \"never\"";

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
    let common = shared.counted("ttl", DRAIN_TIMEOUT, problems);
    let messages = k.within("messages", 2_000, 1..=10_000_000, " messages");
    let rate = shared.rate_or(1_000, 1_000_000, problems);
    let subjects = k.within("subjects", 100, 1..=1_000_000, " subjects");
    let ttls = ttls(&mut k);
    if !ttls.iter().any(|t| t.secs().is_some()) {
        k.problem("ttls", "needs at least one TTL that expires");
    }
    publish_before_deadlines((messages, rate), &ttls, &mut k);
    let markers = markers(&mut k);
    let poll = k.duration(
        "poll",
        Duration::from_millis(50),
        Duration::from_millis(5)..=Duration::from_secs(5),
    );
    let cost_messages = k.within("cost_messages", 0, 0..=50_000_000, " messages");
    if markers.is_empty() && cost_messages == 0 {
        k.problem(
            "markers",
            "no variant to run: give \"off\" or a marker TTL, e.g. markers = [\"off\", \"2s\"], \
             or cost_messages for the cost variant alone",
        );
    }
    let cost_ttl = k
        .get::<Dur>("cost_ttl")
        .map_or(Duration::from_secs(30), |d| d.0);
    whole_seconds(cost_ttl, "cost_ttl", &mut k);
    let plan = Plan {
        messages,
        rate,
        subjects,
        ttls,
        markers,
        poll,
        late_reader: k.or("late_reader", true),
        message_size: shared.fixed_size("ttl", problems),
        cost_messages,
        cost_ttl,
    };
    k.finish(problems);
    Some((common, plan))
}

/// Every message is watched from before its deadline, and the watch
/// begins once the last is published: the publish phase must end a
/// second before the shortest TTL's first deadline.
fn publish_before_deadlines((messages, rate): (u64, u64), ttls: &[Ttl], k: &mut Keys) {
    let Some(shortest) = ttls.iter().filter_map(Ttl::secs).min() else {
        return;
    };
    let span = messages as f64 / rate.max(1) as f64;
    if span + 1.0 > shortest as f64 {
        k.problem(
            "messages",
            format!(
                "{messages} messages at {rate} msg/s take {span:.1} s to publish, but the \
                 shortest TTL is {shortest}s: the watch starts after the last publish and \
                 must see every message before its deadline, so publishing must end a second \
                 before it; lower messages, raise rate or lengthen the TTLs"
            ),
        );
    }
}

/// `d` in whole seconds from 1, as the server keeps a TTL; `None` (and a
/// problem at `key`) otherwise.
fn whole_seconds(d: Duration, key: &str, k: &mut Keys) -> Option<u64> {
    if d.subsec_nanos() != 0 || d.as_secs() == 0 {
        k.problem(
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

/// `ttls`, round-robin over the messages; 4 s and 8 s by default.
fn ttls(k: &mut Keys) -> Vec<Ttl> {
    let Some(list) = seconds_or(k, "ttls", "never") else {
        return vec![Ttl::Secs(4), Ttl::Secs(8)];
    };
    if list.is_empty() {
        k.problem("ttls", format!("needs at least one TTL: {TTL_HELP}"));
    }
    list.into_iter()
        .map(|s| s.map_or(Ttl::Never, Ttl::Secs))
        .collect()
}

/// `markers`: one variant each, without (`"off"`, the default) or with
/// markers of this TTL.
fn markers(k: &mut Keys) -> Vec<Option<Duration>> {
    let Some(list) = seconds_or(k, "markers", "off") else {
        return vec![None];
    };
    let out: Vec<Option<Duration>> = (list.into_iter())
        .map(|s| s.map(Duration::from_secs))
        .collect();
    if has_repeats(&out) {
        k.problem("markers", "lists a setting twice");
    }
    out
}

/// The list `key` of whole-second durations, or `keyword` (`None`) in
/// their place; a bad element named by its index and left out. `None`
/// when the key is not given.
fn seconds_or(k: &mut Keys, key: &str, keyword: &str) -> Option<Vec<Option<u64>>> {
    let OneOrMany(list) = k.get::<OneOrMany<String>>(key)?;
    let mut out = Vec::new();
    for (i, text) in list.iter().enumerate() {
        let at = format!("{key}[{i}]");
        if text == keyword {
            out.push(None);
            continue;
        }
        match parse_duration(text) {
            Ok(d) => out.extend(whole_seconds(d, &at, k).map(Some)),
            Err(e) => k.problem(&at, format!("{text:?}: {e}; or \"{keyword}\"")),
        }
    }
    Some(out)
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
        assert!(e.contains("`rate`") && e.contains("`cost_ttl`"), "{e}");
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
        let sized = "name = \"t\"\n[[scenario]]\nkind = \"ttl\"\n\
                     message_size = { distribution = \"uniform\", min = 64, max = 128 }\n";
        let e = crate::scenario::parse("test", sized)
            .unwrap_err()
            .to_string();
        assert!(e.contains("the ttl scenario uses one fixed size"), "{e}");
    }
}
