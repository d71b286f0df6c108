//! Turning results into things people read.

pub mod terminal;
