//! The local 3-node cluster: three JetStream nodes on loopback with routes
//! between them, R3 streams that pass every invariant, their placement in
//! the results, and nothing left running or on disk afterwards.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{jsbench, run, text};

#[test]
fn run_with_cluster_3_uses_r3_streams_and_records_the_topology() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let profile = common::profile(
        dir.path(),
        "r3",
        &common::latency_body("[300]", "500ms", "200ms", ""),
    );
    let out_dir = dir.path().join("results");
    let started = Instant::now();
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap(), "--cluster", "3"])
        .args(["--progress", "never", "-o"])
        .arg(&out_dir)
        .env_remove("NATS_URL")
        .env_remove("NATS_CONTEXT")
        .env("TMPDIR", &tmp));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stderr.contains("3 nodes, R3"), "{stderr}");

    let summary = common::summary(&common::results_dir(&out_dir));
    assert_eq!(summary.verdict, "passed");
    let server = &summary.run.server;
    assert_eq!(server.mode, "embedded-cluster");
    assert_eq!(server.replicas, 3);
    assert_eq!(server.cluster_size, Some(3));
    let cluster = server.cluster.clone().expect("cluster name");
    assert_eq!(server.nodes.len(), 3, "{:?}", server.nodes);
    for node in &server.nodes {
        assert_eq!(node.version, "2.15.1");
        assert_eq!(node.cluster.as_deref(), Some(cluster.as_str()));
        let url = node.url.as_deref().unwrap();
        assert!(url.starts_with("nats://127.0.0.1:"), "{url}");
    }
    let names: Vec<&str> = server.nodes.iter().map(|n| n.name.as_str()).collect();

    let (_, variant) = summary.variants().next().unwrap();
    assert!(
        variant.invariants.iter().all(|i| i.passed),
        "{:?}",
        variant.invariants
    );
    assert_eq!(variant.ledger.lost, 0);
    // Every node's telemetry, sampled while the variant ran.
    for name in &names {
        let key = format!("server.{name}.mem_mb");
        let memory = variant
            .timelines
            .get(&key)
            .unwrap_or_else(|| panic!("no {key}"));
        assert!(memory.counts.iter().any(|&mb| mb > 0), "{key}: {memory:?}");
    }
    assert!(common::metric(variant, "server_peak_mem") > 0.0);
    assert_eq!(common::metric(variant, "server_api_errors"), 0.0);
    let placement = &variant.streams[0];
    assert_eq!(placement.replicas, 3);
    assert_eq!(placement.cluster.as_deref(), Some(cluster.as_str()));
    let leader = placement.leader.as_deref().expect("a stream leader");
    assert!(names.contains(&leader), "{leader} not in {names:?}");
    assert_eq!(placement.peers.len(), 2, "{placement:?}");
    for peer in &placement.peers {
        assert!(names.contains(&peer.name.as_str()) && peer.name != leader);
    }

    // Every node and store is gone.
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "stores left behind: {left:?}");
    for node in &server.nodes {
        let address = node.url.as_deref().unwrap().trim_start_matches("nats://");
        assert!(TcpStream::connect(address).is_err(), "{address} still up");
    }
    eprintln!("cluster run took {:?}", started.elapsed());
}

#[test]
fn server_cluster_3_prints_its_urls_and_stops_every_node_on_ctrl_c() {
    let mut child = jsbench()
        .args(["server", "--cluster", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let urls: Vec<String> = line.trim().split(',').map(str::to_string).collect();
    assert_eq!(urls.len(), 3, "{line}");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(urls[0].as_str()).await.unwrap();
        let info = client.server_info();
        assert!(info.cluster.is_some());
        // Every node advertises loopback addresses only.
        assert_eq!(info.connect_urls.len(), 3, "{:?}", info.connect_urls);
        for url in &info.connect_urls {
            assert!(url.starts_with("127.0.0.1:"), "{url}");
        }
        // Ready means a stream with three replicas can be placed at once.
        let js = async_nats::jetstream::new(client);
        let mut stream = js
            .create_stream(async_nats::jetstream::stream::Config {
                name: "JSB_TEST_R3".into(),
                subjects: vec!["jsb.test.r3".into()],
                num_replicas: 3,
                ..Default::default()
            })
            .await
            .expect("R3 stream right after start");
        let info = stream.info().await.unwrap();
        assert_eq!(info.cluster.as_ref().unwrap().replicas.len(), 2);
    });

    // SAFETY: sends SIGINT to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let started = Instant::now();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(started.elapsed() < Duration::from_secs(10));
    for url in &urls {
        let address = url.trim_start_matches("nats://");
        assert!(TcpStream::connect(address).is_err(), "{url} still up");
    }
}

/// A base port with `n` free consecutive ports above it.
fn free_run(n: u16, avoid: &[u16]) -> u16 {
    loop {
        let base = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if base > 65_000 || avoid.iter().any(|a| a.abs_diff(base) < 8) {
            continue;
        }
        let held: Vec<_> = (base..base + n)
            .map(|p| std::net::TcpListener::bind(("127.0.0.1", p)))
            .collect();
        if held.iter().all(|h| h.is_ok()) {
            return base;
        }
    }
}

/// scripts/local-cluster.sh on free ports, with `env` added; returns the
/// script, its client URLs and the folder its stores go to.
fn start_script(env: &[(&str, &str)]) -> (std::process::Child, String, tempfile::TempDir) {
    let client = free_run(3, &[]);
    let routes = free_run(3, &[client]);
    let http = free_run(3, &[client, routes]);
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/local-cluster.sh"),
    )
    .env("BASE_PORT", client.to_string())
    .env("CLUSTER_BASE_PORT", routes.to_string())
    .env("HTTP_BASE_PORT", http.to_string())
    .env("TMPDIR", dir.path())
    .envs(env.iter().copied())
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut urls = String::new();
    stdout.read_line(&mut urls).unwrap();
    let urls = urls.trim().to_string();
    assert_eq!(urls.split(',').count(), 3, "{urls}");
    assert!(
        urls.starts_with(&format!("nats://127.0.0.1:{client}")),
        "{urls}"
    );
    (child, urls, dir)
}

/// Stops the script and checks that no node and no store is left.
fn stop_script(mut child: std::process::Child, urls: &str, dir: &tempfile::TempDir) {
    // SAFETY: sends SIGTERM to our own child (the script).
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    child.wait().unwrap();
    for url in urls.split(',') {
        let address = url.trim_start_matches("nats://");
        assert!(TcpStream::connect(address).is_err(), "{url} still up");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "stores left behind: {left:?}");
}

#[test]
fn local_cluster_script_serves_r3_streams_and_cleans_up() {
    let (child, urls, dir) = start_script(&[]);
    let work = tempfile::tempdir().unwrap();
    let profile = common::profile(
        work.path(),
        "script",
        &common::latency_body("[200]", "300ms", "0s", ""),
    );
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap(), "--replicas", "3"])
        .args(["--progress", "never", "-s", &urls, "-o"])
        .arg(work.path().join("results")));
    let (stdout_text, stderr) = text(&out);
    stop_script(child, &urls, &dir);
    assert_eq!(out.status.code(), Some(0), "{stdout_text}\n{stderr}");
}

/// The cluster of a managed deployment: its account requires max_bytes,
/// so every R3 stream jsbench creates must carry one, reserved three times.
#[test]
fn local_cluster_with_a_strict_account_runs_r3_streams_with_sized_max_bytes() {
    let (child, urls, dir) = start_script(&[("STRICT_ACCOUNT", "1")]);
    let work = tempfile::tempdir().unwrap();
    let profile = common::profile(
        work.path(),
        "strict",
        &common::latency_body("[200]", "300ms", "0s", ""),
    );
    let out_dir = work.path().join("results");
    let anonymous = run(jsbench()
        .args(["run", profile.to_str().unwrap(), "--replicas", "3"])
        .args(["--progress", "never", "-s", &urls, "-o"])
        .arg(&out_dir));
    let out = run(jsbench()
        .args(["run", profile.to_str().unwrap(), "--replicas", "3"])
        .args(["--user", "bench", "--password", "bench"])
        .args(["--progress", "never", "-s", &urls, "-o"])
        .arg(&out_dir));
    let (stdout_text, stderr) = text(&out);
    stop_script(child, &urls, &dir);
    assert_ne!(
        anonymous.status.code(),
        Some(0),
        "without the account's user the cluster refuses: the config is in force"
    );
    assert_eq!(out.status.code(), Some(0), "{stdout_text}\n{stderr}");
    let summary = common::summary(&common::results_dir(&out_dir));
    let sized = summary
        .run
        .server
        .stream_max_bytes
        .expect("max_bytes sized");
    assert_eq!(sized.bytes, 16 << 20, "{sized:?}");
    assert_eq!(summary.run.server.replicas, 3);
    let (_, variant) = summary.variants().next().unwrap();
    assert_eq!(variant.streams[0].replicas, 3);
    assert_eq!(variant.ledger.lost, 0);
}
