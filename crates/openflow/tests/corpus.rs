//! Replays the fuzz corpus (crates/openflow/fuzz/corpus/decode): malformed
//! and truncated messages, each of which must be refused with a
//! well-formed error (see `openflow::check_decode`), plus a few valid ones.
//! Also checks the specific error each malformed case must get.

use openflow::msg::{decode, Ctx};
use openflow::{ErrorKind, Framer, Version};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/decode");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    v.sort();
    v
}

#[test]
fn corpus_never_panics_and_errors_are_well_formed() {
    let c = corpus();
    assert!(c.len() >= 15);
    for (_, data) in &c {
        openflow::check_decode(data);
    }
}

#[test]
fn corpus_cases_get_the_specs_errors() {
    let expect = [
        ("flowmod13_bad_prereq", Some(ErrorKind::BadPrereq)),
        ("flowmod13_truncated", Some(ErrorKind::BadLen)),
        ("flowmod13_unknown_inst", Some(ErrorKind::UnknownInst)),
        ("flowmod13_out_port0", Some(ErrorKind::BadOutPort)),
        ("multipart_unknown", Some(ErrorKind::BadMultipart)),
        ("experimenter_unknown", Some(ErrorKind::BadExperimenter)),
        ("nx_flowmod_short", Some(ErrorKind::BadLen)),
        ("nxst_flow_badmatch", Some(ErrorKind::BadField)),
        ("packet_out13_bad_actions", Some(ErrorKind::BadActionLen)),
        ("group_mod_bad_type", Some(ErrorKind::BadGroupType)),
        ("meter_mod_bad_band", Some(ErrorKind::BadBand)),
        ("bundle_add_truncated", Some(ErrorKind::BundleBadType)),
        ("echo13", None),
        ("features10", None),
    ];
    let c = corpus();
    for (name, want) in expect {
        let data = &c.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name} in corpus")).1;
        let mut f = Framer::default();
        f.handle_bytes(data);
        let m = f.poll_message().unwrap().unwrap();
        let v = Version::from_wire(m.header.version).unwrap();
        let got = decode(&Ctx::new(v), &m).err();
        assert_eq!(got, want, "{name}");
    }
    // A length below the header size breaks the stream (the connection closes).
    let data = &c.iter().find(|(n, _)| n == "length_below_header").unwrap().1;
    let mut f = Framer::default();
    f.handle_bytes(data);
    assert_eq!(f.poll_message(), Err(ErrorKind::BadLen));
}
