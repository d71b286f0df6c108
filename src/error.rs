//! How failures map to exit statuses, so scripts and CI can tell a bad
//! command line from a failed benchmark.

use std::fmt;

/// Exit status: everything ran and every invariant held.
pub const EXIT_OK: i32 = 0;
/// Exit status: a scenario failed, an invariant broke, or the server misbehaved.
pub const EXIT_FAILED: i32 = 1;
/// Exit status: bad input (profile, flags, paths); nothing was measured.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: interrupted by Ctrl-C (results so far were written).
pub const EXIT_INTERRUPTED: i32 = 130;

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

/// The exit status for an error that ended a command.
pub fn exit_code(error: &anyhow::Error) -> i32 {
    let usage = error.chain().any(|cause| {
        cause.downcast_ref::<UsageError>().is_some()
            || cause
                .downcast_ref::<crate::profile::ProfileError>()
                .is_some()
    });
    if usage { EXIT_USAGE } else { EXIT_FAILED }
}
