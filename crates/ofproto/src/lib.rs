//! ofproto
