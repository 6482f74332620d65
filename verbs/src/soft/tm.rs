//! TM core (in progress).
