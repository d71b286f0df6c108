//! No input makes jsbench panic: profiles, server URLs, natscli contexts,
//! creds and nkey files, and results folders handed to `compare` and
//! `report` end in a value or an error that names what is wrong. Property
//! tests (proptest) throw arbitrary text at each, and text shaped like the
//! real thing with one part broken, which reaches deeper.

use std::path::Path;

use jsbench::connect::{ConnectionFlags, ConnectionRequest, Environment, resolve};
use proptest::prelude::*;

/// Any text, including control characters and non-ASCII.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![".{0,200}", "[ -~]{0,200}", "\\PC{0,64}"]
}

/// A TOML value of any type, valid or not for the key it lands on.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"max\"".to_string()),
        Just("[]".to_string()),
        Just("[\"max\", 1000]".to_string()),
        Just("{ fraction = 2.0 }".to_string()),
        Just("true".to_string()),
        Just("-1".to_string()),
        Just("1e309".to_string()),
        Just("\"1h\"".to_string()),
        Just("\"-5s\"".to_string()),
        Just("\"\"".to_string()),
        (-1_000_000_000_000i64..1_000_000_000_000).prop_map(|n| n.to_string()),
        "\"[a-z0-9 %.]{0,12}\"",
    ]
}

const KEYS: &[&str] = &[
    "duration",
    "warmup",
    "rates",
    "rate",
    "publishers",
    "message_size",
    "msg_id",
    "pub_ack_window",
    "pub_ack_timeout",
    "drain_timeout",
    "messages",
    "acks",
    "reads",
    "retention",
    "capture",
    "baseline",
    "duplicates",
    "late_duplicates",
    "duplicate_window",
    "mode",
    "arrival",
    "deliver",
    "pace",
    "name",
    "max_ack_pending",
    "expiry_ack_waits",
];

/// Every kind the registry knows, and one it does not: a new kind is
/// fuzzed without touching this file.
fn kinds() -> Vec<&'static str> {
    let mut kinds = jsbench::scenario::KINDS.to_vec();
    kinds.push("nope");
    kinds
}

/// A profile with a real scenario kind and a handful of keys, each with a
/// value of any type: it parses as TOML, so validation gets to see it.
fn profile() -> impl Strategy<Value = String> {
    (
        prop::sample::select(kinds()),
        prop::collection::vec((prop::sample::select(KEYS), toml_value()), 0..6),
        prop::collection::vec(
            (
                prop::sample::select(&["consumer", "behaviour", "handler", "server"][..]),
                prop::sample::select(
                    &[
                        "ack_wait",
                        "max_deliver",
                        "backoff",
                        "processing",
                        "nak",
                        "poison",
                        "kind",
                        "ack",
                        "batch",
                        "storage",
                        "replicas",
                        "handlers",
                        "get",
                    ][..],
                ),
                toml_value(),
            ),
            0..4,
        ),
    )
        .prop_map(|(kind, keys, tables)| {
            let mut text = format!("name = \"p\"\n[[scenario]]\nkind = \"{kind}\"\n");
            let mut seen = std::collections::BTreeSet::new();
            for (k, v) in keys {
                if seen.insert(k) {
                    text.push_str(&format!("{k} = {v}\n"));
                }
            }
            let mut tables_seen = std::collections::BTreeSet::new();
            for (table, k, v) in tables {
                if tables_seen.insert((table, k)) {
                    text.push_str(&format!("[scenario.{table}]\n{k} = {v}\n"));
                }
            }
            text
        })
}

fn no_env() -> Environment {
    Environment::empty().with("HOME", "/nonexistent-home")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn any_profile_text_is_a_profile_or_a_named_problem(text in text()) {
        if let Err(e) = jsbench::scenario::parse("p.toml", &text) {
            prop_assert!(!e.problems.is_empty());
            prop_assert!(e.to_string().contains("p.toml"));
        }
    }

    #[test]
    fn a_profile_with_wrong_values_names_the_keys(text in profile()) {
        if let Err(e) = jsbench::scenario::parse("p.toml", &text) {
            for p in &e.problems {
                prop_assert!(!p.message.is_empty(), "{text}\n{e}");
            }
        }
    }

    #[test]
    fn any_server_url_list_parses_or_is_refused(text in text()) {
        let _ = jsbench::system::url::parse_list(&text, "--server");
    }

    #[test]
    fn any_context_file_is_read_or_refused_naming_it(text in text()) {
        let result = jsbench::connect::context::parse("c", Path::new("/c.json"), &text, &no_env());
        if let Err(e) = result {
            prop_assert!(e.0.contains("context c"), "{e}");
        }
    }

    #[test]
    fn a_context_shaped_file_with_any_values_is_read_or_refused(
        url in text(), user in text(), creds in text(), timeout in toml_value(),
    ) {
        let json = serde_json::json!({
            "url": url, "user": user, "creds": creds, "nkey": creds, "token": user,
            "jetstream_domain": user, "tls_first": timeout,
        });
        let _ = jsbench::connect::context::parse(
            "c", Path::new("/c.json"), &json.to_string(), &no_env(),
        );
    }

    #[test]
    fn any_creds_or_nkey_file_is_used_or_refused_naming_the_file(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("user.creds");
        std::fs::write(&path, &bytes).unwrap();
        for flags in [
            ConnectionFlags { server: Some("nats://127.0.0.1:4222".into()), creds: Some(path.clone()), ..Default::default() },
            ConnectionFlags { server: Some("nats://127.0.0.1:4222".into()), nkey: Some(path.clone()), ..Default::default() },
        ] {
            let request = ConnectionRequest { flags, env: no_env() };
            if let Err(e) = resolve(&request, "p", None, false) {
                prop_assert!(e.0.contains("user.creds"), "{e}");
            }
        }
    }

    #[test]
    fn any_summary_json_is_compared_and_reported_or_refused(text in text(), valid in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("run");
        std::fs::create_dir(&folder).unwrap();
        // Either any text, or a summary that is JSON with the version but
        // whatever else in it.
        let body = if valid {
            format!("{{\"schema_version\": 1, \"run\": {}}}", serde_json::Value::String(text))
        } else {
            text
        };
        std::fs::write(folder.join("summary.json"), body).unwrap();
        let _ = jsbench::compare::load("BASE", &folder);
        let _ = jsbench::report::command(&folder);
    }
}
