//! The libibverbs provider (part B; placeholder).
