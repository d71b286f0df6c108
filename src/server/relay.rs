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
//!
//! A relay can also stand for a slow network ([`Shape`]): a one-way delay
//! and a bandwidth per direction, set and changed while connections run
//! (a leafnode link throttled to find where it stops keeping up). A
//! shaped direction gets a second thread, a delay line: the reader stamps
//! each chunk with when it arrived and queues it, the writer releases it
//! at arrival + delay, paced to the bandwidth. A direction never shaped
//! keeps the one thread that writes what it reads at once, so unshaped
//! relays (every route relay) cost what they did.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::system::error::UsageError;

/// One end of a relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Endpoint {
    /// What `jsbench relay --listen/--to` was given: bad input.
    type Err = UsageError;

    /// `unix:/path/to.sock`, or `host:port` (loopback only).
    fn from_str(s: &str) -> Result<Self, UsageError> {
        if let Some(path) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        let addr: SocketAddr = s.trim_start_matches("tcp:").parse().map_err(|e| {
            UsageError(format!(
                "{s:?} is neither unix:PATH nor an address like 127.0.0.1:4222: {e}"
            ))
        })?;
        if !addr.ip().is_loopback() {
            return Err(UsageError(format!(
                "{addr} is not a loopback address; a relay stays on loopback"
            )));
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

/// A slow network in one direction: what each connection's bytes go
/// through. The default shapes nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// Bytes per second, per connection; `None` for as fast as loopback.
    pub bandwidth: Option<u64>,
    /// One way: a byte read now is written this much later.
    pub delay: Duration,
}

impl Shape {
    pub fn is_none(&self) -> bool {
        self.bandwidth.is_none() && self.delay.is_zero()
    }
}

/// Which way bytes flow through a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the connecting side to where the relay forwards (a leafnode's
    /// traffic to its hub, a route's to the node behind the relay).
    Upstream = 0,
    /// Back to the connecting side.
    Downstream = 1,
}

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
    /// Upstream, downstream: indexed by [`Direction`].
    shape: [Shape; 2],
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

/// A relayed socket, TCP or Unix.
type Sock = Box<dyn Stream>;

trait Stream: Read + Write + Send + Sync {
    fn try_clone(&self) -> io::Result<Sock>;
    fn shutdown(&self);
}

macro_rules! stream {
    ($t:ty) => {
        impl Stream for $t {
            fn try_clone(&self) -> io::Result<Sock> {
                Ok(Box::new(<$t>::try_clone(self)?))
            }

            fn shutdown(&self) {
                let _ = <$t>::shutdown(self, Shutdown::Both);
            }
        }
    };
}
stream!(TcpStream);
stream!(UnixStream);

fn connect(to: &Endpoint) -> io::Result<Sock> {
    Ok(match to {
        Endpoint::Tcp(addr) => {
            let s = TcpStream::connect_timeout(addr, Duration::from_secs(5))?;
            s.set_nodelay(true)?;
            Box::new(s)
        }
        Endpoint::Unix(path) => Box::new(UnixStream::connect(path)?),
    })
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
                Box::new(s)
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                Box::new(s)
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
                remove_stale_socket(path)?;
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

    /// A relay on a free loopback port to `port` on loopback: the route
    /// and leafnode relays of the servers jsbench starts.
    pub fn loopback_to(port: u16) -> io::Result<Relay> {
        let loopback = |port| Endpoint::Tcp(([127, 0, 0, 1], port).into());
        Relay::start(loopback(0), loopback(port))
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

    /// Shapes both directions of every connection, open or to come, as
    /// `shape` (the default lifts it): a symmetric link.
    pub fn shape(&self, shape: Shape) {
        self.shape_toward(Direction::Upstream, shape);
        self.shape_toward(Direction::Downstream, shape);
    }

    /// Shapes one direction of every connection, open or to come. Bytes
    /// already queued keep the arrival stamp they got, so a lifted delay
    /// lets them out at once.
    pub fn shape_toward(&self, direction: Direction, shape: Shape) {
        let mut state = self.shared.state.lock().expect("not poisoned");
        state.shape[direction as usize] = shape;
        self.shared.changed.notify_all();
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

/// Removes a socket a relay before this one left at `path`; anything else
/// there (a file, a folder, a link) is refused by name, never deleted: the
/// path is the user's to give, and a typo must not cost a file.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; the relay listens only on a new or stale socket path",
                path.display()
            ),
        )),
    }
}

fn accept_loop(listener: Listener, to: Endpoint, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        // Nothing to accept yet (the listener does not block), or a failed
        // accept: look again later.
        let Ok(client) = listener.accept() else {
            std::thread::sleep(POLL);
            continue;
        };
        {
            let state = shared.state.lock().expect("not poisoned");
            if state.cut.contains(ANY_PEER) {
                client.shutdown();
                continue;
            }
        }
        let Ok(upstream) = connect(&to) else {
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
        for (reader, writer, direction) in [
            (client_reader, upstream_writer, Direction::Upstream),
            (upstream_reader, client_writer, Direction::Downstream),
        ] {
            let (this, shared) = (conn.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name("relay-copy".into())
                .spawn(move || copy(reader, writer, &this, &shared, direction));
            if spawned.is_err() {
                conn.close();
            }
        }
    }
}

/// Forwards `from` to `to` until either closes, holding while the
/// connection's peer is paused; upstream, learns the peer from the first
/// bytes and closes the connection if that peer is cut. Once the
/// direction is shaped, chunks go through a delay line of their own
/// thread for the rest of the connection (writing some directly and some
/// through the line would reorder them).
fn copy(
    mut from: Sock,
    mut to: Sock,
    conn: &Arc<Conn>,
    shared: &Arc<Shared>,
    direction: Direction,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen: Vec<u8> = Vec::new();
    let mut line: Option<SyncSender<Chunk>> = None;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let arrived = Instant::now();
        if direction == Direction::Upstream && conn.peer().is_none() && seen.len() < NAME_WINDOW {
            seen.extend_from_slice(&buf[..n]);
            if let Some(name) = server_name(&seen) {
                *conn.peer.lock().expect("not poisoned") = Some(name);
            }
        }
        let Some(shape) = hold(conn, shared, direction) else {
            return;
        };
        if line.is_none() && !shape.is_none() {
            let Some(sender) = delay_line(&to, conn, shared, direction) else {
                break;
            };
            line = Some(sender);
        }
        let sent = match &line {
            Some(sender) => sender.send((arrived, buf[..n].to_vec())).is_ok(),
            None => to.write_all(&buf[..n]).is_ok(),
        };
        if !sent {
            break;
        }
    }
    if line.is_none() {
        conn.close();
    }
    // With a delay line, the line closes the connection once it has
    // written what was queued: a close reaches the far side late too.
}

/// Waits while the connection's peer is paused and returns how its
/// direction is shaped; `None` when it is cut or the relay stops (the
/// connection is then closed).
fn hold(conn: &Conn, shared: &Shared, direction: Direction) -> Option<Shape> {
    let mut state = shared.state.lock().expect("not poisoned");
    loop {
        let peer = conn.peer();
        if shared.stop.load(Ordering::Relaxed)
            || conn.closed.load(Ordering::Relaxed)
            || state.blocked(peer.as_deref(), &state.cut)
        {
            drop(state);
            conn.close();
            return None;
        }
        if !state.blocked(peer.as_deref(), &state.paused) {
            return Some(state.shape[direction as usize]);
        }
        state = shared
            .changed
            .wait_timeout(state, POLL)
            .expect("not poisoned")
            .0;
    }
}

/// Bytes read and when they arrived.
type Chunk = (Instant, Vec<u8>);

/// Chunks a delay line holds before its reader waits: a bounded queue, so
/// a link slower than its sender backs up into the sender's socket as a
/// real one would, rather than into memory.
const LINE_CHUNKS: usize = 1024;
/// A paced chunk is written in pieces of about this long at the
/// bandwidth, so a large read leaves as a stream, not one late burst.
const PACE_SLICE: Duration = Duration::from_millis(5);

/// Starts the writer thread of a shaped direction; `None` if it could
/// not be started.
fn delay_line(
    to: &Sock,
    conn: &Arc<Conn>,
    shared: &Arc<Shared>,
    direction: Direction,
) -> Option<SyncSender<Chunk>> {
    let (sender, receiver) = sync_channel(LINE_CHUNKS);
    let to = to.try_clone().ok()?;
    let (conn, shared) = (conn.clone(), shared.clone());
    std::thread::Builder::new()
        .name("relay-line".into())
        .spawn(move || release(receiver, to, &conn, &shared, direction))
        .ok()?;
    Some(sender)
}

/// Writes each chunk at its arrival + the delay, no faster than the
/// bandwidth (read again before each piece, so a change applies at
/// once), and closes the connection when the reader is gone and the
/// line is empty.
fn release(
    chunks: Receiver<Chunk>,
    mut to: Sock,
    conn: &Conn,
    shared: &Shared,
    direction: Direction,
) {
    // When the link is free for the next byte: a token bucket one slice deep.
    let mut free = Instant::now();
    'chunks: while let Ok((arrived, bytes)) = chunks.recv() {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let Some(shape) = hold(conn, shared, direction) else {
                return;
            };
            let due = arrived + shape.delay;
            let now = Instant::now();
            if due > now {
                // Sleep in steps, so a lifted delay or a stop is seen.
                std::thread::sleep((due - now).min(POLL));
                continue;
            }
            let piece = match shape.bandwidth {
                None => rest.len(),
                Some(rate) => {
                    let rate = rate.max(1);
                    if free > now {
                        std::thread::sleep((free - now).min(POLL));
                        continue;
                    }
                    let slice = (rate as f64 * PACE_SLICE.as_secs_f64()) as usize;
                    let piece = slice.clamp(1, rest.len());
                    // Idle time does not bank more than one slice of credit.
                    let start = free.max(now.checked_sub(PACE_SLICE).unwrap_or(now));
                    free = start + Duration::from_secs_f64(piece as f64 / rate as f64);
                    piece
                }
            };
            if to.write_all(&rest[..piece]).is_err() {
                break 'chunks;
            }
            rest = &rest[piece..];
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

    /// Issue 51: the relay deleted whatever was at its Unix `--listen`
    /// path, a regular file included.
    #[test]
    fn a_unix_path_holding_a_file_is_refused_and_a_stale_socket_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("precious");
        std::fs::write(&path, "not a socket").unwrap();
        let to = Endpoint::Tcp(echo());
        let e = Relay::start(Endpoint::Unix(path.clone()), to.clone())
            .err()
            .expect("a file at the path is refused");
        assert!(e.to_string().contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");

        let socket = dir.path().join("relay.sock");
        let stale = UnixListener::bind(&socket).unwrap();
        drop(stale);
        let relay = Relay::start(Endpoint::Unix(socket.clone()), to).unwrap();
        drop(relay);
    }

    #[test]
    fn a_named_peer_is_cut_paused_and_healed_others_untouched() {
        let r = relay_to_echo();
        let mut a = connect(&r);
        let mut b = connect(&r);
        let hello_a = "INFO {\"server_id\":\"X\",\"server_name\":\"n1\"}\r\n";
        assert_eq!(round_trip(&mut a, hello_a).unwrap(), hello_a);
        assert_eq!(round_trip(&mut b, "PING\r\n").unwrap(), "PING\r\n");
        // The open connections' peers: the one that named itself is known.
        let state = r.shared.state.lock().unwrap();
        let open = state
            .conns
            .iter()
            .filter(|c| !c.closed.load(Ordering::Relaxed));
        assert!(open.map(|c| c.peer()).any(|p| p.as_deref() == Some("n1")));
        drop(state);

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
        assert!(e.0.contains("not a loopback address"), "{e}");
        assert!("nonsense".parse::<Endpoint>().is_err());
    }

    /// Sends `bytes` through `s` from a thread of its own while reading
    /// as many back, and returns how long the whole took.
    fn echo_through(s: &TcpStream, bytes: usize) -> Duration {
        let mut writer = s.try_clone().unwrap();
        let mut reader = s.try_clone().unwrap();
        reader
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let start = Instant::now();
        let sending = std::thread::spawn(move || writer.write_all(&vec![7u8; bytes]));
        let mut back = vec![0u8; bytes];
        reader.read_exact(&mut back).unwrap();
        sending.join().unwrap().unwrap();
        assert!(back.iter().all(|b| *b == 7));
        start.elapsed()
    }

    #[test]
    fn a_delay_holds_each_way_and_lifting_it_applies_to_open_connections() {
        let r = relay_to_echo();
        let shaping = |d: Direction| r.shared.state.lock().unwrap().shape[d as usize];
        assert!(shaping(Direction::Upstream).is_none());
        let mut s = connect(&r);
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(round_trip(&mut s, "fast").unwrap(), "fast");
        let delay = Duration::from_millis(150);
        r.shape(Shape {
            bandwidth: None,
            delay,
        });
        let start = Instant::now();
        assert_eq!(round_trip(&mut s, "slow").unwrap(), "slow");
        let took = start.elapsed();
        // Lower bounds hold on a busy machine; the upper one is loose.
        assert!(took >= 2 * delay - Duration::from_millis(10), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        r.shape(Shape::default());
        let start = Instant::now();
        for _ in 0..5 {
            assert_eq!(round_trip(&mut s, "again").unwrap(), "again");
        }
        assert!(start.elapsed() < 2 * delay, "{:?}", start.elapsed());
    }

    #[test]
    fn a_bandwidth_paces_a_megabyte_to_about_a_second() {
        let r = relay_to_echo();
        let s = connect(&r);
        let unshaped = echo_through(&s, 1 << 20);
        r.shape_toward(
            Direction::Upstream,
            Shape {
                bandwidth: Some(1 << 20),
                delay: Duration::ZERO,
            },
        );
        let shaped = echo_through(&s, 1 << 20);
        assert!(shaped >= Duration::from_millis(900), "{shaped:?}");
        assert!(shaped < Duration::from_secs(20), "{shaped:?}");
        assert!(
            unshaped < shaped,
            "{unshaped:?} unshaped, {shaped:?} shaped"
        );
    }

    #[test]
    fn a_shaped_connection_is_still_paused_and_cut() {
        let r = relay_to_echo();
        r.shape(Shape {
            bandwidth: Some(100_000),
            delay: Duration::from_millis(20),
        });
        let mut a = connect(&r);
        let hello = "INFO {\"server_id\":\"X\",\"server_name\":\"n1\"}\r\n";
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut a, hello).unwrap(), hello);
        r.block("n1", Block::Pause);
        a.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        a.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        assert!(a.read_exact(&mut buf).is_err(), "nothing passes a pause");
        r.heal("n1");
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");
        r.block("n1", Block::Cut);
        let mut rest = Vec::new();
        assert_eq!(a.read_to_end(&mut rest).unwrap_or(0), 0, "closed");
    }
}
