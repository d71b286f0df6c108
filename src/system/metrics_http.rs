//! The `--metrics-listen` endpoint: `GET /metrics` in Prometheus text
//! ([`super::live::exposition`]), for a scraper beside a run. It serves one
//! page to a few scrapers, so it is built to be left alone on a shared
//! host: it holds at most [`MAX_CONNECTIONS`] at once (beyond that a
//! connection is closed at once rather than held), waits when accepting
//! fails (out of descriptors, an accept that failed in a tight loop spun a
//! whole core), and says so when it listens beyond this host.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::system::error::UsageError;

/// Connections served at once: a scraper or two, and a person's browser.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a connection may take to send its request's headers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest request read: a GET's headers.
const MAX_REQUEST: usize = 1024;
/// The wait after a failed accept, doubling up to [`ACCEPT_BACKOFF_MAX`].
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Binds `addr` and serves until the returned task is aborted; the
/// address it bound (a port 0 chosen).
pub async fn serve(addr: SocketAddr) -> Result<(JoinHandle<()>, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| UsageError(format!("--metrics-listen {addr}: cannot listen there: {e}")))?;
    let bound = listener.local_addr().unwrap_or(addr);
    super::live::enable();
    super::live::set_address(bound);
    eprintln!("jsbench: metrics at http://{bound}/metrics");
    if let Some(w) = beyond_loopback(bound) {
        eprintln!("jsbench: warning: {w}");
    }
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let task = tokio::spawn(async move {
        let mut backoff = ACCEPT_BACKOFF;
        loop {
            let socket = match listener.accept().await {
                Ok((socket, _)) => {
                    backoff = ACCEPT_BACKOFF;
                    socket
                }
                Err(_) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            // Full: closed at once (dropped), never queued.
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue;
            };
            tokio::spawn(async move {
                answer(socket).await;
                drop(slot);
            });
        }
    });
    Ok((task, bound))
}

/// A warning when `bound` is reachable from other hosts: the page names
/// the run's streams, subjects and figures.
pub fn beyond_loopback(bound: SocketAddr) -> Option<String> {
    (!bound.ip().is_loopback()).then(|| {
        format!(
            "--metrics-listen {bound} is reachable from other hosts (not 127.0.0.1): anyone who \
             can connect reads this run's metrics"
        )
    })
}

async fn answer(mut socket: TcpStream) {
    // The request may come in pieces: read until its headers end (or
    // MAX_REQUEST bytes, or REQUEST_TIMEOUT), not just the first piece.
    let mut request = Vec::with_capacity(MAX_REQUEST);
    let mut chunk = [0u8; MAX_REQUEST];
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < MAX_REQUEST {
        match tokio::time::timeout_at(deadline, socket.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => request.extend_from_slice(&chunk[..n]),
            _ => break,
        }
    }
    let line = String::from_utf8_lossy(&request);
    let (status, body) = if line.starts_with("GET /metrics") {
        let scraper = super::live::scraper_of(&line);
        ("200 OK", super::live::exposition(&scraper))
    } else {
        (
            "404 Not Found",
            "jsbench serves /metrics only\n".to_string(),
        )
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = socket.write_all(response.as_bytes()).await;
    let _ = socket.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: every connection was held (up to 2 s each, without
    /// limit): 80 idle ones under `ulimit -n 48` kept a core busy. Beyond
    /// the cap a connection is now closed at once, and the ones held still
    /// get their answer.
    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once() {
        let (task, addr) = serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted in the order they connected, so this one is the one
        // too many: closed without a word, where a held one would get its
        // 404 once the request timeout ran out.
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), extra.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "the extra connection was held and answered: {read:?}"
        );
        // A held one is still answered.
        let mut first = idle.remove(0);
        first
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        first.read_to_end(&mut answer).await.unwrap();
        assert!(answer.starts_with(b"HTTP/1.1 200 OK"), "{answer:?}");
        task.abort();
    }

    #[test]
    fn listening_beyond_this_host_is_said() {
        assert!(beyond_loopback("127.0.0.1:9100".parse().unwrap()).is_none());
        assert!(beyond_loopback("[::1]:9100".parse().unwrap()).is_none());
        let w = beyond_loopback("0.0.0.0:9100".parse().unwrap()).unwrap();
        assert!(w.contains("other hosts"), "{w}");
    }
}
