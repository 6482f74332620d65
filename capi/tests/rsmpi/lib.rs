//! Empty: the programs are the examples of rsmpi (examples/), unchanged.
