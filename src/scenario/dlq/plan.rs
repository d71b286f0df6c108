//! `kind = "dlq"`: its keys beside the shared paced load.

use std::time::Duration;

use serde::Deserialize;

use crate::profile::common::OneOrMany;
use crate::profile::shared::{Offer, Paced, split};
use crate::profile::{
    Capture, CommonPlan, DlqHandlerPlan, Dur, MsgId, OriginHeaders, OriginalGet, PacedLoad,
    Problems, Retention, Section,
};

/// The `dlq` scenario: load at a fixed rate with a fraction of poison
/// messages, and the advisory-built dead-letter queue, per retention.
#[derive(Debug, Clone)]
pub struct Plan {
    pub load: PacedLoad,
    /// One variant each.
    pub retentions: Vec<Retention>,
    /// Run a poison-free variant first, for the effect on healthy latency.
    pub baseline: bool,
    pub capture: Capture,
    /// Dead-letter termed messages too (MSG_TERMINATED advisories).
    pub terminated: bool,
    pub handler: DlqHandlerPlan,
    /// After each variant, send the dead letters back onto their original
    /// subjects (twice: the second must store nothing) and read them with
    /// the durable, healthy now.
    pub redrive: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DlqSection {
    retention: Option<OneOrMany<Retention>>,
    baseline: Option<bool>,
    redrive: Option<bool>,
    capture: Option<Capture>,
    terminated: Option<bool>,
    #[serde(default)]
    handler: HandlerSection,
}

/// The paced load with ids (their dropping is part of the check) and
/// headers a copy must carry.
const OFFER: Offer = Offer::PACED.and(&["msg_id", "headers"]);

/// `[scenario.handler]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandlerSection {
    ack_wait: Option<Dur>,
    retry_delay: Option<Dur>,
    concurrency: Option<usize>,
    get: Option<OriginalGet>,
    erase: Option<bool>,
    restart_after: Option<u64>,
    start_after: Option<Dur>,
    #[serde(default)]
    origin_headers: OriginHeadersSection,
}

/// `origin_headers = { seq = "X-Origin-Seq" }`: any of the four names.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct OriginHeadersSection {
    stream: Option<String>,
    consumer: Option<String>,
    seq: Option<String>,
    subject: Option<String>,
    reason: Option<String>,
}

impl OriginHeadersSection {
    fn validate(self, key: &str, problems: &mut Problems) -> OriginHeaders {
        let d = OriginHeaders::default();
        let names = OriginHeaders {
            stream: self.stream.unwrap_or(d.stream),
            consumer: self.consumer.unwrap_or(d.consumer),
            seq: self.seq.unwrap_or(d.seq),
            subject: self.subject.unwrap_or(d.subject),
            reason: self.reason.unwrap_or(d.reason),
        };
        for (field, name) in ["stream", "consumer", "seq", "subject", "reason"]
            .iter()
            .zip(names.all())
        {
            let path = format!("{key}.{field}");
            // A header name: printable ASCII without spaces or colons.
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                problems.push(
                    path,
                    format!("{name:?} is not a header name (printable ASCII, no spaces or ':')"),
                );
            } else if crate::profile::is_publish_control(name) {
                problems.push(
                    path,
                    format!("{name} instructs the stream on publish (the DLQ stream would obey it); choose another name"),
                );
            } else if names
                .all()
                .iter()
                .filter(|n| n.eq_ignore_ascii_case(name))
                .count()
                > 1
            {
                problems.push(
                    path,
                    format!("{name} names two origin headers; each needs its own"),
                );
            }
        }
        names
    }
}

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (table, prefix) = (section.table, section.prefix);
    let (mut shared, s) = split::<DlqSection>(table, OFFER, prefix, problems)?;
    let key = |k: &str| format!("{prefix}.{k}");
    let mut common = shared.common("dlq", problems);
    let load = shared.paced(
        &common,
        Paced {
            // Ids by default: the copies must show that Nats-Msg-Id was dropped.
            msg_id: MsgId::Unique,
            ..Paced::of("dlq", 500)
        },
        problems,
    );
    let (rate, consumer, behaviour) = (load.rate, &load.consumer, &load.behaviour);
    let terminated = s.terminated.unwrap_or(false);
    let fraction = |name: &str| {
        behaviour
            .classes
            .iter()
            .filter(|c| c.name == name)
            .map(|c| c.fraction)
            .sum::<f64>()
    };
    let dead = fraction("poison") + if terminated { fraction("term") } else { 0.0 };
    if dead <= 0.0 {
        problems.push(
            key("behaviour.poison"),
            "a dlq scenario needs messages to dead-letter: set poison = { fraction = 0.05 } \
             (or term with terminated = true)",
        );
    }

    let retentions = s
        .retention
        .map(|r| r.0)
        .unwrap_or_else(|| vec![Retention::Limits, Retention::Workqueue, Retention::Interest]);
    if retentions.is_empty() {
        problems.push(
            key("retention"),
            "needs at least one of \"limits\", \"workqueue\", \"interest\"",
        );
    }
    for (i, r) in retentions.iter().enumerate() {
        if retentions[..i].contains(r) {
            problems.push(
                key("retention"),
                format!(
                    "{:?} is listed twice; each retention is one variant",
                    r.label()
                ),
            );
        }
    }
    if terminated && retentions.iter().any(|r| *r != Retention::Limits) {
        problems.push(
            key("terminated"),
            "needs retention = \"limits\" only: in work-queue and interest streams a term \
             removes the message before the handler can read it",
        );
    }

    let h = s.handler;
    let hkey = |k: &str| format!("{prefix}.handler.{k}");
    let handler = DlqHandlerPlan {
        ack_wait: h.ack_wait.map_or(Duration::from_secs(2), |d| d.0),
        retry_delay: h.retry_delay.map_or(Duration::from_millis(250), |d| d.0),
        concurrency: h.concurrency.unwrap_or(1),
        get: h.get.unwrap_or(OriginalGet::Raw),
        origin_headers: h.origin_headers.validate(&hkey("origin_headers"), problems),
        erase: h.erase.unwrap_or(false),
        restart_after: h.restart_after,
        start_after: h.start_after.map_or(Duration::ZERO, |d| d.0),
    };
    problems.range(
        &hkey("ack_wait"),
        handler.ack_wait.as_secs_f64(),
        0.01,
        3_600.0,
        " seconds",
    );
    problems.range(
        &hkey("retry_delay"),
        handler.retry_delay.as_secs_f64(),
        0.001,
        60.0,
        " seconds",
    );
    problems.range(
        &hkey("start_after"),
        handler.start_after.as_secs_f64(),
        0.0,
        600.0,
        " seconds",
    );
    problems.range(
        &hkey("concurrency"),
        handler.concurrency,
        1,
        1_024,
        " advisories at once",
    );
    if let Some(n) = handler.restart_after {
        // A restart that never comes proves nothing: keep it well inside
        // the dead letters the load is expected to produce.
        let expected =
            (rate as f64 * (common.warmup + common.duration).as_secs_f64() * dead).floor() as u64;
        if n == 0 {
            problems.push(
                hkey("restart_after"),
                "must be at least 1 (omit it for no restart)",
            );
        } else if rate > 0 && n > expected / 2 {
            problems.push(
                hkey("restart_after"),
                format!(
                    "{n} may never be reached: about {expected} messages are expected to be \
                     dead-lettered (rate x (warmup + duration) x poison fraction); use at most {}",
                    expected / 2
                ),
            );
        }
    }

    if !shared.drain_timeout_given() {
        // Long enough for a poison message to run through every deadline.
        let longest: Duration = (1..=consumer.max_deliver.max(1) as u32)
            .map(|n| consumer.ack_deadline(n))
            .sum::<Duration>()
            + behaviour.processing.mean() * 4;
        common.drain_timeout = common.drain_timeout.max(longest + Duration::from_secs(10));
    }
    let plan = Plan {
        load,
        retentions,
        baseline: s.baseline.unwrap_or(true),
        redrive: s.redrive.unwrap_or(false),
        capture: s.capture.unwrap_or(Capture::Account),
        terminated,
        handler,
    };
    Some((common, plan))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::profile::{Capture, MsgId, OriginalGet, Problem, Retention};
    use crate::scenario::{KindPlan, parse};

    const DLQ: &str = "name = \"d\"\n[[scenario]]\nkind = \"dlq\"\nduration = \"5s\"\nrate = 100\n";
    const POISON: &str =
        "[scenario.consumer]\nmax_deliver = 3\n[scenario.behaviour]\npoison = { fraction = 0.1 }\n";

    fn problems(text: &str) -> Vec<Problem> {
        parse("d.toml", text).expect_err("refused").problems
    }

    #[test]
    fn defaults_cover_every_retention_the_seed_discusses() {
        let p = parse("d.toml", &format!("{DLQ}{POISON}")).unwrap();
        let KindPlan::Dlq(d) = &p.scenarios[0].kind else {
            panic!("dlq")
        };
        assert_eq!(
            d.retentions,
            [Retention::Limits, Retention::Workqueue, Retention::Interest]
        );
        assert!(d.baseline);
        assert_eq!(d.capture, Capture::Account);
        assert!(!d.terminated);
        assert_eq!(d.load.publish.msg_id, MsgId::Unique, "a dedup id to drop");
        assert_eq!(d.handler.ack_wait, Duration::from_secs(2));
        assert_eq!(d.handler.get, OriginalGet::Raw);
        assert_eq!(d.handler.restart_after, None);
        assert_eq!(
            d.handler.origin_headers.seq, "Nats-Dlq-Origin-Seq",
            "the delivery article's"
        );
        assert_eq!(
            crate::scenario::estimated_duration(&p),
            Duration::from_secs(20)
        );
    }

    #[test]
    fn origin_header_names_are_read_and_checked() {
        let handler =
            |names: &str| format!("{DLQ}{POISON}[scenario.handler]\norigin_headers = {names}\n");
        let p = parse("d.toml", &handler("{ seq = \"X-Origin-Seq\" }")).unwrap();
        let KindPlan::Dlq(d) = &p.scenarios[0].kind else {
            panic!("dlq")
        };
        assert_eq!(d.handler.origin_headers.seq, "X-Origin-Seq");
        assert_eq!(d.handler.origin_headers.stream, "Nats-Dlq-Origin-Stream");
        for (names, field, says) in [
            ("{ seq = \"Nats-Msg-Id\" }", "seq", "instructs the stream"),
            (
                "{ reason = \"Nats-Expected-Stream\" }",
                "reason",
                "instructs the stream",
            ),
            (
                "{ stream = \"Origin Stream\" }",
                "stream",
                "not a header name",
            ),
            ("{ consumer = \"\" }", "consumer", "not a header name"),
            (
                "{ seq = \"A\", stream = \"a\" }",
                "seq",
                "names two origin headers",
            ),
        ] {
            let ps = problems(&handler(names));
            let path = format!("scenario[0].handler.origin_headers.{field}");
            assert!(
                ps.iter()
                    .any(|p| p.path == path && p.message.contains(says)),
                "{names}: {ps:?}"
            );
        }
    }

    #[test]
    fn handler_keys_and_one_retention_are_read() {
        let p = parse(
            "d.toml",
            &format!(
                "{DLQ}retention = \"workqueue\"\nbaseline = false\ncapture = \"stream\"\n\
                 headers = {{ \"Order-Kind\" = \"test\" }}\n{POISON}\
                 [scenario.handler]\nack_wait = \"500ms\"\nretry_delay = \"50ms\"\nconcurrency = 4\n\
                 get = \"direct\"\nrestart_after = 5\n"
            ),
        )
        .unwrap();
        let KindPlan::Dlq(d) = &p.scenarios[0].kind else {
            panic!("dlq")
        };
        assert_eq!(d.retentions, [Retention::Workqueue]);
        assert_eq!(d.capture, Capture::Stream);
        assert_eq!(d.handler.concurrency, 4);
        assert_eq!(d.handler.get, OriginalGet::Direct);
        assert_eq!(d.handler.restart_after, Some(5));
        assert_eq!(d.load.publish.headers.len(), 1);
    }

    #[test]
    fn a_dlq_without_dead_letters_or_with_impossible_settings_is_refused() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "",
                "scenario[0].behaviour.poison",
                "needs messages to dead-letter",
            ),
            (
                "retention = [\"limits\", \"limits\"]\n",
                "scenario[0].retention",
                "listed twice",
            ),
            (
                "retention = \"fifo\"\n",
                "scenario[0].retention",
                "unknown variant",
            ),
            ("terminated = true\n", "scenario[0].terminated", "limits"),
            (
                "[scenario.handler]\nrestart_after = 400\n",
                "scenario[0].handler.restart_after",
                "about 50",
            ),
            (
                "[scenario.handler]\nconcurrency = 0\n",
                "scenario[0].handler.concurrency",
                "out of range",
            ),
            (
                "[scenario.handler]\nget = \"fast\"\n",
                "scenario[0].handler.get",
                "unknown variant",
            ),
            (
                "![scenario.consumer]\nack = \"all\"\nmax_deliver = 3\n\
                 [scenario.behaviour]\npoison = { fraction = 0.1 }\n",
                "scenario[0].consumer.ack",
                "explicit",
            ),
        ];
        for (extra, path, needle) in cases {
            // The poison plan sits before tables that reopen later.
            let text = if let Some(whole) = extra.strip_prefix('!') {
                format!("{DLQ}{whole}")
            } else if extra.starts_with('[') {
                format!("{DLQ}{POISON}{extra}")
            } else if extra.is_empty() {
                DLQ.to_string()
            } else {
                format!("{DLQ}{extra}{POISON}")
            };
            let ps = problems(&text);
            let p = ps
                .iter()
                .find(|p| p.path == *path)
                .unwrap_or_else(|| panic!("{extra}: {ps:?}"));
            assert!(p.message.contains(needle), "{extra}: {p:?}");
        }
        let ok = format!(
            "{DLQ}terminated = true\nretention = \"limits\"\n[scenario.behaviour]\nterm = 0.1\n"
        );
        assert!(
            parse("d.toml", &ok).is_ok(),
            "termed messages alone, on limits"
        );
    }
}
