//! A paused pipeline: what `controller(pause)` leaves for the controller to
//! hand back with `NXT_RESUME` (Open vSwitch's "continuations", which
//! ovn-controller uses to answer DHCP, DNS and ICMP errors).
//!
//! The controller treats it as opaque bytes and returns it unchanged; only
//! the switch reads it. xvs lays it out as Open vSwitch does (nested
//! properties: the bridge, whether the packet went through conntrack, then
//! for each table the pause unwinds through its id, the rule's cookie and
//! the actions still to run there), so `ovs-ofctl monitor` can print it.

use crate::actions::Action;

/// The actions still to run in one table's rule when the pipeline paused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frozen {
    pub table_id: u8,
    pub cookie: u64,
    pub actions: Vec<Action>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Continuation {
    /// Which bridge paused (a resume on another bridge is refused).
    pub bridge: [u8; 16],
    /// The packet went through `ct()` before the pause.
    pub conntracked: bool,
    /// Innermost first: the rest of the rule that paused, then the rest of
    /// the rule that resubmitted to it, and so on out.
    pub frames: Vec<Frozen>,
    /// The action set (OpenFlow 1.1+ `write_actions`) accumulated so far.
    pub action_set: Vec<Action>,
    /// The push/pop stack, bottom first: each entry a value and its width
    /// in bytes (what the `push` read: its sub-field's bits, rounded up).
    pub stack: Vec<(u128, u8)>,
}

impl std::hash::Hash for Continuation {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.bridge.hash(h);
        self.conntracked.hash(h);
        for f in &self.frames {
            (f.table_id, f.cookie, f.actions.len()).hash(h);
        }
        self.action_set.len().hash(h);
        self.stack.hash(h);
    }
}
