//! The service message by message, against a bridge made of a few cells.

use super::*;
use openflow::Framer;
use std::cell::RefCell;

#[derive(Default)]
struct Fake {
    /// Every call of apply_flow_mods: the mods' priorities.
    flow_mod_calls: RefCell<Vec<Vec<u32>>>,
    /// Rules as (table, priority, cookie, flags).
    rules: RefCell<Vec<(u8, u32, u64, u16)>>,
    /// A flow mod with this priority fails.
    fail_priority: Option<u32>,
    miss: RefCell<Vec<Miss>>,
    packet_outs: RefCell<usize>,
    ports: RefCell<Vec<PortDesc>>,
    groups: RefCell<Vec<u32>>,
}

fn stats(table: u8, priority: u32, cookie: u64, flags: u16) -> FlowStats {
    FlowStats {
        table,
        priority: priority as u16,
        idle_timeout: 0,
        hard_timeout: 0,
        flags,
        importance: 0,
        cookie,
        packets: 0,
        bytes: 0,
        duration_ms: 0,
        idle_age_s: 0,
        hard_age_s: 0,
        matched: Match::CATCHALL,
        instructions: Vec::new(),
    }
}

impl Bridge for Fake {
    fn name(&self) -> String {
        "br-test".into()
    }
    fn now_ms(&self) -> u64 {
        0
    }
    fn port_descs(&self) -> Vec<PortDesc> {
        self.ports.borrow().clone()
    }
    fn apply_flow_mods(&self, mods: &[(FlowModCmd, FlowSpec)]) -> (Result<(), (usize, ErrorKind)>, Vec<Removed>) {
        self.flow_mod_calls.borrow_mut().push(mods.iter().map(|(_, s)| s.priority).collect());
        if let Some(i) = mods.iter().position(|(_, s)| Some(s.priority) == self.fail_priority) {
            return (Err((i, ErrorKind::BadTableId)), Vec::new());
        }
        let mut removed = Vec::new();
        let mut rules = self.rules.borrow_mut();
        for (cmd, s) in mods {
            match cmd {
                FlowModCmd::Add => rules.push((s.table, s.priority, s.cookie, s.flags)),
                _ => {
                    let (gone, keep): (Vec<_>, Vec<_>) = rules.drain(..).partition(|r| r.2 & s.cookie_mask == s.cookie);
                    *rules = keep;
                    removed.extend(gone.into_iter().map(|r| Removed { reason: 2, stats: stats(r.0, r.1, r.2, r.3) }));
                }
            }
        }
        (Ok(()), removed)
    }
    fn group_meter_mod(&self, m: &Msg) -> (Result<(), ErrorKind>, Vec<Removed>) {
        if let Msg::GroupMod(g) = m {
            self.groups.borrow_mut().push(g.group_id);
        }
        (Ok(()), Vec::new())
    }
    fn packet_out(&self, _po: &msg::PacketOut) -> Result<(), ErrorKind> {
        *self.packet_outs.borrow_mut() += 1;
        Ok(())
    }
    fn port_mod(&self, _v: Version, _pm: &msg::PortMod) -> Result<(), ErrorKind> {
        Ok(())
    }
    fn tlv_mod(&self, _tm: &msg::tlv::TlvTableMod) -> Result<(), ErrorKind> {
        Ok(())
    }
    fn tlv_table(&self) -> (u32, u16, Vec<msg::tlv::TlvMap>) {
        (0, 0, Vec::new())
    }
    fn resume(&self, _r: &msg::Resume) -> Result<(), ErrorKind> {
        Ok(())
    }
    fn ct_flush(&self, _f: &msg::ct_flush::CtFlush) -> usize {
        0
    }
    fn ct_flush_zone(&self, _zone: u16) -> usize {
        0
    }
    fn flow_stats(&self, keep: &mut RuleFilter<'_>) -> Vec<FlowStats> {
        self.rules
            .borrow()
            .iter()
            .filter(|r| keep(r.0, &Match::CATCHALL.key, &Match::CATCHALL.mask, r.2, &[]))
            .map(|r| stats(r.0, r.1, r.2, r.3))
            .collect()
    }
    fn table_stats(&self) -> Vec<TableCounts> {
        vec![(0, 0, 0); 254]
    }
    fn port_stats(&self) -> Vec<msg::PortStats> {
        Vec::new()
    }
    fn group_stats(&self, _group: u32) -> Vec<GroupStats> {
        Vec::new()
    }
    fn group_descs(&self) -> Vec<msg::GroupMod> {
        Vec::new()
    }
    fn meter_stats(&self, _meter: u32) -> Vec<MeterStats> {
        Vec::new()
    }
    fn meter_configs(&self, _meter: u32) -> Vec<msg::MeterMod> {
        Vec::new()
    }
    fn set_table_miss(&self, miss: Miss) {
        self.miss.borrow_mut().push(miss);
    }
}

fn frame(b: &[u8]) -> Message {
    let mut f = Framer::default();
    f.handle_bytes(b);
    f.poll_message().expect("framed").expect("one message")
}

fn svc(fail_mode: Option<FailMode>) -> Service {
    Service::new(Config { versions: Vec::new(), dpid: 1, fail_mode })
}

/// Connects and negotiates `v`; drops the output so far.
fn open(s: &mut Service, br: &Fake, kind: Kind, v: Version) -> ConnId {
    let id = s.connect(kind, "peer", 0);
    s.receive(id, frame(&openflow::header::hello(&[v], 1)), 0, br);
    assert_eq!(s.version(id), Some(v));
    s.take_output();
    id
}

/// The messages for `id` in the output, as (type byte, bytes).
fn to(out: &[Output], id: ConnId) -> Vec<(u8, Vec<u8>)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Reply(i, b) | Output::Async(i, b) if *i == id => Some((b[1], b.clone())),
            _ => None,
        })
        .collect()
}

fn error_code(b: &[u8]) -> (u16, u16) {
    assert_eq!(b[1], t::ERROR, "not an error: {b:?}");
    (u16::from_be_bytes([b[8], b[9]]), u16::from_be_bytes([b[10], b[11]]))
}

fn flow_mod(v: Version, xid: u32, text: &str) -> Vec<u8> {
    let spec = ofp_types::parse_flow(text, ofp_types::Need::Actions).expect("flow");
    let fm = msg::FlowMod {
        cmd: FlowModCmd::Add,
        flags: spec.flags,
        spec,
        buffer_id: msg::NO_BUFFER,
        out_port: msg::OFPP_ANY,
        out_group: msg::OFPG_ANY,
        importance: 0,
    };
    msg::encode_flow_mod(v, xid, &fm)
}

#[test]
fn hello_negotiates_the_highest_common_version_and_features_answer() {
    let br = Fake::default();
    let mut s = svc(None);
    let id = s.connect(Kind::Service, "ofctl", 0);
    let out = s.take_output();
    assert_eq!(to(&out, id)[0].0, t::HELLO, "our HELLO goes first");
    s.receive(id, frame(&openflow::header::hello(&[Version::Of13, Version::Of14], 7)), 0, &br);
    assert_eq!(s.version(id), Some(Version::Of14));
    s.receive(id, frame(&msg::encode_simple(Version::Of14, t::FEATURES_REQUEST, 9, &[])), 0, &br);
    let out = s.take_output();
    let r = to(&out, id);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, t::FEATURES_REPLY);
    assert_eq!(&r[0].1[4..8], &9u32.to_be_bytes(), "the reply carries the request's xid");
}

#[test]
fn anything_but_hello_before_negotiation_is_refused_and_a_version_mismatch_closes() {
    let br = Fake::default();
    let mut s = Service::new(Config { versions: vec![Version::Of10], dpid: 1, fail_mode: None });
    let id = s.connect(Kind::Service, "ofctl", 0);
    s.take_output();
    s.receive(id, frame(&msg::encode_simple(Version::Of13, t::FEATURES_REQUEST, 2, &[])), 0, &br);
    let out = s.take_output();
    assert_eq!(error_code(&to(&out, id)[0].1).0, 1, "OFPET_BAD_REQUEST");
    assert_eq!(s.version(id), None);
    // A peer that speaks only 1.3 cannot talk to a 1.0-only bridge.
    s.receive(id, frame(&openflow::header::hello(&[Version::Of13], 3)), 0, &br);
    let out = s.take_output();
    assert_eq!(error_code(&to(&out, id)[0].1), (0, 0), "OFPET_HELLO_FAILED / INCOMPATIBLE");
    assert!(out.contains(&Output::Close(id)));
}

#[test]
fn a_new_master_demotes_the_old_one_and_stale_generations_are_refused() {
    let br = Fake::default();
    let mut s = svc(None);
    let v = Version::Of13;
    let a = open(&mut s, &br, Kind::Controller, v);
    let b = open(&mut s, &br, Kind::Controller, v);
    s.receive(a, frame(&msg::encode_role_request(v, 1, ROLE_MASTER, 5)), 0, &br);
    s.receive(b, frame(&msg::encode_role_request(v, 2, ROLE_MASTER, 6)), 0, &br);
    s.take_output();
    // A is now a slave: it may not change the tables.
    s.receive(a, frame(&flow_mod(v, 3, "priority=1,actions=drop")), 0, &br);
    let out = s.take_output();
    assert_eq!(error_code(&to(&out, a)[0].1), (1, 10), "OFPBRC_IS_SLAVE");
    assert!(br.flow_mod_calls.borrow().is_empty());
    s.receive(b, frame(&flow_mod(v, 4, "priority=1,actions=drop")), 0, &br);
    assert!(to(&s.take_output(), b).is_empty(), "the master's flow mod is accepted silently");
    assert_eq!(br.flow_mod_calls.borrow().len(), 1);
    // A generation older than the last one claimed is stale.
    s.receive(a, frame(&msg::encode_role_request(v, 5, ROLE_MASTER, 4)), 0, &br);
    let out = s.take_output();
    assert_eq!(error_code(&to(&out, a)[0].1), (11, 0), "OFPRRFC_STALE");
}

#[test]
fn snoopers_see_requests_and_replies_of_other_connections() {
    let br = Fake::default();
    let mut s = svc(None);
    let v = Version::Of13;
    let snoop = open(&mut s, &br, Kind::Snoop, v);
    let c = open(&mut s, &br, Kind::Service, v);
    let req = msg::encode_simple(v, t::ECHO_REQUEST, 42, b"hi");
    s.receive(c, frame(&req), 0, &br);
    let out = s.take_output();
    let seen = to(&out, snoop);
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].1, req);
    assert_eq!(seen[1].0, t::ECHO_REPLY);
    assert!(
        out.iter().any(|o| matches!(o, Output::Async(i, _) if *i == snoop)),
        "copies go out as asynchronous messages"
    );
    // The snoop connection's own messages are ignored.
    s.receive(snoop, frame(&req), 0, &br);
    assert!(s.take_output().is_empty());
}

fn packet<'a>(reason: u8, data: &'a [u8], controller_id: Option<u16>) -> PacketIn<'a> {
    PacketIn {
        reason,
        table_id: 0,
        cookie: 0,
        in_port: 1,
        max_len: 0xffff,
        data,
        full_len: data.len(),
        controller_id,
        metadata: None,
        userdata: &[],
        continuation: None,
    }
}

#[test]
fn packet_ins_follow_version_role_and_controller_id() {
    let br = Fake::default();
    let mut s = svc(None);
    let c10 = open(&mut s, &br, Kind::Controller, Version::Of10);
    let c13 = open(&mut s, &br, Kind::Controller, Version::Of13);
    let tool = open(&mut s, &br, Kind::Service, Version::Of13);
    let data = [0u8; 60];
    // A table miss goes to 1.0 controllers only (1.3 needs a table-miss flow).
    s.packet_in(&packet(0, &data, None));
    let out = s.take_output();
    assert_eq!(to(&out, c10).len(), 1);
    assert!(to(&out, c13).is_empty());
    assert!(to(&out, tool).is_empty(), "a tool gets nothing until it asks");
    // An explicit controller action goes to both controllers.
    s.packet_in(&packet(1, &data, None));
    let out = s.take_output();
    assert_eq!((to(&out, c10).len(), to(&out, c13).len()), (1, 1));
    // A slave gets none.
    s.receive(c13, frame(&msg::encode_role_request(Version::Of13, 1, ROLE_SLAVE, 1)), 0, &br);
    s.take_output();
    s.packet_in(&packet(1, &data, None));
    assert!(to(&s.take_output(), c13).is_empty());
    // controller(id=7): nobody has id 7, so it is dropped and counted.
    let before = s.packet_in_dropped;
    s.packet_in(&packet(1, &data, Some(7)));
    assert!(s.take_output().is_empty());
    assert_eq!(s.packet_in_dropped, before + 1);
}

#[test]
fn silent_controllers_get_an_echo_then_are_closed() {
    let br = Fake::default();
    let mut s = svc(None);
    let c = open(&mut s, &br, Kind::Controller, Version::Of13);
    let tool = open(&mut s, &br, Kind::Service, Version::Of13);
    s.tick(ECHO_IDLE_MS - 1, &br);
    assert!(to(&s.take_output(), c).is_empty());
    s.tick(ECHO_IDLE_MS + 1, &br);
    let out = s.take_output();
    assert_eq!(to(&out, c).iter().map(|m| m.0).collect::<Vec<_>>(), vec![t::ECHO_REQUEST]);
    s.tick(ECHO_IDLE_MS + 500, &br);
    assert!(to(&s.take_output(), c).is_empty(), "one echo per silence");
    s.tick(DEAD_IDLE_MS + 1, &br);
    let out = s.take_output();
    assert!(out.contains(&Output::Close(c)));
    assert!(!out.contains(&Output::Close(tool)), "local tools have no keepalive");
}

#[test]
fn the_fail_mode_follows_controller_connections() {
    let br = Fake::default();
    let mut s = svc(Some(FailMode::Secure));
    s.tick(0, &br);
    assert_eq!(*br.miss.borrow(), vec![Miss::Drop]);
    let c = open(&mut s, &br, Kind::Controller, Version::Of13);
    assert_eq!(*br.miss.borrow(), vec![Miss::Drop, Miss::Controller]);
    s.tick(1, &br);
    assert_eq!(br.miss.borrow().len(), 2, "set only when it changes");
    s.disconnect(c, &br);
    assert_eq!(*br.miss.borrow(), vec![Miss::Drop, Miss::Controller, Miss::Drop]);
    let mut s = svc(Some(FailMode::Standalone));
    s.tick(0, &br);
    assert_eq!(br.miss.borrow().last(), Some(&Miss::Normal));
}

fn bundle_ctl(v: Version, xid: u32, id: u32, ctrl: u16) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&id.to_be_bytes());
    body.extend_from_slice(&ctrl.to_be_bytes());
    body.extend_from_slice(&0u16.to_be_bytes());
    msg::encode_simple(v, t::BUNDLE_CONTROL, xid, &body)
}

fn bundle_add(v: Version, xid: u32, id: u32, inner: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&id.to_be_bytes());
    body.extend_from_slice(&[0, 0, 0, 0]);
    body.extend_from_slice(inner);
    msg::encode_simple(v, t::BUNDLE_ADD_MESSAGE, xid, &body)
}

#[test]
fn a_bundle_commits_its_flow_mods_in_one_change_or_none() {
    let v = Version::Of14;
    let br = Fake { fail_priority: Some(99), ..Default::default() };
    let mut s = svc(None);
    let c = open(&mut s, &br, Kind::Service, v);
    s.receive(c, frame(&bundle_ctl(v, 1, 7, 0)), 0, &br);
    s.receive(c, frame(&bundle_add(v, 2, 7, &flow_mod(v, 2, "priority=10,actions=drop"))), 0, &br);
    s.receive(c, frame(&bundle_add(v, 3, 7, &flow_mod(v, 3, "priority=11,actions=drop"))), 0, &br);
    assert!(br.flow_mod_calls.borrow().is_empty(), "nothing applies before the commit");
    s.receive(c, frame(&bundle_ctl(v, 4, 7, 4)), 0, &br);
    let out = s.take_output();
    let r = to(&out, c);
    assert_eq!(r.last().map(|m| m.0), Some(t::BUNDLE_CONTROL), "commit reply");
    assert_eq!(*br.flow_mod_calls.borrow(), vec![vec![10, 11]], "one atomic change");
    // A failing member fails the bundle, naming the member and then the commit.
    s.receive(c, frame(&bundle_add(v, 5, 8, &flow_mod(v, 5, "priority=12,actions=drop"))), 0, &br);
    s.receive(c, frame(&bundle_add(v, 6, 8, &flow_mod(v, 6, "priority=99,actions=drop"))), 0, &br);
    s.take_output();
    s.receive(c, frame(&bundle_ctl(v, 7, 8, 4)), 0, &br);
    let out = s.take_output();
    let r = to(&out, c);
    assert_eq!(r.len(), 2);
    assert_eq!(&r[0].1[4..8], &6u32.to_be_bytes(), "the failing member's xid");
    assert_eq!(error_code(&r[1].1), (17, 13), "OFPBFC_MSG_FAILED");
    // A commit of an unknown bundle is refused.
    s.receive(c, frame(&bundle_ctl(v, 9, 8, 4)), 0, &br);
    assert_eq!(error_code(&to(&s.take_output(), c)[0].1), (17, 2), "OFPBFC_BAD_ID");
}

#[test]
fn flow_removed_goes_to_connections_that_want_it_for_rules_that_asked() {
    let v = Version::Of13;
    let br = Fake::default();
    let mut s = svc(None);
    let ctl = open(&mut s, &br, Kind::Controller, v);
    let tool = open(&mut s, &br, Kind::Service, v);
    s.receive(ctl, frame(&flow_mod(v, 1, "cookie=0x1,priority=5,send_flow_rem,actions=drop")), 0, &br);
    s.receive(ctl, frame(&flow_mod(v, 2, "cookie=0x2,priority=6,actions=drop")), 0, &br);
    s.take_output();
    let spec = ofp_types::parse_flow("", ofp_types::Need::NoActions).expect("all");
    s.flow_removed(&br.apply_flow_mods(&[(FlowModCmd::Delete, spec)]).1);
    let out = s.take_output();
    let got = to(&out, ctl);
    assert_eq!(got.len(), 1, "only the rule with send_flow_rem is reported");
    assert_eq!(got[0].0, t::FLOW_REMOVED);
    assert!(to(&out, tool).is_empty());
}

#[test]
fn flow_stats_filter_on_cookie_in_the_service() {
    let v = Version::Of13;
    let br = Fake::default();
    br.rules.borrow_mut().extend([(0, 1, 0x10, 0), (0, 2, 0x20, 0), (3, 3, 0x10, 0)]);
    let mut s = svc(None);
    let c = open(&mut s, &br, Kind::Service, v);
    let mut body = vec![0u8; 0];
    body.extend_from_slice(&msg::mp::AGGREGATE.to_be_bytes());
    body.extend_from_slice(&[0; 6]);
    body.push(0xff); // all tables
    body.extend_from_slice(&[0; 3]);
    body.extend_from_slice(&u32::MAX.to_be_bytes()); // OFPP_ANY on the wire
    body.extend_from_slice(&u32::MAX.to_be_bytes()); // OFPG_ANY
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(&0x10u64.to_be_bytes());
    body.extend_from_slice(&u64::MAX.to_be_bytes());
    body.extend_from_slice(&[0, 1, 0, 4, 0, 0, 0, 0]); // empty OXM match
    s.receive(c, frame(&msg::encode_simple(v, t::MULTIPART_REQUEST, 3, &body)), 0, &br);
    let out = s.take_output();
    let r = to(&out, c);
    assert_eq!(r.len(), 1, "{out:?}");
    let b = &r[0].1;
    // ofp_aggregate_stats_reply after the 16-byte multipart header.
    let flows = u32::from_be_bytes(b[32..36].try_into().expect("4 bytes"));
    assert_eq!(flows, 2, "the two rules with cookie 0x10");
}

#[test]
fn slaves_cannot_send_packets_and_short_packet_outs_are_refused() {
    let v = Version::Of13;
    let br = Fake::default();
    let mut s = svc(None);
    let c = open(&mut s, &br, Kind::Controller, v);
    let po = |data: Vec<u8>| msg::PacketOut {
        buffer_id: msg::NO_BUFFER,
        in_port: ofpp::CONTROLLER,
        actions: vec![Action::Output(ofp_types::OfPort::Port(1))],
        data,
    };
    s.receive(c, frame(&msg::encode_packet_out(v, 1, &po(vec![0; 60]))), 0, &br);
    assert_eq!(*br.packet_outs.borrow(), 1);
    s.receive(c, frame(&msg::encode_packet_out(v, 2, &po(vec![0; 4]))), 0, &br);
    assert_eq!(error_code(&to(&s.take_output(), c)[0].1), (1, 12), "OFPBRC_BAD_PACKET");
    assert_eq!(*br.packet_outs.borrow(), 1);
    s.receive(c, frame(&msg::encode_role_request(v, 3, ROLE_SLAVE, 1)), 0, &br);
    s.take_output();
    s.receive(c, frame(&msg::encode_packet_out(v, 4, &po(vec![0; 60]))), 0, &br);
    assert_eq!(error_code(&to(&s.take_output(), c)[0].1), (1, 10), "OFPBRC_IS_SLAVE");
    assert_eq!(*br.packet_outs.borrow(), 1);
}
