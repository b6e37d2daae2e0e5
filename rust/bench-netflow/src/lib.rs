//! Nothing but the benchmark in `benches/netflow.rs`.
