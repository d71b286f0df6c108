//! `kind = "dlq"`: its keys beside the shared paced load.

use std::time::Duration;

use crate::profile::shared::{Offer, Paced, take, variants};
use crate::profile::{
    Capture, CommonPlan, DlqHandlerPlan, Keys, MsgId, OriginHeaders, OriginalGet, PacedLoad,
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

/// The paced load with ids (their dropping is part of the check) and
/// headers a copy must carry.
const OFFER: Offer = Offer::PACED.and(&["msg_id", "headers"]);

pub fn read(section: Section<'_>, problems: &mut Problems) -> Option<(CommonPlan, Plan)> {
    let (mut shared, mut k) = take(section.table, OFFER, section.prefix, problems)?;
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
    let terminated = k.or("terminated", false);
    let fraction = |name: &str| {
        let classes = load.behaviour.classes.iter();
        classes
            .filter(|c| c.name == name)
            .map(|c| c.fraction)
            .sum::<f64>()
    };
    let dead = fraction("poison") + if terminated { fraction("term") } else { 0.0 };
    if dead <= 0.0 {
        k.problem(
            "behaviour.poison",
            "a dlq scenario needs messages to dead-letter: set poison = { fraction = 0.05 } \
             (or term with terminated = true)",
        );
    }
    let retentions = variants(
        &mut k,
        "retention",
        vec![Retention::Limits, Retention::Workqueue, Retention::Interest],
        "one or more of \"limits\", \"workqueue\", \"interest\"",
    );
    if terminated && retentions.iter().any(|r| *r != Retention::Limits) {
        k.problem(
            "terminated",
            "needs retention = \"limits\" only: in work-queue and interest streams a term \
             removes the message before the handler can read it",
        );
    }
    let span = (common.warmup + common.duration).as_secs_f64();
    let expected = (load.rate as f64 * span * dead).floor() as u64;
    let handler = handler(table(&mut k, "handler"), load.rate, expected, problems);
    // Long enough for a poison message to run through every deadline.
    shared.drain_at_least(&mut common, load.every_delivery());
    let plan = Plan {
        load,
        retentions,
        baseline: k.or("baseline", true),
        redrive: k.or("redrive", false),
        capture: k.or("capture", Capture::Account),
        terminated,
        handler,
    };
    k.finish(problems);
    Some((common, plan))
}

/// The keys of the table at `key`, read one by one; none when absent.
fn table(k: &mut Keys, key: &str) -> Keys {
    Keys::new(&k.path(key), k.or(key, toml::Table::new()), &[])
}

/// `[scenario.handler]`, with `rate` and the dead letters `expected` of
/// the load.
fn handler(mut h: Keys, rate: u64, expected: u64, problems: &mut Problems) -> DlqHandlerPlan {
    let (secs, ms) = (Duration::from_secs, Duration::from_millis);
    let restart_after = h.get::<u64>("restart_after");
    // A restart that never comes proves nothing: keep it well inside the
    // dead letters the load is expected to produce.
    match restart_after {
        Some(0) => h.problem(
            "restart_after",
            "must be at least 1 (omit it for no restart)",
        ),
        Some(n) if rate > 0 && n > expected / 2 => h.problem(
            "restart_after",
            format!(
                "{n} may never be reached: about {expected} messages are expected to be \
                 dead-lettered (rate x (warmup + duration) x poison fraction); use at most {}",
                expected / 2
            ),
        ),
        _ => {}
    }
    let plan = DlqHandlerPlan {
        ack_wait: h.duration("ack_wait", secs(2), ms(10)..=secs(3_600)),
        retry_delay: h.duration("retry_delay", ms(250), ms(1)..=secs(60)),
        concurrency: h.within("concurrency", 1, 1..=1_024, " advisories at once"),
        get: h.or("get", OriginalGet::Raw),
        origin_headers: origin_headers(table(&mut h, "origin_headers"), problems),
        erase: h.or("erase", false),
        restart_after,
        start_after: h.duration("start_after", Duration::ZERO, Duration::ZERO..=secs(600)),
    };
    h.finish(problems);
    plan
}

/// `origin_headers = { seq = "X-Origin-Seq" }`: any of the five names.
fn origin_headers(mut k: Keys, problems: &mut Problems) -> OriginHeaders {
    let d = OriginHeaders::default();
    let names = OriginHeaders {
        stream: k.or("stream", d.stream),
        consumer: k.or("consumer", d.consumer),
        seq: k.or("seq", d.seq),
        subject: k.or("subject", d.subject),
        reason: k.or("reason", d.reason),
    };
    for (field, name) in ["stream", "consumer", "seq", "subject", "reason"]
        .iter()
        .zip(names.all())
    {
        // A header name: printable ASCII without spaces or colons.
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
            k.problem(
                field,
                format!("{name:?} is not a header name (printable ASCII, no spaces or ':')"),
            );
        } else if crate::profile::is_publish_control(name) {
            k.problem(
                field,
                format!("{name} instructs the stream on publish (the DLQ stream would obey it); choose another name"),
            );
        } else if names
            .all()
            .iter()
            .filter(|n| n.eq_ignore_ascii_case(name))
            .count()
            > 1
        {
            k.problem(
                field,
                format!("{name} names two origin headers; each needs its own"),
            );
        }
    }
    k.finish(problems);
    names
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
