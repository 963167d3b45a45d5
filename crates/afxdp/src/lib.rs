//! afxdp
