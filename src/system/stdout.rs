//! Standard output that a closed pipe does not crash. `println!` panics
//! when the reader has gone (`jsbench profiles | head`); a run's results
//! are already on disk by the time its table prints, so the table lost to
//! a closed pipe is dropped quietly and the exit status stays the run's.

use std::fmt::Arguments;
use std::io::{ErrorKind, Write};

/// Writes `args` and flushes; a closed pipe is not an error, any other
/// failure is said on standard error (where the run's errors go too).
/// Control characters are shown escaped: names in the tables come from
/// profiles, results and workers, and an `ESC[` in one would drive the
/// reader's terminal (jsbench itself writes none to standard output).
pub fn write(args: Arguments<'_>) {
    let text = printable(&args.to_string());
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::BrokenPipe => {}
        Err(e) => eprintln!("warning: could not write to standard output: {e}"),
    }
}

/// `text` with every control character but newline and tab escaped
/// (`\u{1b}`), so it prints as text.
pub fn printable(text: &str) -> String {
    let escaped = |c: char| c.is_control() && c != '\n' && c != '\t';
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match escaped(c) {
            true => out.extend(c.escape_unicode()),
            false => out.push(c),
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 51: a metric or worker name holding `ESC[31m` printed raw.
    #[test]
    fn control_characters_print_as_text() {
        let shown = printable("lat\u{1b}[31mency\r\n\tp99\u{7}");
        assert_eq!(shown, "lat\\u{1b}[31mency\\u{d}\n\tp99\\u{7}");
        assert!(!shown.contains('\u{1b}'));
        assert_eq!(printable("plain\n"), "plain\n");
    }
}
