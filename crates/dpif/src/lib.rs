//! dpif
