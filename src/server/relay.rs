//! A relay on loopback that jsbench controls, one thread per direction
//! of each connection (no runtime needed, so a fault can be injected
//! from anywhere).
//!
//! Two uses. A local cluster started for a route fault runs every route
//! through one relay per node (the node advertises its relay's address,
//! so the routes its peers learn by gossip pass through it too): a route
//! can then be cut or paused as a network would, without root and without
//! touching the servers. And a relay between a TCP port and a Unix socket
//! lets a process in a network namespace of its own (a worker test)
//! reach a server outside it while every address stays on a loopback
//! interface.
//!
//! A route connection is told apart by the server that opened it: the
//! relay reads `"server_name":"..."` from the first bytes that server
//! sends (its route INFO), and cuts or pauses by that name.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One end of a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    /// `unix:/path/to.sock`, or `host:port` (loopback only).
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let addr: SocketAddr = s.trim_start_matches("tcp:").parse().map_err(|e| {
            format!("{s:?} is neither unix:PATH nor an address like 127.0.0.1:4222: {e}")
        })?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{addr} is not a loopback address; a relay stays on loopback"
            ));
        }
        Ok(Endpoint::Tcp(addr))
    }
}

/// What a relay does to a peer's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Closed, and closed again as soon as a new one names the peer.
    Cut,
    /// Held open with nothing forwarded either way, as a stalled network
    /// would.
    Pause,
}

/// Every connection of the relay's peers, by the name that opened them.
pub const ANY_PEER: &str = "*";

pub struct Relay {
    listen: Endpoint,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    state: Mutex<State>,
    /// Woken when a pause ends or the relay stops.
    changed: Condvar,
}

#[derive(Default)]
struct State {
    cut: HashSet<String>,
    paused: HashSet<String>,
    conns: Vec<Arc<Conn>>,
}

/// One relayed connection: both sockets, to shut down on a cut, and the
/// peer that opened it once known.
struct Conn {
    client: Sock,
    upstream: Sock,
    peer: Mutex<Option<String>>,
    closed: AtomicBool,
}

impl Conn {
    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.client.shutdown();
        self.upstream.shutdown();
    }

    fn peer(&self) -> Option<String> {
        self.peer.lock().expect("not poisoned").clone()
    }
}

impl State {
    fn blocked(&self, peer: Option<&str>, set: &HashSet<String>) -> bool {
        set.contains(ANY_PEER) || peer.is_some_and(|p| set.contains(p))
    }
}

enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn connect(to: &Endpoint) -> io::Result<Sock> {
        Ok(match to {
            Endpoint::Tcp(addr) => {
                let s = TcpStream::connect_timeout(addr, Duration::from_secs(5))?;
                s.set_nodelay(true)?;
                Sock::Tcp(s)
            }
            Endpoint::Unix(path) => Sock::Unix(UnixStream::connect(path)?),
        })
    }

    fn try_clone(&self) -> io::Result<Sock> {
        Ok(match self {
            Sock::Tcp(s) => Sock::Tcp(s.try_clone()?),
            Sock::Unix(s) => Sock::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(Shutdown::Both),
            Sock::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.flush(),
            Sock::Unix(s) => s.flush(),
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn accept(&self) -> io::Result<Sock> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                Sock::Tcp(s)
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Sock::Unix(s)
            }
        })
    }
}

/// How often the accept loop looks for a stop.
const POLL: Duration = Duration::from_millis(20);
/// How far into a connection the opening server's name is looked for.
const NAME_WINDOW: usize = 8 * 1024;

impl Relay {
    /// Listens on `listen` (a TCP port 0 picks a free one) and relays
    /// every connection to `to`.
    pub fn start(listen: Endpoint, to: Endpoint) -> io::Result<Relay> {
        let (listener, bound) = match &listen {
            Endpoint::Tcp(addr) => {
                if !addr.ip().is_loopback() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{addr} is not a loopback address"),
                    ));
                }
                let l = TcpListener::bind(addr)?;
                let bound = Endpoint::Tcp(l.local_addr()?);
                (Listener::Tcp(l), bound)
            }
            Endpoint::Unix(path) => {
                let _ = std::fs::remove_file(path);
                (Listener::Unix(UnixListener::bind(path)?), listen.clone())
            }
        };
        match &listener {
            Listener::Tcp(l) => l.set_nonblocking(true)?,
            Listener::Unix(l) => l.set_nonblocking(true)?,
        }
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("relay-accept".into())
                .spawn(move || accept_loop(listener, to, shared))?
        };
        Ok(Relay {
            listen: bound,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where it listens (with the port picked).
    pub fn listen(&self) -> &Endpoint {
        &self.listen
    }

    /// The TCP port it listens on; `None` for a Unix socket.
    pub fn port(&self) -> Option<u16> {
        match &self.listen {
            Endpoint::Tcp(a) => Some(a.port()),
            Endpoint::Unix(_) => None,
        }
    }

    /// Cuts or pauses `peer`'s connections ([`ANY_PEER`] for all).
    pub fn block(&self, peer: &str, how: Block) {
        let mut state = self.shared.state.lock().expect("not poisoned");
        match how {
            Block::Cut => {
                state.cut.insert(peer.to_string());
                let cut: Vec<Arc<Conn>> = state
                    .conns
                    .iter()
                    .filter(|c| peer == ANY_PEER || c.peer().as_deref() == Some(peer))
                    .cloned()
                    .collect();
                for c in cut {
                    c.close();
                }
            }
            Block::Pause => {
                state.paused.insert(peer.to_string());
            }
        }
    }

    /// Lets `peer`'s connections through again: new ones connect, paused
    /// ones carry on where they stopped.
    pub fn heal(&self, peer: &str) {
        let mut state = self.shared.state.lock().expect("not poisoned");
        state.cut.remove(peer);
        state.paused.remove(peer);
        self.shared.changed.notify_all();
    }

    /// The peers of the open connections (`None` before a peer named
    /// itself, or for a connection that is not a route).
    pub fn peers(&self) -> Vec<Option<String>> {
        let state = self.shared.state.lock().expect("not poisoned");
        state
            .conns
            .iter()
            .filter(|c| !c.closed.load(Ordering::Relaxed))
            .map(|c| c.peer())
            .collect()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        {
            let state = self.shared.state.lock().expect("not poisoned");
            for c in &state.conns {
                c.close();
            }
            self.shared.changed.notify_all();
        }
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Endpoint::Unix(path) = &self.listen {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn accept_loop(listener: Listener, to: Endpoint, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        let client = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(_) => {
                std::thread::sleep(POLL);
                continue;
            }
        };
        {
            let state = shared.state.lock().expect("not poisoned");
            if state.cut.contains(ANY_PEER) {
                client.shutdown();
                continue;
            }
        }
        let Ok(upstream) = Sock::connect(&to) else {
            client.shutdown();
            continue;
        };
        let (Ok(client_reader), Ok(upstream_reader)) = (client.try_clone(), upstream.try_clone())
        else {
            continue;
        };
        let conn = Arc::new(Conn {
            client,
            upstream,
            peer: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        {
            let mut state = shared.state.lock().expect("not poisoned");
            state.conns.retain(|c| !c.closed.load(Ordering::Relaxed));
            state.conns.push(conn.clone());
        }
        let (Ok(client_writer), Ok(upstream_writer)) =
            (conn.client.try_clone(), conn.upstream.try_clone())
        else {
            conn.close();
            continue;
        };
        for (reader, writer, names) in [
            (client_reader, upstream_writer, true),
            (upstream_reader, client_writer, false),
        ] {
            let (this, shared) = (conn.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name("relay-copy".into())
                .spawn(move || copy(reader, writer, &this, &shared, names));
            if spawned.is_err() {
                conn.close();
            }
        }
    }
}

/// Forwards `from` to `to` until either closes, holding while the
/// connection's peer is paused; with `names`, learns the peer from the
/// first bytes and closes the connection if that peer is cut.
fn copy(mut from: Sock, mut to: Sock, conn: &Conn, shared: &Shared, names: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen: Vec<u8> = Vec::new();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if names && conn.peer().is_none() && seen.len() < NAME_WINDOW {
            seen.extend_from_slice(&buf[..n]);
            if let Some(name) = server_name(&seen) {
                *conn.peer.lock().expect("not poisoned") = Some(name);
            }
        }
        // Hold while paused; give up when cut or stopped.
        {
            let mut state = shared.state.lock().expect("not poisoned");
            loop {
                let peer = conn.peer();
                if shared.stop.load(Ordering::Relaxed) || state.blocked(peer.as_deref(), &state.cut)
                {
                    drop(state);
                    conn.close();
                    return;
                }
                if !state.blocked(peer.as_deref(), &state.paused) {
                    break;
                }
                state = shared
                    .changed
                    .wait_timeout(state, POLL)
                    .expect("not poisoned")
                    .0;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    conn.close();
}

/// The `"server_name":"..."` a server's INFO carries.
fn server_name(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let start = text.find("\"server_name\":\"")? + "\"server_name\":\"".len();
    let end = text[start..].find('"')?;
    Some(text[start..start + end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; returns its address.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { break };
                std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let _ = io::copy(&mut r, &mut s);
                });
            }
        });
        addr
    }

    fn relay_to_echo() -> Relay {
        Relay::start("127.0.0.1:0".parse().unwrap(), Endpoint::Tcp(echo())).unwrap()
    }

    fn connect(r: &Relay) -> TcpStream {
        let Endpoint::Tcp(addr) = r.listen() else {
            unreachable!()
        };
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        s
    }

    fn round_trip(s: &mut TcpStream, text: &str) -> io::Result<String> {
        s.write_all(text.as_bytes())?;
        let mut buf = vec![0u8; text.len()];
        s.read_exact(&mut buf)?;
        Ok(String::from_utf8(buf).unwrap())
    }

    #[test]
    fn a_named_peer_is_cut_paused_and_healed_others_untouched() {
        let r = relay_to_echo();
        let mut a = connect(&r);
        let mut b = connect(&r);
        let hello_a = "INFO {\"server_id\":\"X\",\"server_name\":\"n1\"}\r\n";
        assert_eq!(round_trip(&mut a, hello_a).unwrap(), hello_a);
        assert_eq!(round_trip(&mut b, "PING\r\n").unwrap(), "PING\r\n");
        assert!(r.peers().contains(&Some("n1".to_string())));

        r.block("n1", Block::Pause);
        a.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        assert!(a.read_exact(&mut buf).is_err(), "nothing passes a pause");
        assert_eq!(round_trip(&mut b, "PONG\r\n").unwrap(), "PONG\r\n");
        r.heal("n1");
        a.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held", "a pause delays, it does not drop");

        r.block("n1", Block::Cut);
        let mut rest = Vec::new();
        assert_eq!(a.read_to_end(&mut rest).unwrap_or(0), 0, "closed");
        assert_eq!(round_trip(&mut b, "PING\r\n").unwrap(), "PING\r\n");
        // A new connection naming the cut peer is closed once it names it.
        let mut again = connect(&r);
        let _ = again.write_all(hello_a.as_bytes());
        let mut rest = Vec::new();
        let _ = again.read_to_end(&mut rest);
        assert!(rest.len() <= hello_a.len(), "{rest:?}");
        r.heal("n1");
        let mut healed = connect(&r);
        assert_eq!(round_trip(&mut healed, hello_a).unwrap(), hello_a);
    }

    #[test]
    fn a_unix_socket_relays_to_tcp_and_only_loopback_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.sock");
        let r = Relay::start(Endpoint::Unix(path.clone()), Endpoint::Tcp(echo())).unwrap();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"over unix").unwrap();
        let mut buf = [0u8; 9];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"over unix");
        drop(r);
        assert!(!path.exists(), "the socket file goes with the relay");
        let e = "10.0.0.1:4222".parse::<Endpoint>().unwrap_err();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!("nonsense".parse::<Endpoint>().is_err());
    }
}
