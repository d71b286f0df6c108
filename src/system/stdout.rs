//! Standard output that a closed pipe does not crash. `println!` panics
//! when the reader has gone (`jsbench profiles | head`); a run's results
//! are already on disk by the time its table prints, so the table lost to
//! a closed pipe is dropped quietly and the exit status stays the run's.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Writes `args` and flushes; a closed pipe is not an error, any other
/// failure is said on standard error (where the run's errors go too).
pub fn write(args: Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => eprintln!("warning: could not write to standard output: {e}"),
    }
}

/// `print!` through [`write`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::system::stdout::write(format_args!($($arg)*))
    };
}

/// `println!` through [`write`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::system::stdout::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};
