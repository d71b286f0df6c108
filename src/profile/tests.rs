use std::time::Duration;

use super::*;
use crate::scenario::ack::AckMode;
use crate::scenario::{KindPlan, one_scenario, parse};

const GOOD: &str = r#"
name = "t"
[[scenario]]
kind = "latency"
duration = "2s"
rates = [100, 200]
"#;

fn problems(text: &str) -> Vec<Problem> {
    parse("test.toml", text)
        .expect_err("profile should be rejected")
        .problems
}

fn only_problem(text: &str) -> Problem {
    let p = problems(text);
    assert_eq!(p.len(), 1, "{p:?}");
    p.into_iter().next().unwrap()
}

#[test]
fn minimal_profile_gets_defaults() {
    let p = parse("test.toml", GOOD).unwrap();
    assert_eq!(
        p.server,
        ServerPlan {
            storage: Storage::File,
            replicas: 1,
            sync: None,
        }
    );
    let KindPlan::Latency(l) = &p.scenarios[0].kind else {
        panic!("latency")
    };
    assert_eq!(p.scenarios[0].common.name.as_deref(), Some("latency"));
    assert_eq!(p.scenarios[0].common.duration, Duration::from_secs(2));
    assert_eq!(p.scenarios[0].common.warmup, Duration::ZERO);
    assert_eq!(l.rates, vec![100, 200]);
    assert_eq!(l.publish.message_size, SizePlan::Fixed(128));
    assert_eq!(l.publish.msg_id, MsgId::None);
    assert_eq!(l.consumer.ack_wait, Duration::from_secs(30));
    assert_eq!(
        crate::scenario::estimated_duration(&p),
        Duration::from_secs(4)
    );
}

#[test]
fn unknown_top_level_key_names_the_key_and_the_allowed_ones() {
    let p = only_problem(&GOOD.replace("name = \"t\"", "name = \"t\"\nrepeats = 3"));
    assert!(p.message.contains("repeats"), "{p:?}");
    assert!(
        p.message.contains("description"),
        "should list allowed keys: {p:?}"
    );
}

#[test]
fn repeat_defaults_to_one_and_multiplies_the_estimate() {
    assert_eq!(parse("test.toml", GOOD).unwrap().repeat, 1);
    let p = parse(
        "test.toml",
        &GOOD.replace("name = \"t\"", "name = \"t\"\nrepeat = 3"),
    )
    .unwrap();
    assert_eq!(p.repeat, 3);
    assert_eq!(
        crate::scenario::estimated_duration(&p),
        Duration::from_secs(12)
    );
}

#[test]
fn bad_repeat_values_name_the_key_and_what_is_allowed() {
    let with = |v: &str| GOOD.replace("name = \"t\"", &format!("name = \"t\"\nrepeat = {v}"));
    for bad in ["0", "-2", "101"] {
        let p = only_problem(&with(bad));
        assert_eq!(p.path, "repeat", "{p:?}");
        assert_eq!(p.line, Some(3), "{p:?}");
        assert!(p.message.contains("allowed 1..=100"), "{p:?}");
    }
    let p = only_problem(&with("\"3\""));
    assert_eq!(p.path, "repeat", "{p:?}");
    assert!(p.message.contains("expected i64"), "{p:?}");
}

#[test]
fn unknown_scenario_key_has_its_path_and_line() {
    let p = only_problem(&format!("{GOOD}rats = [1]\n"));
    assert_eq!(p.path, "scenario[0].rats");
    assert!(p.message.contains("unknown field `rats`"), "{p:?}");
    assert!(
        p.message.contains("rates"),
        "should list allowed keys: {p:?}"
    );
    assert_eq!(p.line, Some(7), "the line of the key itself");
}

#[test]
fn bad_nested_value_names_the_full_path() {
    let p = only_problem(&format!(
        "{GOOD}[scenario.consumer]\nack_wait = \"30 seconds\"\n"
    ));
    assert_eq!(p.path, "scenario[0].consumer.ack_wait");
    assert!(p.message.contains("e.g."), "{p:?}");
}

#[test]
fn bad_enum_value_lists_the_allowed_values() {
    let p =
        only_problem(&GOOD.replace("name = \"t\"", "name = \"t\"\n[server]\nstorage = \"disk\""));
    assert_eq!(p.path, "server.storage");
    assert!(
        p.message.contains("file") && p.message.contains("memory"),
        "{p:?}"
    );
}

#[test]
fn every_range_problem_is_reported_at_once() {
    let text = GOOD.replace(
        "rates = [100, 200]",
        "rates = [0, 200]\nmessage_size = 8\npublishers = 0",
    );
    let ps = problems(&text);
    let paths: Vec<&str> = ps.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"scenario[0].rates[0]"), "{paths:?}");
    assert!(paths.contains(&"scenario[0].message_size"), "{paths:?}");
    assert!(paths.contains(&"scenario[0].publishers"), "{paths:?}");
    let size = ps
        .iter()
        .find(|p| p.path.ends_with("message_size"))
        .unwrap();
    assert!(size.message.contains("24..="), "{size:?}");
}

#[test]
fn unknown_kind_lists_the_kinds() {
    let p = only_problem(&GOOD.replace("kind = \"latency\"", "kind = \"latensy\""));
    assert_eq!(p.path, "scenario[0].kind");
    assert!(p.message.contains("latency"), "{p:?}");
}

#[test]
fn missing_rates_and_duration_are_named() {
    let ps = problems("name = \"t\"\n[[scenario]]\nkind = \"latency\"\n");
    let paths: Vec<&str> = ps.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"scenario[0].duration"), "{paths:?}");
    assert!(paths.contains(&"scenario[0].rates"), "{paths:?}");
}

#[test]
fn fate_judging_kinds_need_a_rate_and_explicit_acks() {
    // restart also needs kill_after; every other key has a default.
    for (kind, extra) in [
        ("redelivery", ""),
        ("backpressure", ""),
        ("dlq", ""),
        ("resume", ""),
        ("restart", "kill_after = \"1s\"\n"),
    ] {
        let ps = problems(&format!(
            "name = \"t\"\n[[scenario]]\nkind = \"{kind}\"\nduration = \"2s\"\n{extra}\
             [scenario.consumer]\nack = \"none\"\n"
        ));
        let at = |path: &str| {
            ps.iter()
                .find(|p| p.path == path)
                .map(|p| p.message.clone())
        };
        let rate = at("scenario[0].rate").unwrap_or_else(|| panic!("{kind}: {ps:?}"));
        assert!(
            rate.contains("missing; the offered load in total msg/s, e.g. rate = "),
            "{rate}"
        );
        let ack = at("scenario[0].consumer.ack").unwrap_or_else(|| panic!("{kind}: {ps:?}"));
        assert_eq!(ack, format!("{kind} needs ack = \"explicit\""));
        let ps = problems(&format!(
            "name = \"t\"\n[[scenario]]\nkind = \"{kind}\"\nduration = \"2s\"\nrate = 0\n{extra}"
        ));
        assert!(
            ps.iter().any(|p| p.path == "scenario[0].rate"),
            "{kind}: a zero rate is refused: {ps:?}"
        );
    }
}

#[test]
fn syntax_errors_carry_a_line() {
    let p = only_problem("name = \"t\"\n[[scenario]\n");
    assert_eq!(p.line, Some(2), "{p:?}");
}

#[test]
fn scenario_names_are_unique_and_defaulted() {
    let two = format!("{GOOD}\n[[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = [5]\n");
    let p = parse("t.toml", &two).unwrap();
    let names: Vec<&str> = p.scenarios.iter().map(|s| s.name()).collect();
    assert_eq!(names, vec!["latency", "latency-2"]);

    let clash = format!(
        "{GOOD}name = \"a\"\n[[scenario]]\nkind = \"latency\"\nname = \"a\"\nduration = \"1s\"\nrates = [5]\n"
    );
    let p = only_problem(&clash);
    assert_eq!(p.path, "scenario[1].name");
}

#[test]
fn error_display_names_file_path_and_line() {
    let err = parse("my.toml", &format!("{GOOD}rats = 1\n")).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("profile my.toml is invalid:"), "{text}");
    assert!(
        text.contains("scenario[0].rats (line 7): unknown field `rats`"),
        "{text}"
    );
}

#[test]
fn every_profile_file_is_bundled_and_valid() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut names: Vec<String> = BUNDLED.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(files, names, "profiles/ and BUNDLED differ");
    for (name, text) in BUNDLED {
        let p = parse(name, text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&p.name, name, "a bundled profile's name matches its file");
        assert!(!p.description.is_empty(), "{name} needs a description");
    }
}

#[test]
fn quick_profile_stays_well_under_a_minute() {
    let p = parse("quick", bundled("quick").unwrap()).unwrap();
    assert!(
        crate::scenario::estimated_duration(&p) <= Duration::from_secs(30),
        "{:?}",
        crate::scenario::estimated_duration(&p)
    );
}

#[test]
fn problems_point_at_the_line_of_their_key() {
    let text = "name = \"t\"\n\
                [[scenario]]\n\
                kind = \"latency\"\n\
                duration = \"1s\"\n\
                rates = [100]\n\
                [scenario.consumer]\n\
                kind = \"pull\"\n\
                batch = 0\n\
                [[scenario]]\n\
                kind = \"latency\"\n\
                duration = \"1s\"\n\
                rates = [100, 0]\n\
                [server]\n\
                replicas = 2\n";
    let ps = problems(text);
    let line = |path: &str| {
        ps.iter()
            .find(|p| p.path == path)
            .unwrap_or_else(|| panic!("{path}: {ps:?}"))
            .line
    };
    assert_eq!(line("scenario[0].consumer.batch"), Some(8));
    assert_eq!(line("scenario[1].rates[1]"), Some(12));
    assert_eq!(line("server.replicas"), Some(14));
}

const PUBLISH: &str = r#"
name = "p"
[[scenario]]
kind = "publish"
duration = "5s"
rates = [1000, "max"]
"#;

#[test]
fn publish_profile_gets_defaults_and_reads_max() {
    let p = parse("p.toml", PUBLISH).unwrap();
    let KindPlan::Publish(s) = &p.scenarios[0].kind else {
        panic!("publish")
    };
    assert_eq!(s.rates, vec![Rate::PerSecond(1000), Rate::Max]);
    assert_eq!(s.msg_ids, vec![MsgId::None]);
    assert_eq!(s.publish.mode, PublishMode::Async);
    assert_eq!(s.publish.pub_ack_window, 1024);
    assert_eq!(s.publish.message_size, SizePlan::Fixed(128));
    assert!(s.verify_stored);
    assert_eq!(s.variant_count(), 2);
}

#[test]
fn publish_keys_are_read_in_all_their_forms() {
    let text = format!(
        "{PUBLISH}msg_id = [\"none\", \"unique\"]\nmode = \"sync\"\nsubjects = 4\n\
         message_size = {{ distribution = \"uniform\", min = 64, max = 256 }}\n\
         headers = {{ \"X-A\" = \"1\" }}\n"
    );
    let p = parse("p.toml", &text).unwrap();
    let KindPlan::Publish(s) = &p.scenarios[0].kind else {
        panic!("publish")
    };
    assert_eq!(s.msg_ids, vec![MsgId::None, MsgId::Unique]);
    assert_eq!(s.publish.pub_ack_window, 1, "sync means a window of one");
    assert_eq!(s.publish.subjects, 4);
    assert_eq!(
        s.publish.message_size,
        SizePlan::Uniform { min: 64, max: 256 }
    );
    assert_eq!(
        s.publish.headers,
        vec![("X-A".to_string(), "1".to_string())]
    );
    assert_eq!(s.variant_count(), 4, "2 rates x 2 ids");

    let with_reference =
        format!("{PUBLISH}msg_id = [\"none\", \"unique\"]\nreference = \"minimal\"\n");
    let p = parse("p.toml", &with_reference).unwrap();
    let KindPlan::Publish(s) = &p.scenarios[0].kind else {
        panic!("publish")
    };
    // `minimal` is the old name of the idiomatic loop.
    assert_eq!(s.reference, vec![Reference::Idiomatic]);
    assert_eq!(
        s.variant_count(),
        6,
        "2 rates x 2 ids + 2 idiomatic references at max"
    );
}

#[test]
fn publish_rejects_what_cannot_be_measured_honestly() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "duplicates = 0.1\n",
            "scenario[0].msg_id",
            "msg_id = \"unique\"",
        ),
        ("rates = [\"fast\"]\n", "scenario[0].rates[0]", "\"max\""),
        (
            "mode = \"sync\"\npub_ack_window = 8\n",
            "scenario[0].pub_ack_window",
            "sync",
        ),
        (
            "headers = { \"Nats-Msg-Id\" = \"x\" }\n",
            "scenario[0].headers.Nats-Msg-Id",
            "reserved",
        ),
        (
            "message_size = { distribution = \"uniform\", min = 500, max = 100 }\n",
            "scenario[0].message_size.min",
            "larger than max",
        ),
        (
            "message_size = { distribution = \"exponential\", min = 64, max = 100 }\n",
            "scenario[0].message_size.mean",
            "needs a mean",
        ),
        (
            "msg_id = \"unique\"\nlate_duplicates = 0.1\nduplicate_window = \"10s\"\n",
            "scenario[0].late_duplicates",
            "window",
        ),
        (
            "duplicates = 0.9\nmsg_id = \"unique\"\n",
            "scenario[0].duplicates",
            "0..=0.5",
        ),
    ];
    for (extra, path, needle) in cases {
        let base = if extra.starts_with("rates") {
            PUBLISH.replace("rates = [1000, \"max\"]\n", "")
        } else {
            PUBLISH.to_string()
        };
        let ps = problems(&format!("{base}{extra}"));
        let p = ps
            .iter()
            .find(|p| p.path == *path)
            .unwrap_or_else(|| panic!("{extra}: {ps:?}"));
        assert!(p.message.contains(needle), "{extra}: {p:?}");
    }
    let reference_without_max =
        PUBLISH.replace("[1000, \"max\"]", "[1000]") + "reference = [\"core\"]\n";
    let ps = problems(&reference_without_max);
    assert!(
        ps.iter()
            .any(|p| p.path == "scenario[0].reference" && p.message.contains("max")),
        "{ps:?}"
    );
}

#[test]
fn connection_section_is_optional_and_read_with_context_field_names() {
    assert_eq!(parse("test.toml", GOOD).unwrap().connection, None);
    let p = parse(
        "test.toml",
        &format!(
            "{GOOD}[connection]\ncontext = \"staging\"\nurl = [\"nats://a:4222\", \"nats://b:4222\"]\n\
             user = \"bench\"\ncreds = \"~/bench.creds\"\ntls_first = true\ntimeout = \"3s\"\n\
             jetstream_domain = \"hub\"\n"
        ),
    )
    .unwrap();
    let c = p.connection.unwrap();
    assert_eq!(c.context.as_deref(), Some("staging"));
    assert_eq!(c.url.as_deref(), Some("nats://a:4222,nats://b:4222"));
    assert_eq!(c.creds.as_deref(), Some("~/bench.creds"));
    assert_eq!(c.tls_first, Some(true));
    assert_eq!(c.timeout, Some(Duration::from_secs(3)));
}

#[test]
fn connection_section_refuses_secrets_and_names_bad_keys() {
    let text = format!(
        "{GOOD}[connection]\nurl = \"nats://u:hunter2@h:4222\"\npassword = \"hunter2\"\ncert = \"c.pem\"\n"
    );
    let found = problems(&text);
    let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"connection.password"), "{found:?}");
    assert!(paths.contains(&"connection.url"), "{found:?}");
    assert!(paths.contains(&"connection.cert"), "{found:?}");
    assert!(
        found.iter().all(|p| !p.message.contains("hunter2")),
        "{found:?}"
    );
    let p = only_problem(&format!("{GOOD}[connection]\nserver = \"nats://h\"\n"));
    assert_eq!(p.path, "connection.server");
    assert!(p.message.contains("`url`"), "{p:?}");
    let p = only_problem(&format!(
        "{GOOD}[connection]\nurl = \"nats://bad host:x\"\n"
    ));
    assert_eq!(p.path, "connection.url");
    assert!(p.line.is_some(), "{p:?}");
}

const REDELIVERY: &str = r#"
name = "r"
[[scenario]]
kind = "redelivery"
duration = "5s"
rate = 100
"#;

#[test]
fn redelivery_reads_behaviours_into_classes_with_scripts() {
    let text = format!(
        "{REDELIVERY}[scenario.consumer]\nbackoff = [\"100ms\", \"1s\"]\nmax_deliver = 4\n\
         [scenario.behaviour]\nseed = 3\nprocessing = {{ distribution = \"uniform\", min = \"1ms\", max = \"3ms\" }}\n\
         handlers = 4\nnak = 0.1\nnak_delay = {{ fraction = 0.1, delay = \"200ms\" }}\n\
         transient = {{ fraction = 0.1, failures = 2, fail = \"ignore\" }}\npoison = {{ fraction = 0.05 }}\n"
    );
    let p = parse("r.toml", &text).unwrap();
    let KindPlan::Redelivery(r) = &p.scenarios[0].kind else {
        panic!("redelivery")
    };
    assert!(r.baseline);
    assert_eq!(r.load.consumer.ack_deadline(1), Duration::from_millis(100));
    assert_eq!(
        r.load.consumer.ack_deadline(9),
        Duration::from_secs(1),
        "the last entry repeats"
    );
    let b = &r.load.behaviour;
    assert_eq!((b.seed, b.handlers), (3, 4));
    let names: Vec<&str> = b.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["nak", "nak_delay", "transient", "poison"]);
    let transient = &b.classes[2];
    assert_eq!(transient.script, vec![Action::Ignore, Action::Ignore]);
    assert_eq!(transient.then, Action::Ack);
    assert_eq!(
        b.classes[3].then,
        Action::Ignore,
        "poison fails by ignoring by default"
    );
    assert!(
        p.scenarios[0].common.drain_timeout > Duration::from_secs(3),
        "long enough for every BackOff step"
    );
}

#[test]
fn behaviours_that_cannot_end_or_be_measured_are_refused() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[scenario.behaviour]\npoison = { fraction = 0.1 }\n",
            "scenario[0].behaviour.poison",
            "max_deliver",
        ),
        (
            "[scenario.consumer]\nbackoff = [\"1s\", \"2s\"]\nmax_deliver = 1\n",
            "scenario[0].consumer.max_deliver",
            ">= 2",
        ),
        (
            "[scenario.behaviour]\nnak = 0.7\nterm = 0.5\n",
            "scenario[0].behaviour",
            "add up to",
        ),
        (
            "[scenario.consumer]\nack_wait = \"1s\"\n[scenario.behaviour]\nin_progress = { fraction = 0.1, hold = \"3s\", every = \"2s\" }\n",
            "scenario[0].behaviour.in_progress.every",
            "ack deadline",
        ),
        (
            "[scenario.behaviour]\ntransient = { fraction = 0.1, fail = \"nak_delay\" }\n",
            "scenario[0].behaviour.transient.delay",
            "needs a delay",
        ),
        (
            "[scenario.consumer]\nack = \"none\"\n",
            "scenario[0].consumer.ack",
            "explicit",
        ),
    ];
    for (extra, path, needle) in cases {
        let ps = problems(&format!("{REDELIVERY}{extra}"));
        let p = ps
            .iter()
            .find(|p| p.path == *path)
            .unwrap_or_else(|| panic!("{extra}: {ps:?}"));
        assert!(p.message.contains(needle), "{extra}: {p:?}");
    }
}

#[test]
fn ack_scenario_reads_modes_and_allows_ack_every() {
    let p = parse(
        "a.toml",
        "name = \"a\"\n[[scenario]]\nkind = \"ack\"\nmessages = 1000\nacks = [\"double\", \"all\"]\n\
         reads = \"fetch\"\n[scenario.consumer]\nack_every = 10\n",
    )
    .unwrap();
    let KindPlan::Ack(a) = &p.scenarios[0].kind else {
        panic!("ack")
    };
    assert_eq!(a.modes, vec![AckMode::Double, AckMode::All]);
    assert_eq!(a.reads, vec![ConsumerKind::Fetch]);
    assert_eq!(a.consumer.ack_every, 10);
    let p = only_problem("name = \"a\"\n[[scenario]]\nkind = \"ack\"\n");
    assert_eq!(p.path, "scenario[0].messages");
}

#[test]
fn backpressure_needs_a_sweep_and_completed_work() {
    let base =
        "name = \"b\"\n[[scenario]]\nkind = \"backpressure\"\nduration = \"2s\"\nrate = 100\n";
    let p = only_problem(base);
    assert_eq!(p.path, "scenario[0].max_ack_pending");
    let ps = problems(&format!(
        "{base}max_ack_pending = [0]\n[scenario.consumer]\nmax_deliver = 3\n[scenario.behaviour]\npoison = {{ fraction = 0.1 }}\n"
    ));
    let paths: Vec<&str> = ps.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"scenario[0].max_ack_pending[0]"), "{ps:?}");
    assert!(paths.contains(&"scenario[0].behaviour"), "{ps:?}");
    let p = parse(
        "b.toml",
        &format!("{base}max_ack_pending = [1, 10]\nexpiry_ack_waits = [\"100ms\"]\n"),
    )
    .unwrap();
    let KindPlan::Backpressure(b) = &p.scenarios[0].kind else {
        panic!("backpressure")
    };
    assert_eq!(b.max_ack_pending, vec![1, 10]);
    assert_eq!(b.expiry_ack_waits, vec![Duration::from_millis(100)]);
    assert_eq!(b.expiry_max_ack_pending, 10_000);
    assert_eq!(p.scenarios[0].estimated_duration(), Duration::from_secs(6));
}

#[test]
fn the_ab_table_says_what_ab_judges_and_run_ignores_it() {
    let text = format!(
        "name = \"t\"\n[ab]\njudge = [\"*_rate\", \"latency/*/e2e_latency.p99\"]\nthreshold = \"2%\"\nlatency_threshold = \"10\"\n{}",
        &GOOD["\nname = \"t\"\n".len()..]
    );
    let p = parse("test.toml", &text).unwrap();
    let ab = p.ab.expect("[ab]");
    assert_eq!(ab.judge, vec!["*_rate", "latency/*/e2e_latency.p99"]);
    assert_eq!(ab.threshold, Some(0.02));
    assert_eq!(ab.latency_threshold, Some(0.10));
    assert!(parse("test.toml", GOOD).unwrap().ab.is_none());
}

#[test]
fn a_bad_ab_table_names_the_key() {
    let with = |ab: &str| format!("{ab}\n{GOOD}").replacen("\nname = \"t\"\n", "\n", 1);
    let p = only_problem(&format!(
        "name = \"t\"\n{}",
        with("[ab]\nthreshold = \"two percent\"")
    ));
    assert_eq!(p.path, "ab.threshold");
    assert!(p.message.contains("not a percentage"), "{p:?}");
    let p = only_problem(&format!("name = \"t\"\n{}", with("[ab]\njudge = [\"\"]")));
    assert_eq!(p.path, "ab.judge");
    let p = only_problem(&format!("name = \"t\"\n{}", with("[ab]\nbudget = \"5m\"")));
    assert!(p.message.contains("budget"), "{p:?}");
}

#[test]
fn latency_needs_explicit_acks_it_checks_them() {
    let text = format!("{GOOD}[scenario.consumer]\nack = \"none\"\n");
    let p = only_problem(&text);
    assert_eq!(p.path, "scenario[0].consumer.ack");
    assert!(p.message.contains("explicit"), "{p:?}");
}

#[test]
fn stream_settings_are_read_with_lists_as_variants() {
    let p = parse(
        "test.toml",
        &format!(
            "{GOOD}[scenario.stream]\nstorage = [\"file\", \"memory\"]\ndiscard = [\"old\", \"new\"]\n\
             max_msgs = 1000\nmax_bytes = \"64MiB\"\nmax_age = \"1h\"\nmax_msg_size = 4096\n\
             duplicate_window = \"2m\"\ncompression = \"s2\"\nallow_direct = true\n\
             placement = {{ tags = [\"ssd\"] }}\n"
        ),
    )
    .unwrap();
    let stream = &p.scenarios[0].common.stream;
    assert_eq!(stream.storage, [Storage::File, Storage::Memory]);
    assert_eq!(stream.discard, [Discard::Old, Discard::New]);
    let l = &stream.limits;
    assert_eq!(l.max_msgs, Some(1000));
    assert_eq!(l.max_bytes, Some(64 << 20));
    assert_eq!(l.max_age, Some(Duration::from_secs(3600)));
    assert_eq!(l.max_msg_size, Some(4096));
    assert_eq!(l.duplicate_window, Some(Duration::from_secs(120)));
    assert_eq!(l.compression, Some(Compression::S2));
    assert_eq!(l.allow_direct, Some(true));
    assert_eq!(l.placement.as_ref().unwrap().tags, ["ssd"]);
    // Two rates on four streams: eight variants of 2 s.
    assert_eq!(
        crate::scenario::estimated_duration(&p),
        Duration::from_secs(16)
    );
}

#[test]
fn bad_stream_settings_name_the_key() {
    let with = |extra: &str| format!("{GOOD}[scenario.stream]\n{extra}\n");
    let p = only_problem(&with("storage = [\"file\", \"disk\"]"));
    assert!(p.path.starts_with("scenario[0].stream.storage"), "{p:?}");
    let p = only_problem(&with("max_bytes = \"12 parsecs\""));
    assert_eq!(p.path, "scenario[0].stream.max_bytes");
    assert!(p.message.contains("MiB"), "{p:?}");
    let p = only_problem(&with("max_msgs = 0"));
    assert_eq!(p.path, "scenario[0].stream.max_msgs");
    let p = only_problem(&with("discard = [\"new\", \"new\"]"));
    assert_eq!(p.path, "scenario[0].stream.discard");
    let p = only_problem(&with("max_age = \"1m\"\nduplicate_window = \"2m\""));
    assert_eq!(p.path, "scenario[0].stream.duplicate_window");
    let p = only_problem(&with("discard_new_per_subject = true"));
    assert_eq!(p.path, "scenario[0].stream.discard_new_per_subject");
    let p = only_problem(&with("replicas = 3"));
    assert!(p.path.starts_with("scenario[0].stream"), "{p:?}");
    let p = only_problem(&format!("{GOOD}stream = 3\n"));
    assert_eq!(p.path, "scenario[0].stream");
    let restart = "name = \"r\"\n[[scenario]]\nkind = \"restart\"\nduration = \"4s\"\nrate = 100\n\
                   kill_after = \"1s\"\n[scenario.stream]\nstorage = [\"file\", \"memory\"]\n";
    let all = problems(restart);
    assert!(
        all.iter().any(|p| p.path == "scenario[0].stream.storage"),
        "{all:?}"
    );
}

#[test]
fn pull_keys_sweep_as_lists_and_are_checked_one_by_one() {
    let p = parse(
        "test.toml",
        &format!(
            "{GOOD}[scenario.consumer]\nbatch = [10, 500]\nexpires = [\"2s\", \"10s\"]\n\
             max_bytes = \"1MiB\"\nmax_waiting = 16\nidle_heartbeat = \"500ms\"\n"
        ),
    )
    .unwrap();
    let plan = &p.scenarios[0];
    let c = plan.kind.consumer().unwrap();
    assert_eq!(c.batch, 10, "the first of a list until swept");
    assert_eq!(c.pull.max_bytes, Some(1 << 20));
    assert_eq!(c.pull.idle_heartbeat, Some(Duration::from_millis(500)));
    assert_eq!(c.max_waiting, Some(16));
    assert_eq!(c.sweep.combinations(), 4);
    let combos = plan.pull_combinations();
    let names: Vec<_> = combos.iter().map(|(s, _)| s.clone().unwrap()).collect();
    assert_eq!(
        names,
        [
            "batch-10.expires-2s",
            "batch-10.expires-10s",
            "batch-500.expires-2s",
            "batch-500.expires-10s"
        ]
    );
    let last = combos[3].1.kind.consumer().unwrap();
    assert_eq!(
        (last.batch, last.pull.expires),
        (500, Some(Duration::from_secs(10)))
    );
    assert_eq!(
        last.sweep.combinations(),
        1,
        "a combination sweeps no further"
    );
    // Two rates, four pull combinations, 2 s each.
    assert_eq!(
        crate::scenario::estimated_duration(&p),
        Duration::from_secs(16)
    );
    // Nothing swept: the plan itself, unnamed.
    let plain = parse("test.toml", GOOD).unwrap();
    let combos = plain.scenarios[0].pull_combinations();
    assert_eq!(combos.len(), 1);
    assert_eq!(combos[0].0, None);

    let with = |extra: &str| format!("{GOOD}[scenario.consumer]\n{extra}\n");
    let p = only_problem(&with("batch = [10, 0]"));
    assert_eq!(p.path, "scenario[0].consumer.batch[1]");
    let p = only_problem(&with("expires = \"1s\"\nidle_heartbeat = \"600ms\""));
    assert_eq!(p.path, "scenario[0].consumer.idle_heartbeat");
    let p = only_problem(&with("kind = \"fetch\"\nidle_heartbeat = \"1s\""));
    assert_eq!(p.path, "scenario[0].consumer.idle_heartbeat");
    let p = only_problem(&with("max_waiting = 0"));
    assert_eq!(p.path, "scenario[0].consumer.max_waiting");
    let p = only_problem(&with("max_bytes = \"lots\""));
    assert!(
        p.path.starts_with("scenario[0].consumer.max_bytes"),
        "{p:?}"
    );
}

#[test]
fn retention_is_for_scenarios_whose_checks_allow_for_it() {
    let p = only_problem(
        "name = \"t\"\n[[scenario]]\nkind = \"publish\"\nduration = \"1s\"\nrates = [100]\n\
         [scenario.stream]\nretention = \"workqueue\"\n",
    );
    assert_eq!(p.path, "scenario[0].stream.retention");
    assert!(p.message.contains("latency"), "{p:?}");
    let ok = parse(
        "test.toml",
        &format!("{GOOD}[scenario.stream]\nretention = [\"limits\", \"interest\"]\n"),
    )
    .unwrap();
    assert_eq!(ok.scenarios[0].common.stream.combinations(), 2);
}

#[test]
fn push_keys_belong_to_push_and_pull_keys_to_pull() {
    let with = |extra: &str| format!("{GOOD}[scenario.consumer]\n{extra}\n");
    let p = parse(
        "test.toml",
        &with("kind = \"push\"\nconsumers = 3\nflow_control = true"),
    )
    .unwrap();
    let c = p.scenarios[0].kind.consumer().unwrap();
    assert_eq!(c.kind, ConsumerKind::Push);
    assert!(
        c.push.queue,
        "several clients share a push durable as a queue group"
    );
    assert!(c.push.flow_control);
    let p = only_problem(&with("flow_control = true"));
    assert_eq!(p.path, "scenario[0].consumer.flow_control");
    let p = only_problem(&with("kind = \"push\"\nbatch = 10"));
    assert_eq!(p.path, "scenario[0].consumer.batch");
    let p = only_problem(&with("kind = \"push\"\nconsumers = 2\nqueue = false"));
    assert_eq!(p.path, "scenario[0].consumer.queue");
    let p = only_problem(&with("kind = \"push\"\nrate_limit = 10"));
    assert_eq!(p.path, "scenario[0].consumer.rate_limit");
    // Side by side: the pull keys still serve the pull variant.
    let both = parse(
        "test.toml",
        &with("kind = [\"pull\", \"push\"]\nbatch = 10"),
    )
    .unwrap();
    let names: Vec<_> = both.scenarios[0]
        .pull_combinations()
        .into_iter()
        .map(|(s, _)| s.unwrap())
        .collect();
    assert_eq!(names, ["pull", "push"]);
}

/// Every paced scenario takes `arrival`; a shape that sets its own
/// rate refuses a `rate` beside it, and a Poisson arrival needs one.
#[test]
fn every_paced_scenario_reads_a_shape_and_refuses_a_rate_beside_it() {
    for kind in ["redelivery", "backpressure", "restart", "dlq", "fanout"] {
        let ramp = "arrival = { pattern = \"ramp\", from = 10, to = 90 }\n";
        let e = match one_scenario(kind, &format!("rate = 100\n{ramp}")) {
            Ok(_) => panic!("{kind}: rate beside a ramp accepted"),
            Err(e) => e,
        };
        assert!(
            e.contains("scenario[0].rate") && e.contains("sets its own rate"),
            "{kind}: {e}"
        );
        let e = match one_scenario(kind, "arrival = \"poisson\"\n") {
            Ok(_) => panic!("{kind}: poisson without a rate accepted"),
            Err(e) => e,
        };
        assert!(e.contains("scenario[0].rate"), "{kind}: {e}");
    }
}

#[test]
fn wake_every_is_auto_by_default_a_duration_or_refused_by_name() {
    let wake = |line: &str| {
        let p = parse("test.toml", &format!("{GOOD}{line}")).unwrap();
        let KindPlan::Latency(l) = &p.scenarios[0].kind else {
            panic!("latency")
        };
        l.publish.wake_every
    };
    assert_eq!(wake(""), None, "the rate decides");
    assert_eq!(wake("wake_every = \"auto\"\n"), None);
    assert_eq!(wake("wake_every = \"0s\"\n"), Some(Duration::ZERO));
    assert_eq!(
        wake("wake_every = \"200us\"\n"),
        Some(Duration::from_micros(200))
    );
    for (line, says) in [
        ("wake_every = \"soon\"\n", "auto"),
        ("wake_every = \"2s\"\n", "out of range"),
    ] {
        let p = only_problem(&format!("{GOOD}{line}"));
        assert_eq!(p.path, "scenario[0].wake_every", "{line}");
        assert!(p.message.contains(says), "{line}: {}", p.message);
    }
}

const SWEEP: &str = r#"
name = "t"
[[scenario]]
kind = "publish"
duration = "1s"
rates = ["max"]
"#;

/// A `[server] sync` list sweeps every scenario, outermost, beside the
/// stream's persist modes; the first value is what the server starts with.
#[test]
fn sync_and_persist_lists_sweep_the_variants() {
    let text = SWEEP.replace(
        "name = \"t\"",
        "name = \"t\"\n[server]\nsync = [\"default\", \"always\", \"250ms\"]",
    ) + "[scenario.stream]\npersist = [\"default\", \"async\"]\n";
    let p = parse("test.toml", &text).unwrap();
    assert_eq!(p.server.sync, Some(SyncSetting::Default));
    assert_eq!(p.syncs.len(), 3);
    let stream = &p.scenarios[0].common.stream;
    assert_eq!(stream.combinations(), 6);
    let suffixes: Vec<String> = stream
        .settings()
        .into_iter()
        .map(|s| s.suffix.unwrap())
        .collect();
    assert_eq!(suffixes[0], "sync-default.persist-default");
    assert_eq!(suffixes[3], "sync-always.persist-async");
    assert_eq!(suffixes[5], "sync-250ms.persist-async");
    assert_eq!(
        SyncSetting::Interval(Duration::from_millis(250)).config_value(),
        Some("250ms".to_string())
    );
    // One value: the server starts with it, nothing is swept.
    let one = parse(
        "test.toml",
        &SWEEP.replace("name = \"t\"", "name = \"t\"\n[server]\nsync = \"always\""),
    )
    .unwrap();
    assert_eq!(one.server.sync, Some(SyncSetting::Always));
    assert_eq!(one.scenarios[0].common.stream.combinations(), 1);
}

#[test]
fn bad_sync_and_persist_values_are_named_by_key() {
    let bad = only_problem(&SWEEP.replace(
        "name = \"t\"",
        "name = \"t\"\n[server]\nsync = [\"always\", \"sometimes\"]",
    ));
    assert_eq!(bad.path, "server.sync[1]");
    assert!(
        bad.message.contains("\"sometimes\" is not a sync setting"),
        "{bad:?}"
    );
    let zero =
        only_problem(&SWEEP.replace("name = \"t\"", "name = \"t\"\n[server]\nsync = \"0s\""));
    assert_eq!(zero.path, "server.sync");
    let replicated = only_problem(
        &(SWEEP.replace("name = \"t\"", "name = \"t\"\n[server]\nreplicas = 3")
            + "[scenario.stream]\npersist = \"async\"\n"),
    );
    assert_eq!(replicated.path, "scenario[0].stream.persist");
    assert!(
        replicated.message.contains("R1 streams only"),
        "{replicated:?}"
    );
    let memory = only_problem(
        &(SWEEP.to_string() + "[scenario.stream]\npersist = \"async\"\nstorage = \"memory\"\n"),
    );
    assert_eq!(memory.path, "scenario[0].stream.persist");
    let unknown = only_problem(&(SWEEP.to_string() + "[scenario.stream]\npersist = \"lazy\"\n"));
    assert!(unknown.path.contains("persist"), "{unknown:?}");
}

#[test]
fn the_consumer_client_is_read_and_direct_is_refused_where_the_plan_rules_it_out() {
    let with = |consumer: &str| {
        format!(
            "name = \"t\"\n[[scenario]]\nkind = \"latency\"\nduration = \"2s\"\nrates = [100]\n\
             [scenario.consumer]\n{consumer}\n"
        )
    };
    let p = parse("test.toml", &with("client = \"direct\"\npulls_ahead = 3")).unwrap();
    let consumer = p.scenarios[0].kind.consumer().unwrap();
    assert_eq!(
        (consumer.client, consumer.pulls_ahead),
        (ConsumerClient::Direct, 3)
    );
    let p = parse("test.toml", GOOD).unwrap();
    assert_eq!(
        p.scenarios[0].kind.consumer().unwrap().client,
        ConsumerClient::Auto
    );
    for (keys, why) in [
        (
            "client = \"direct\"\nkind = \"fetch\"",
            "pull consumers only",
        ),
        ("client = \"direct\"\ndouble_ack = true", "double_ack"),
        ("client = \"direct\"\nmax_bytes = 1000", "max_bytes"),
    ] {
        let p = only_problem(&with(keys));
        assert_eq!(p.path, "scenario[0].consumer.client", "{keys}");
        assert!(p.message.contains(why), "{keys}: {}", p.message);
    }
    let p = only_problem(&with("client = \"async-nats\"\npulls_ahead = 2"));
    assert_eq!(p.path, "scenario[0].consumer.pulls_ahead");
    let p = only_problem(&with("pulls_ahead = 0"));
    assert_eq!(p.path, "scenario[0].consumer.pulls_ahead");
    assert!(!problems(&with("client = \"sideways\"")).is_empty());
}

#[test]
fn client_is_auto_by_default_and_direct_is_refused_by_name_where_it_cannot_apply() {
    let client = |line: &str| {
        let p = parse("test.toml", &format!("{GOOD}{line}")).unwrap();
        let KindPlan::Latency(l) = &p.scenarios[0].kind else {
            panic!("latency")
        };
        l.publish.client
    };
    assert_eq!(client(""), PublishClient::Auto);
    assert_eq!(client("client = \"direct\"\n"), PublishClient::Direct);
    assert_eq!(
        client("client = \"async-nats\"\n"),
        PublishClient::AsyncNats
    );
    let p = only_problem(&format!("{GOOD}client = \"fast\"\n"));
    assert!(p.path.contains("client"), "{p:?}");
    // A restart kills the server; the direct client would not reconnect.
    let restart = "name = \"r\"\n[[scenario]]\nkind = \"restart\"\nduration = \"4s\"\nrate = 100\n\
                   kill_after = \"1s\"\n[scenario.stream]\nstorage = \"file\"\n";
    assert!(parse("test.toml", restart).is_ok());
    let forced = restart.replace("rate = 100\n", "rate = 100\nclient = \"direct\"\n");
    let p = only_problem(&forced);
    assert_eq!(p.path, "scenario[0].client");
    assert!(p.message.contains("reconnect"), "{}", p.message);
    let auto = restart.replace("rate = 100\n", "rate = 100\nclient = \"auto\"\n");
    assert!(
        parse("test.toml", &auto).is_ok(),
        "auto keeps async-nats there"
    );
    // Batches go through async-nats.
    let batched = "name = \"b\"\n[[scenario]]\nkind = \"publish\"\nduration = \"2s\"\nrates = [\"max\"]\n\
                   batch = [10]\nclient = \"direct\"\n";
    let all = problems(batched);
    assert!(
        all.iter()
            .any(|p| p.path == "scenario[0].client" && p.message.contains("batches")),
        "{all:?}"
    );
}

#[test]
fn auto_resolves_to_direct_unless_tls_or_a_fault() {
    assert_eq!(
        PublishClient::Auto.resolve(false, false).unwrap(),
        PublishClient::Direct
    );
    assert_eq!(
        PublishClient::Auto.resolve(true, false).unwrap(),
        PublishClient::AsyncNats
    );
    assert_eq!(
        PublishClient::Auto.resolve(false, true).unwrap(),
        PublishClient::AsyncNats
    );
    let e = PublishClient::Direct
        .resolve(false, true)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("client = \"direct\"") && e.contains("TLS"),
        "{e}"
    );
    let e = PublishClient::Direct
        .resolve(true, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("reconnect"), "{e}");
    assert_eq!(
        PublishClient::AsyncNats.resolve(true, true).unwrap(),
        PublishClient::AsyncNats
    );
}

/// Issue 51: every range check compared with `<` and `>`, which NaN
/// passes both ways, so `nak = nan` and `term = nan` ran the bundled
/// redelivery profile to the end and exited 0.
#[test]
fn nan_and_infinities_are_refused_by_name() {
    for (extra, path) in [
        (
            "[scenario.behaviour]\nnak = nan\n",
            "scenario[0].behaviour.nak",
        ),
        (
            "[scenario.behaviour]\nterm = nan\n",
            "scenario[0].behaviour.term",
        ),
        (
            "[scenario.behaviour]\nnak = inf\n",
            "scenario[0].behaviour.nak",
        ),
    ] {
        let ps = problems(&format!("{REDELIVERY}{extra}"));
        assert!(
            ps.iter()
                .any(|p| p.path == path && p.message.contains("out of range")),
            "{extra}: {ps:?}"
        );
    }
    let mut p = Problems::default();
    p.range("x", f64::NAN, 0.0, 1.0, "");
    p.range("y", f64::NEG_INFINITY, f64::MIN, 0.0, "");
    assert_eq!(p.list.len(), 2, "{:?}", p.list);
}
