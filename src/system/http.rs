//! A minimal HTTP/1.0 GET for nats-server's monitoring endpoints (/varz,
//! /jsz): plain HTTP on a known host and port, which does not justify an
//! HTTP client dependency.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};

/// The JSON `path` of the monitoring endpoint `url` answers; `None` when
/// it does not answer, or not with that JSON.
pub fn get_json<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> Option<T> {
    get_parsed(url, path).ok()
}

/// The JSON `path` of the monitoring endpoint `url` answers; the error
/// says whether it did not answer or not with that JSON.
pub fn get_parsed<T: serde::de::DeserializeOwned>(url: &str, path: &str) -> Result<T> {
    let body = get(&format!("{}{path}", url.trim_end_matches('/')))?;
    serde_json::from_str(&body).with_context(|| format!("parsing {path}"))
}

/// The longest a GET may take in all, connect to last byte: a server that
/// drips its answer is as stuck as one that never answers.
const DEADLINE: Duration = Duration::from_secs(30);
/// Each step's timeout (connect, write, one read).
const STEP: Duration = Duration::from_secs(5);
/// The largest answer read: /jsz with every stream and consumer of a big
/// account runs to megabytes, never near this.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// GETs a monitoring URL (`http://127.0.0.1:<port>/jsz`) and returns the
/// body; any status but 200 is an error naming it. Bounded in time and
/// size: `--monitor` may name a server jsbench does not own.
pub fn get(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| anyhow!("not an http:// URL: {url}"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let started = std::time::Instant::now();
    let mut stream = connect(host)?;
    stream.set_read_timeout(Some(STEP))?;
    stream.set_write_timeout(Some(STEP))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n")?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = stream
            .read(&mut chunk)
            .with_context(|| format!("reading {url}"))?;
        if n == 0 {
            break;
        }
        response.extend_from_slice(&chunk[..n]);
        if response.len() > MAX_RESPONSE_BYTES {
            bail!("{url} answered more than {MAX_RESPONSE_BYTES} bytes; not a monitoring endpoint");
        }
        if started.elapsed() > DEADLINE {
            bail!("{url} took more than {DEADLINE:?} to answer");
        }
    }
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("malformed HTTP response from {url}"))?;
    let status = head.lines().next().unwrap_or("");
    if !status.contains(" 200 ") {
        bail!("{url} answered {status:?}");
    }
    Ok(body.to_string())
}

/// Connects to `host` (`name:port`), each address it resolves to tried
/// for [`STEP`] at most.
fn connect(host: &str) -> Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = None;
    for addr in host
        .to_socket_addrs()
        .with_context(|| format!("resolving {host}"))?
    {
        match TcpStream::connect_timeout(&addr, STEP) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).with_context(|| format!("connecting to {host}")),
        None => bail!("{host} resolves to no address"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: the monitor client read an answer without a size limit
    /// (and connected without a timeout): an endless body grew without end.
    #[test]
    fn an_endless_answer_is_cut_off_at_the_cap() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            let _ = socket.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
            let block = vec![b'x'; 1 << 20];
            // Until the client hangs up.
            while socket.write_all(&block).is_ok() {}
        });
        let e = get(&format!("http://127.0.0.1:{port}/jsz")).unwrap_err();
        assert!(format!("{e:#}").contains("more than"), "{e:#}");
        server.join().unwrap();
    }
}
