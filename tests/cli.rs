//! The binary as users meet it: exit statuses, messages, files, signals.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{jsbench, run, text};
use jsbench::server::ServerOptions;

#[test]
fn malformed_profile_names_file_field_and_allowed_values_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "bad",
        "[[scenario]]\nkind = \"latency\"\nduration = \"5s\"\nrates = [100]\n[scenario.consumer]\nack_wait = \"soon\"\n",
    );
    let out = run(jsbench().args(["run", path.to_str().unwrap(), "--progress", "never"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(path.to_str().unwrap()),
        "names the file: {stderr}"
    );
    assert!(
        stderr.contains("scenario[0].consumer.ack_wait"),
        "names the field: {stderr}"
    );
    assert!(
        stderr.contains("e.g. \"500ms\""),
        "says what is allowed: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn unknown_key_and_unknown_profile_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "typo",
        &common::latency_body("[100]", "1s", "0s", "publisher = 2\n"),
    );
    let out = run(jsbench().args(["run", path.to_str().unwrap()]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("scenario[0].publisher"), "{stderr}");
    assert!(
        stderr.contains("`publishers`"),
        "lists allowed keys: {stderr}"
    );

    let out = run(jsbench().args(["run", "no-such-profile"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("quick") && stderr.contains("default"),
        "{stderr}"
    );
}

#[test]
fn bad_flag_values_exit_2() {
    let out = run(jsbench().args(["run", "quick", "--timeout", "soon"]));
    assert_eq!(out.status.code(), Some(2));
    let out = run(jsbench().args(["run", "quick", "-s", "nats://bad host"]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("invalid server URL"), "{stderr}");
}

#[test]
fn missing_nats_server_names_the_setup_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(dir.path())
        .env("NATS_SERVER_BIN", dir.path().join("nats-server")));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("scripts/setup.sh"), "{stderr}");
    assert!(stderr.contains("NATS_SERVER_BIN"), "{stderr}");
}

#[test]
fn unreachable_server_fails_clearly_within_the_timeout() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run(jsbench()
        .args([
            "run",
            "quick",
            "--progress",
            "never",
            "--timeout",
            "1s",
            "-o",
        ])
        .arg(dir.path())
        .args(["-s", &format!("nats://127.0.0.1:{port}")]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot connect to nats://127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn server_without_jetstream_is_named() {
    let server = common::server_with(&ServerOptions {
        jetstream: false,
        ..Default::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(dir.path())
        .args(["-s", server.url()]));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("JetStream is not available"), "{stderr}");
}

#[test]
fn unwritable_output_folder_fails_before_measuring() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = run(jsbench()
        .args(["run", "quick", "--progress", "never", "-o"])
        .arg(file.join("results")));
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot create the results folder"),
        "{stderr}"
    );
}

#[test]
fn run_against_an_existing_server_writes_summary_csv_and_histograms() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "files",
        &common::latency_body("[300]", "500ms", "200ms", ""),
    );
    let out = run(jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env("NATS_URL", server.url()));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for column in ["e2e p50", "p90", "p99", "p99.9", "max", "achieved/s"] {
        assert!(stdout.contains(column), "table shows {column}: {stdout}");
    }
    let results = common::results_dir(&dir.path().join("results"));
    let name = results.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.ends_with("-files"), "{name}");
    assert!(
        stdout.contains(&name),
        "prints where results went: {stdout}"
    );

    let summary = common::summary(&results);
    assert_eq!(
        summary.schema_version,
        jsbench::results::summary::SCHEMA_VERSION
    );
    assert_eq!(summary.run.server.mode, "external");
    assert_eq!(summary.run.server.version, "2.15.1");
    assert!(summary.run.host.cores >= 1);
    assert!(summary.run.profile.text.contains("kind = \"latency\""));
    assert!(summary.run.finished_at.is_some());

    let csv = std::fs::read_to_string(results.join("metrics.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("scenario,variant,metric,unit,value,direction")
    );
    assert!(
        csv.contains("latency,rate-300,e2e_latency.p99,us,"),
        "{csv}"
    );
    assert!(
        csv.contains("latency,rate-300,publish_rate,msg/s,"),
        "{csv}"
    );

    let (_, variant) = summary.variants().next().unwrap();
    assert!(!variant.histograms.is_empty());
    for h in &variant.histograms {
        let hgrm = std::fs::read_to_string(results.join(&h.hgrm_file)).unwrap();
        assert!(
            hgrm.contains(&format!("Total count    = {:>12}", h.count)),
            "{hgrm}"
        );
        let encoded = std::fs::read_to_string(results.join(&h.hdr_file)).unwrap();
        let back = jsbench::record::histogram::Recorder::from_base64(&encoded).unwrap();
        assert_eq!(back.count(), h.count);
    }
}

#[test]
fn embedded_run_removes_its_server_and_store() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let path = common::profile(
        dir.path(),
        "embedded",
        &common::latency_body("[200]", "300ms", "0s", ""),
    );
    let out = run(jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL")
        .env("TMPDIR", &tmp));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.run.server.mode, "embedded");
    assert!(summary.run.server.urls.starts_with("nats://127.0.0.1:"));
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(
        left.is_empty(),
        "the server's temporary store is left: {left:?}"
    );
}

#[test]
fn ctrl_c_stops_the_run_and_keeps_results() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let path = common::profile(
        dir.path(),
        "long",
        &common::latency_body("[300]", "60s", "0s", ""),
    );
    let mut child = jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL")
        .env("TMPDIR", &tmp)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    assert!(line.contains("jsbench: profile long"), "{line}");
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: sends SIGINT to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let started = Instant::now();
    let status = child.wait().unwrap();
    assert!(started.elapsed() < Duration::from_secs(15), "slow to stop");
    assert_eq!(status.code(), Some(130));
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    assert_eq!(summary.verdict, "interrupted");
    let (_, v) = summary.variants().next().unwrap();
    assert!(
        v.ledger.published > 0 && v.ledger.lost == 0,
        "{:?}",
        v.ledger
    );
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(
        left.is_empty(),
        "the server's temporary store is left: {left:?}"
    );
}

#[test]
fn server_command_prints_its_url_and_stops_on_ctrl_c() {
    let mut child = jsbench()
        .arg("server")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut url = String::new();
    stdout.read_line(&mut url).unwrap();
    let url = url.trim().to_string();
    assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    let address = url.trim_start_matches("nats://").to_string();
    assert!(
        TcpStream::connect(&address).is_ok(),
        "server answers at {url}"
    );
    // SAFETY: sends SIGINT to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        TcpStream::connect(&address).is_err(),
        "server still up after Ctrl-C"
    );
}

#[test]
fn profiles_lists_the_bundled_ones_and_prints_one() {
    let out = run(jsbench().arg("profiles"));
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(stdout.lines().any(|l| l.starts_with("quick")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("default")), "{stdout}");
    let out = run(jsbench().args(["profiles", "quick"]));
    let (stdout, _) = text(&out);
    assert!(stdout.contains("name = \"quick\""), "{stdout}");
    let out = run(jsbench().args(["profiles", "nope"]));
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn embedded_publish_run_measures_server_cpu_and_prints_the_price_of_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::profile(
        dir.path(),
        "price",
        "[[scenario]]\nkind = \"publish\"\nduration = \"700ms\"\nrates = [\"max\"]\n\
         msg_id = [\"none\", \"unique\"]\npub_ack_window = 256\n",
    );
    let out = run(jsbench()
        .args(["run", path.to_str().unwrap(), "--progress", "never", "-o"])
        .arg(dir.path().join("results"))
        .env_remove("NATS_URL"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("price of dedup (vs no id): throughput x"),
        "{stdout}"
    );
    let summary = common::summary(&common::results_dir(&dir.path().join("results")));
    for (_, v) in summary.variants() {
        let server = v
            .metric("server_cpu_per_msg")
            .expect("embedded server CPU measured")
            .value;
        let client = v.metric("client_cpu_per_msg").unwrap().value;
        assert!(
            server > 0.0 && client > 0.0,
            "{}: server {server} client {client}",
            v.name
        );
        // The client's share of a message's CPU, from the same window.
        let share = v.metric("client_cpu_share").expect("client share").value;
        let expected = client / (client + server);
        assert!((share - expected).abs() < 1e-9, "{share} vs {expected}");
        assert!(v.metric("publisher_cpu_per_msg").unwrap().value > 0.0);
        // How the server's figure was read: its own process, at both ends.
        let method = v.params.get("server_cpu_method").and_then(|m| m.as_str());
        let method = method.unwrap_or_default();
        assert!(
            method.starts_with("process accounting (/proc)"),
            "{method:?}"
        );
    }
}
