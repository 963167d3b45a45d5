//! wire: packet headers (filled in by the extraction work).
#![deny(unsafe_code)]
