//! netdev
