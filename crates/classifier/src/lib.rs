//! classifier
