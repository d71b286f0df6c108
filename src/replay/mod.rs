//! Replay: fresh consumers rewinding a recorded stream, instantly or at the
//! original pace, and what is needed to judge them.
//!
//! - [`recording`]: the recorded stream as the server stored it (ground
//!   truth) and the set each deliver policy selects from it.
//! - [`read`]: a replay consumer (ordered push or durable pull) read until
//!   its selection has arrived, every delivery logged.
//! - [`pacing`]: gap error, drift and duration ratio of a replay against
//!   the recording's timestamps, signed.
//!
//! The scenario that drives them is [`crate::scenario::replay`].

pub mod pacing;
pub mod read;
pub mod recording;
