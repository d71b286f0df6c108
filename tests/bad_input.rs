//! Servers that say no: a user without the JetStream API, a user who may
//! not publish to jsbench's subjects, and a server whose JetStream storage
//! fills up mid-run. Each gets a message naming the cause, exit 1, no panic,
//! and (once anything ran) the results written. The other rows of the
//! bad-input table in docs/faults.md are in tests/cli.rs and tests/connect.rs.

mod common;

use std::path::Path;
use std::process::Output;

use common::{jsbench, run, text};

const PERMISSIONS: &str = r#"
authorization {
  users = [
    { user: nojs, password: pw1,
      permissions: { publish: { allow: ["jsb.>", "_INBOX.>"] }, subscribe: { allow: [">"] } } }
    { user: nopub, password: pw2,
      permissions: { publish: { allow: ["$JS.API.>", "$JS.ACK.>", "_INBOX.>"] }, subscribe: { allow: [">"] } } }
  ]
}
"#;

fn run_against(dir: &Path, url: &str, body: &str) -> Output {
    let profile = common::profile(dir, "refused", body);
    run(jsbench()
        .args(["run", profile.to_str().unwrap(), "-s", url])
        .args(["--progress", "never", "-o"])
        .arg(dir.join("results"))
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT"))
}

fn with_user(url: &str, user: &str, password: &str) -> String {
    url.replacen("nats://", &format!("nats://{user}:{password}@"), 1)
}

#[test]
fn a_user_without_the_jetstream_api_is_told_which_permission_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(dir.path(), PERMISSIONS);
    let out = run_against(
        dir.path(),
        &with_user(server.url(), "nojs", "pw1"),
        &common::latency_body("[100]", "500ms", "0s", ""),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("user nojs may not use JetStream")
            && stderr.contains(r#"Permissions Violation for Publish to "$JS.API.INFO""#)
            && stderr.contains("publish on $JS.API.>"),
        "{stderr}"
    );
    assert!(!stderr.contains("pw1"), "no secret in messages: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_user_who_may_not_publish_fails_the_variant_naming_the_subject() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::server_with_config(dir.path(), PERMISSIONS);
    let out = run_against(
        dir.path(),
        &with_user(server.url(), "nopub", "pw2"),
        &common::latency_body("[100]", "500ms", "0s", ""),
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("the server refused: Permissions Violation for Publish to \"jsb."),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.verdict, "failed");
    let v = summary
        .variants()
        .next()
        .expect("the variant is recorded")
        .1;
    let persisted = v
        .invariants
        .iter()
        .find(|i| i.name == "every publish persisted")
        .expect("checked");
    assert!(!persisted.passed);
    assert_eq!(v.ledger.persisted, 0);
    assert!(
        v.warnings
            .iter()
            .any(|w| w.contains("Permissions Violation")),
        "{:?}",
        v.warnings
    );
}

#[test]
fn a_full_server_store_fails_the_variant_with_the_reason_and_keeps_the_results() {
    let dir = tempfile::tempdir().unwrap();
    // 256 KiB of file storage: about 1,300 of the 2,000 messages fit.
    let server = common::server_with_config(dir.path(), "jetstream { max_file_store: 262144 }\n");
    let out = run_against(
        dir.path(),
        server.url(),
        "[server]\nstorage = \"file\"\n\
         [[scenario]]\nkind = \"latency\"\nduration = \"1s\"\nrates = [2000]\n\
         [[scenario]]\nkind = \"latency\"\nname = \"after\"\nduration = \"200ms\"\nrates = [100]\n",
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("insufficient resources (the server's JetStream storage is full"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.verdict, "failed");
    let (_, full) = summary
        .variants()
        .find(|(s, _)| s.name == "latency")
        .expect("the full variant is recorded");
    assert!(full.ledger.persisted > 0, "the store took some");
    assert!(full.ledger.publish_errors > 0, "and refused the rest");
    assert_eq!(
        full.ledger.persisted + full.ledger.publish_errors,
        2000,
        "every publish answered one way or the other"
    );
    // Its stream was deleted, the space freed, and the next scenario ran.
    assert!(summary.variants().any(|(s, _)| s.name == "after"));
}

/// A team's dead-letter capture of `MAX_DELIVERIES.>` already in the
/// account: the server refuses jsbench's overlapping one, so only the dlq
/// scenario fails; the scenarios around it pass.
fn with_a_foreign_capture(server: &jsbench::server::EmbeddedServer) {
    let url = server.url().to_string();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(async move {
            let client = async_nats::connect(url).await.unwrap();
            async_nats::jetstream::new(client)
                .create_stream(async_nats::jetstream::stream::Config {
                    name: "TEAM_DLQ_ADVISORIES".into(),
                    subjects: vec!["$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>".into()],
                    ..Default::default()
                })
                .await
                .unwrap();
        });
}

const FIRST_DLQ_LAST: &str = "[[scenario]]\nkind = \"latency\"\nname = \"first\"\nduration = \"300ms\"\nrates = [100]\n\
     [[scenario]]\nkind = \"dlq\"\nduration = \"1s\"\nrate = 100\nretention = \"limits\"\nbaseline = false\n\
     [scenario.consumer]\nbackoff = [\"50ms\"]\nmax_deliver = 2\n\
     [scenario.behaviour]\npoison = { fraction = 0.1, fail = \"ignore\" }\n\
     [[scenario]]\nkind = \"latency\"\nname = \"last\"\nduration = \"300ms\"\nrates = [100]\n";

#[test]
fn a_failed_scenario_is_recorded_and_the_next_one_runs() {
    let server = common::server();
    with_a_foreign_capture(&server);
    let dir = tempfile::tempdir().unwrap();
    let out = run_against(dir.path(), server.url(), FIRST_DLQ_LAST);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.verdict, "failed");
    let scenario = |name: &str| summary.scenarios.iter().find(|s| s.name == name);
    let first = scenario("first").expect("first ran");
    assert!(first.variants.iter().all(|v| v.passed));
    let dlq = scenario("dlq").expect("the failure is a result");
    let errors: Vec<&str> = dlq
        .variants
        .iter()
        .filter_map(|v| v.error.as_deref())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("capture = \"stream\"")),
        "the error says what to do: {errors:?}"
    );
    let last = scenario("last").expect("the run went on");
    assert!(last.variants.iter().all(|v| v.passed));
}

#[test]
fn fail_fast_stops_at_the_failed_scenario_and_keeps_what_ran() {
    let server = common::server();
    with_a_foreign_capture(&server);
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(dir.path(), "refused", FIRST_DLQ_LAST);
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "-s",
            server.url(),
            "--fail-fast",
        ])
        .args(["--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("--fail-fast skipped"), "{stderr}");
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    let names: Vec<&str> = summary.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["first", "dlq"], "last never ran");
    assert_eq!(summary.verdict, "failed");
}

#[test]
fn an_unknown_scenario_kind_exits_2_listing_the_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let profile = common::profile(
        dir.path(),
        "typo",
        "[[scenario]]\nkind = \"redelivry\"\nduration = \"1s\"\n",
    );
    let out = run(jsbench()
        .args([
            "run",
            profile.to_str().unwrap(),
            "--progress",
            "never",
            "-o",
        ])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(stderr.contains("scenario[0].kind"), "{stderr}");
    for kind in jsbench::scenario::KINDS {
        assert!(stderr.contains(kind), "{kind} listed: {stderr}");
    }
    assert!(!dir.path().join("results").exists(), "nothing ran");
}
