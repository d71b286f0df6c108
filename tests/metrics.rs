//! `run --metrics-listen`: live metrics in Prometheus text, scraped while
//! a run goes on.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

fn get(port: u16, path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    // Whole, as a scraper sends it: the server reads until the headers end.
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// A request sent in two pieces 50 ms apart, as a slow client might.
fn get_in_pieces(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /met").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(b"rics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The value of the first sample line that starts with `prefix`.
fn sample(body: &str, prefix: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix} in:\n{body}"))
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_while_the_run_goes_on() {
    let server = common::server();
    let dir = tempfile::tempdir().unwrap();
    let body = common::latency_body("[1000]", "4s", "0s", "");
    let profile = common::profile(dir.path(), "live", &body);
    let mut options = common::options(server.url(), &profile, dir.path());
    // Port 0: the listener picks a free one and says which, so no other
    // test's server can take it between a probe and the bind.
    options.metrics_listen = Some(([127, 0, 0, 1], 0).into());
    // The scraper beside the run (the run itself stays on this task).
    let scraper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let port = jsbench::system::live::address()
            .expect("the listener bound")
            .port();
        let first = tokio::task::spawn_blocking(move || get(port, "/metrics"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let second = tokio::task::spawn_blocking(move || get(port, "/metrics"))
            .await
            .unwrap();
        let other = tokio::task::spawn_blocking(move || get(port, "/other"))
            .await
            .unwrap();
        let pieces = tokio::task::spawn_blocking(move || get_in_pieces(port))
            .await
            .unwrap();
        (first, second, other, pieces)
    });
    let outcome = jsbench::run::run(options, tokio_util::sync::CancellationToken::new())
        .await
        .unwrap();
    assert!(outcome.passed);
    let (first, second, other, pieces) = scraper.await.unwrap();
    let port = jsbench::system::live::address().unwrap().port();

    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    assert!(first.contains("# TYPE jsbench_messages_published_total counter"));
    let sent = sample(&first, "jsbench_messages_published_total ");
    assert!(sent > 500.0, "about 2 s at 1000 msg/s: {sent}");
    assert!(sample(&first, "jsbench_messages_received_total ") > 0.0);
    let p99 = sample(&first, "jsbench_e2e_latency_seconds{quantile=\"0.99\"}");
    assert!(p99 > 0.0 && p99 < 1.0, "{p99}");
    assert_eq!(
        sample(
            &first,
            "jsbench_variant_running{scenario=\"latency\",variant=\"rate-1000\"}"
        ),
        1.0
    );
    // The percentiles cover the deliveries since the previous scrape.
    let between = sample(&second, "jsbench_e2e_latency_samples ");
    assert!((200.0..=900.0).contains(&between), "about 500: {between}");
    assert!(other.starts_with("HTTP/1.1 404"), "{other}");
    assert!(pieces.starts_with("HTTP/1.1 200 OK"), "{pieces}");
    // Once the run returns, the listener goes (its task is aborted, which
    // takes effect at the runtime's next turn).
    let mut closed = false;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(closed, "still listening on {port}");
}

#[test]
fn a_port_already_taken_is_refused_before_anything_runs() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let out = common::run(
        common::jsbench()
            .args(["run", "quick", "--progress", "never", "--metrics-listen"])
            .arg(format!("127.0.0.1:{port}"))
            .env_remove("NATS_URL"),
    );
    let (_, stderr) = common::text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--metrics-listen 127.0.0.1:{port}: cannot listen there"
        )),
        "{stderr}"
    );
}
