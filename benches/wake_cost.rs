//! What one wake-up costs the thread that wakes, on this host: the floor
//! under a paced client's CPU per message. A publisher that honours each
//! message's intended time wakes at least once per message, and a consumer
//! that stamps each delivery on arrival wakes once per delivery; no code
//! of jsbench's runs below that floor, so the pacing profile's ratio of
//! client to server CPU (docs/pacing.md) is read against it.
//!
//! `cargo bench --bench wake_cost` times `JSBENCH_WAKES` wake-ups (default
//! 2,000) per mechanism and interval, with the 1 µs timer slack jsbench's
//! senders set, and prints for each the waking thread's CPU time per
//! wake-up (CLOCK_THREAD_CPUTIME_ID, so the idle time between wake-ups is
//! not counted) and how late it woke (p50, p90 past the deadline). Timer
//! wake-ups are the sender's; the data wake-up is a thread blocked in a
//! read on a loopback TCP socket woken by one byte written at each
//! deadline, as a PubAck or a delivery wakes its reader.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use jsbench::record::schedule::Pacer;

/// Monotonic and thread-CPU clock readings in nanoseconds.
fn read(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec the call writes into.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn now() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// How a timer wake-up waits for an absolute deadline on CLOCK_MONOTONIC.
#[derive(Clone, Copy)]
enum Timer {
    /// `std::thread::sleep` (nanosleep for the time left): the pacer's own.
    Sleep,
    /// clock_nanosleep with TIMER_ABSTIME.
    AbsoluteSleep,
    /// A timerfd armed for the deadline, then a blocking read of it.
    Fd,
    /// ppoll with no descriptors and the time left: what a thread waiting
    /// for a socket or its next send would block in.
    Ppoll,
}

impl Timer {
    fn name(self) -> &'static str {
        match self {
            Timer::Sleep => "timer: nanosleep (the pacer's)",
            Timer::AbsoluteSleep => "timer: clock_nanosleep abs",
            Timer::Fd => "timer: timerfd read",
            Timer::Ppoll => "timer: ppoll",
        }
    }
}

struct Outcome {
    cpu_per_wake_us: f64,
    late_p50_us: f64,
    late_p90_us: f64,
}

fn outcome(cpu_ns: u64, mut late: Vec<u64>) -> Outcome {
    late.sort_unstable();
    let at = |q: f64| late[((late.len() as f64 * q) as usize).min(late.len() - 1)] as f64 / 1e3;
    Outcome {
        cpu_per_wake_us: cpu_ns as f64 / late.len() as f64 / 1e3,
        late_p50_us: at(0.5),
        late_p90_us: at(0.9),
    }
}

fn timer_wakes(timer: Timer, interval_ns: u64, wakes: usize) -> Outcome {
    Pacer::tighten_timer_slack();
    // SAFETY: a plain timerfd; closed at the end.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, 0) };
    assert!(fd >= 0, "timerfd_create failed");
    let mut late = Vec::with_capacity(wakes);
    let start = now();
    let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID);
    for i in 1..=wakes as u64 {
        let deadline = start + i * interval_ns;
        let left = deadline.saturating_sub(now());
        match timer {
            Timer::Sleep => std::thread::sleep(Duration::from_nanos(left)),
            // SAFETY (all three): valid timespecs and descriptors, no
            // memory kept past the call.
            Timer::AbsoluteSleep => unsafe {
                let at = timespec(deadline);
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &at,
                    std::ptr::null_mut(),
                );
            },
            Timer::Fd => unsafe {
                let spec = libc::itimerspec {
                    it_interval: timespec(0),
                    it_value: timespec(deadline),
                };
                libc::timerfd_settime(fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
                let mut expirations = 0u64;
                libc::read(fd, (&mut expirations as *mut u64).cast(), 8);
            },
            Timer::Ppoll => unsafe {
                let left = timespec(left);
                libc::ppoll(std::ptr::null_mut(), 0, &left, std::ptr::null());
            },
        }
        late.push(now().saturating_sub(deadline));
    }
    let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu;
    // SAFETY: `fd` is the timerfd opened above.
    unsafe { libc::close(fd) };
    outcome(cpu, late)
}

/// A reader blocked in `read` on a loopback TCP socket, woken by one byte
/// written at each deadline by another thread (which sleeps to it). Also
/// returns the writer's own CPU per message, a timer wake-up and a write:
/// on loopback the write carries the receiving side's TCP processing and
/// the reader's wake, as a publisher's PUB or a consumer's +ACK does.
fn data_wakes(interval_ns: u64, wakes: usize) -> (Outcome, Outcome) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a loopback port");
    let addr = listener.local_addr().expect("the listener's address");
    let start = now() + 20_000_000;
    let writer = std::thread::spawn(move || {
        Pacer::tighten_timer_slack();
        let mut out = TcpStream::connect(addr).expect("connecting on loopback");
        out.set_nodelay(true).expect("TCP_NODELAY");
        let mut sent = Vec::with_capacity(wakes);
        let mut late = Vec::with_capacity(wakes);
        let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID);
        for i in 1..=wakes as u64 {
            let deadline = start + i * interval_ns;
            std::thread::sleep(Duration::from_nanos(deadline.saturating_sub(now())));
            let at = now();
            late.push(at.saturating_sub(deadline));
            sent.push(at);
            out.write_all(b"x").expect("writing one byte");
        }
        let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu;
        (sent, outcome(cpu, late))
    });
    let (mut input, _) = listener.accept().expect("accepting the writer");
    let mut byte = [0u8; 64];
    let mut arrived = Vec::with_capacity(wakes);
    let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID);
    let mut got = 0;
    while got < wakes {
        let n = input.read(&mut byte).expect("reading the bytes");
        assert!(n > 0, "the writer closed early");
        let at = now();
        arrived.extend(std::iter::repeat_n(at, n));
        got += n;
    }
    let cpu = read(libc::CLOCK_THREAD_CPUTIME_ID) - cpu;
    let (sent, writing) = writer.join().expect("the writer thread");
    let late = sent
        .iter()
        .zip(&arrived)
        .map(|(s, a)| a.saturating_sub(*s))
        .collect();
    (outcome(cpu, late), writing)
}

fn main() {
    let wakes: usize =
        match std::env::var("JSBENCH_WAKES") {
            Ok(v) => v.parse().ok().filter(|&n| n >= 10).unwrap_or_else(|| {
                panic!("JSBENCH_WAKES={v:?} is not a whole number of at least 10")
            }),
            Err(_) => 2_000,
        };
    println!(
        "{wakes} wake-ups each; CPU = the waking thread's CPU time per wake-up; late = past the deadline (timer) or the write (data)"
    );
    println!(
        "{:<34} {:>9} {:>13} {:>11} {:>11}",
        "mechanism", "interval", "CPU us/wake", "late p50", "late p90"
    );
    for interval_us in [1_000u64, 200, 50] {
        let interval_ns = interval_us * 1_000;
        let timers = [Timer::Sleep, Timer::AbsoluteSleep, Timer::Fd, Timer::Ppoll];
        let (reading, writing) = data_wakes(interval_ns, wakes);
        let rows = timers
            .iter()
            .map(|&t| (t.name(), timer_wakes(t, interval_ns, wakes)))
            .chain([
                ("data: blocking read, loopback TCP", reading),
                ("nanosleep + 1-byte write, loopback", writing),
            ]);
        for (name, o) in rows {
            println!(
                "{name:<34} {:>6} us {:>13.2} {:>8.1} us {:>8.1} us",
                interval_us, o.cpu_per_wake_us, o.late_p50_us, o.late_p90_us
            );
        }
    }
}
