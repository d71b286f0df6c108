//! The embedded server: loopback only, a free port, JetStream on, and gone
//! (process and store) once dropped.

mod common;

use std::net::TcpStream;

use jsbench::server::{PINNED_VERSION, ServerOptions};

#[test]
fn starts_on_loopback_with_jetstream_and_stops_on_drop() {
    let server = common::server();
    assert!(
        server.url().starts_with("nats://127.0.0.1:"),
        "{}",
        server.url()
    );
    assert!(
        server
            .monitor_url()
            .is_some_and(|m| m.starts_with("http://127.0.0.1:")),
        "{:?}",
        server.monitor_url()
    );
    assert_eq!(server.version(), PINNED_VERSION);
    let address = server.url().trim_start_matches("nats://").to_string();
    let pid = server.pid();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        let js = async_nats::jetstream::new(client);
        js.query_account().await.expect("JetStream is enabled");
    });

    drop(server);
    assert!(
        TcpStream::connect(&address).is_err(),
        "port still open after drop"
    );
    // SAFETY: signal 0 only checks whether the process exists.
    let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
    assert!(!alive, "nats-server {pid} still running after drop");
}

#[test]
fn two_servers_get_different_ports() {
    let a = common::server();
    let b = common::server();
    assert_ne!(a.url(), b.url());
}

#[test]
fn a_server_without_jetstream_can_be_started_for_error_tests() {
    let server = common::server_with(&ServerOptions {
        jetstream: false,
        ..Default::default()
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(server.url()).await.unwrap();
        assert!(!client.server_info().jetstream);
    });
}

#[test]
fn cpu_time_of_the_server_is_readable() {
    let server = common::server();
    assert!(jsbench::system::cpu::process_cpu_time(server.pid()).is_some());
}

#[test]
fn varz_cpu_is_readable_from_the_monitoring_port() {
    let server = common::server();
    let monitor = server.monitor_url().expect("monitoring is on");
    let cpu = jsbench::system::cpu::varz_cpu_percent(monitor);
    assert!(cpu.is_some_and(|c| c >= 0.0), "{cpu:?}");
}
