//! Exit statuses, so scripts and CI can tell a bad command line from a
//! failed benchmark, and the error that marks input the user must fix.
//! Which error maps to which status is the command line's call
//! ([`crate::cli::exit_code`]).

use std::fmt;

/// Exit status: everything ran and every invariant held.
pub const EXIT_OK: i32 = 0;
/// Exit status: a scenario failed, an invariant broke, or the server misbehaved.
pub const EXIT_FAILED: i32 = 1;
/// Exit status: bad input (profile, flags, paths); nothing was measured.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the run finished and broke nothing, but some variant's
/// every check was "not applicable" (a power cut on a host without FUSE,
/// say): it proved less than it claims, so it does not pass.
pub const EXIT_NOT_APPLICABLE: i32 = 4;
/// Exit status: interrupted by Ctrl-C (results so far were written).
pub const EXIT_INTERRUPTED: i32 = 130;
/// Exit status: could not decide, never a pass. For `ab`, too few pairs
/// or a judged metric still undecided when the budget ran out; for a run,
/// nothing broke but a variant could not answer its question (a rate
/// search where nothing held down to its floor).
pub const EXIT_INCONCLUSIVE: i32 = 3;

/// Input the user must fix: a bad flag value, an unknown profile, a path
/// that cannot be read. Exits with [`EXIT_USAGE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
