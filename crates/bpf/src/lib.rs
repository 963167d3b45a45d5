//! bpf
